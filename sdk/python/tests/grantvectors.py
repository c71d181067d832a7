"""Write test/vectors/grants.json: signed grants, key sets and JCS cases that
every verifier (Go, Python, TypeScript, a service's own) must judge alike.

    python sdk/python/tests/grantvectors.py        # rewrites the file
    python sdk/python/tests/grantvectors.py --check

It signs with seeds derived from fixed labels: they are TEST ONLY and are
written into the file so any language can make more cases. The output is
the same on every run (Ed25519 signatures are deterministic).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gated.grant import canonical_json, key_id  # noqa: E402
from gated.wire import encode_proposal  # noqa: E402

OUT = Path(__file__).resolve().parents[3] / "test" / "vectors" / "grants.json"

NOW = 1_795_000_000
"""2026-11-18T09:46:40Z: the clock of every case without its own."""


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


class TestKey:
    """A signing key made from a label; its seed is for tests only."""

    def __init__(self, label: str, created_at: int, max_ttl_s: int, retired_at: int | None = None) -> None:
        self.seed = hashlib.sha256(b"gated grant test vectors, TEST ONLY: " + label.encode()).digest()
        self.private = Ed25519PrivateKey.from_private_bytes(self.seed)
        self.public = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.kid = key_id(self.public)
        self.created_at, self.max_ttl_s, self.retired_at = created_at, max_ttl_s, retired_at

    def jwk(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kid": self.kid, "kty": "OKP", "crv": "Ed25519", "x": b64(self.public), "created_at": self.created_at}
        if self.retired_at is not None:
            d["retired_at"] = self.retired_at
        d["max_ttl_s"] = self.max_ttl_s
        return d


ACTIVE = TestKey("active", created_at=NOW - 86_400, max_ttl_s=300)
RETIRED = TestKey("retired", created_at=NOW - 30 * 86_400, max_ttl_s=300, retired_at=NOW - 100)
FRESH = TestKey("fresh", created_at=NOW - 60, max_ttl_s=300)
STRANGER = TestKey("stranger", created_at=NOW - 86_400, max_ttl_s=300)

KEYSETS = {
    "main": {"keys": [ACTIVE.jwk(), RETIRED.jwk(), FRESH.jwk()]},
    # The retired key dropped, as gated drops it after retired_at + max_ttl_s.
    "after_drop": {"keys": [ACTIVE.jwk(), FRESH.jwk()]},
}

TARGET = {"device_id": 7, "service": "nginx", "tags": ["production"]}
TARGET_JSON = '{"tags":["production"],"service":"nginx","device_id":7}'
PROPOSAL = {
    "id": "p-grant-1", "tenant": "acme", "kind": "action", "action": "host_restart_service", "class": "write",
    "target": TARGET, "reason": "nginx stopped answering health checks", "blast_radius": "single_device",
    "requested_by": {"agent": "ops-agent", "session": "s-1"},
}
_, PROPOSAL_BYTES = encode_proposal(PROPOSAL)
PROPOSAL_SHA = hashlib.sha256(PROPOSAL_BYTES).hexdigest()
TARGET_SHA = hashlib.sha256(canonical_json(TARGET)).hexdigest()
REVIEWERS = [{"plugin": "sop", "plugin_version": "1.0.0", "persona": "reviewer", "model": ""}]


def expect(**changes: str) -> dict[str, str]:
    e = {
        "tenant": "acme", "proposal_id": "p-grant-1", "proposal_sha256": PROPOSAL_SHA,
        "action": "host_restart_service", "target_json": TARGET_JSON,
    }
    e.update(changes)
    return e


def claims(name: str, **changes: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "v": 1,
        "gid": b64(hashlib.sha256(name.encode()).digest()[:16]),
        "iss": "gated",
        "tenant": "acme",
        "proposal_id": "p-grant-1",
        "proposal_sha256": PROPOSAL_SHA,
        "action": "host_restart_service",
        "target_sha256": TARGET_SHA,
        "policy_revision": "rev-3f2a9c",
        "reviewers": REVIEWERS,
        "iat": NOW - 20,
        "exp": NOW + 280,
    }
    c.update(changes)
    return c


def header(kid: str, **changes: Any) -> dict[str, Any]:
    h: dict[str, Any] = {"alg": "EdDSA", "typ": "gated-grant+jwt", "kid": kid}
    h.update(changes)
    return {k: v for k, v in h.items() if v is not None}


def sign(key: TestKey, hdr: dict[str, Any] | str, payload: dict[str, Any] | str) -> str:
    h = hdr if isinstance(hdr, str) else compact(hdr)
    p = payload if isinstance(payload, str) else compact(payload)
    signing_input = b64(h.encode()) + "." + b64(p.encode())
    return signing_input + "." + b64(key.private.sign(signing_input.encode("ascii")))


def cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def valid(name: str, token: str, payload: dict[str, Any], *, keyset: str = "main", now: int | None = None,
              exp: dict[str, str] | None = None) -> None:
        c: dict[str, Any] = {"name": name, "keyset": keyset}
        if now is not None:
            c["now"] = now
        c.update({"token": token, "expect": exp or expect(), "valid": True, "claims": payload})
        out.append(c)

    def invalid(name: str, token: str, member: str, *, keyset: str = "main", now: int | None = None,
                exp: dict[str, str] | None = None) -> None:
        c: dict[str, Any] = {"name": name, "keyset": keyset}
        if now is not None:
            c["now"] = now
        c.update({"token": token, "expect": exp or expect(), "valid": False, "error_member": member})
        out.append(c)

    # Valid grants.
    p = claims("a reviewer's approval")
    valid("a reviewer's approval", sign(ACTIVE, header(ACTIVE.kid), p), p)
    p = claims("a policy-only approval of a proposal without a target", reviewers=[],
               target_sha256=hashlib.sha256(b"{}").hexdigest(), action="host_get_status")
    valid("a policy-only approval of a proposal without a target", sign(ACTIVE, header(ACTIVE.kid), p), p,
          exp=expect(action="host_get_status", target_json="{}"))
    p = claims("an operator's approval of a held action",
               reviewers=[{"plugin": "operator", "plugin_version": "", "persona": "alice", "model": ""}])
    valid("an operator's approval of a held action", sign(ACTIVE, header(ACTIVE.kid), p), p)
    p = claims("a retired key's grant issued before its retirement", iat=NOW - 150, exp=NOW + 150)
    valid("a retired key's grant issued before its retirement, mid-rotation", sign(RETIRED, header(RETIRED.kid), p), p)
    p = claims("member order and white space are not the signer's business")
    text = "{\n  " + ",\n  ".join(f'"{k}": {json.dumps(v)}' for k, v in reversed(list(p.items()))) + "\n}"
    valid("member order and white space differ from gated's encoder",
          sign(ACTIVE, '{ "kid" : "' + ACTIVE.kid + '", "typ": "gated-grant+jwt", "alg": "EdDSA" }', text), p)
    p = claims("issued a little ahead of the verifier's clock", iat=NOW + 30, exp=NOW + 330)
    valid("issued within the 60 s clock skew", sign(ACTIVE, header(ACTIVE.kid), p), p)
    p = claims("exactly the key's max_ttl_s", iat=NOW - 100, exp=NOW + 200)
    valid("a lifetime of exactly the key's max_ttl_s", sign(ACTIVE, header(ACTIVE.kid), p), p)
    odd_target = '{"z":[1.50,-0.0,1e21,"\\u00e9\\n"],"a":{"\\u20ac":true,"\\ud83d\\ude00":null,"\\ufb33":1E-7}}'
    p = claims("a target digested in JCS", target_sha256=hashlib.sha256(canonical_json(json.loads(odd_target))).hexdigest())
    valid("a target with numbers, escapes and keys JCS reorders", sign(ACTIVE, header(ACTIVE.kid), p), p,
          exp=expect(target_json=odd_target))

    # Forged and altered.
    p = claims("forged")
    invalid("forged: signed by a key gated never published", sign(STRANGER, header(STRANGER.kid), p), "kid")
    invalid("forged: another key's signature under the active key's kid", sign(STRANGER, header(ACTIVE.kid), p), "signature")
    good = sign(ACTIVE, header(ACTIVE.kid), p)
    h64, p64, s64 = good.split(".")
    altered = b64(compact(claims("forged", action="db_drop_table")).encode())
    invalid("altered: the payload changed after signing", f"{h64}.{altered}.{s64}", "signature",
            exp=expect(action="db_drop_table"))
    sig = bytearray(base64.urlsafe_b64decode(s64 + "=="))
    sig[10] ^= 0x01
    invalid("altered: one bit of the signature flipped", f"{h64}.{p64}.{b64(bytes(sig))}", "signature")
    invalid("altered: the signature cut short", f"{h64}.{p64}.{s64[:40]}", "signature")
    invalid("altered: no signature", f"{h64}.{p64}.", "signature")

    # Algorithms and header members.
    invalid('alg "none" without a signature', b64(compact(header(ACTIVE.kid, alg="none")).encode()) + "." + p64 + ".", "alg")
    hs_input = b64(compact(header(ACTIVE.kid, alg="HS256")).encode()) + "." + p64
    hs_sig = hmac.new(ACTIVE.public, hs_input.encode(), hashlib.sha256).digest()
    invalid('alg "HS256" keyed with the public key', hs_input + "." + b64(hs_sig), "alg")
    invalid("alg missing", sign(ACTIVE, header(ACTIVE.kid, alg=None), p), "alg")
    invalid('typ "JWT"', sign(ACTIVE, header(ACTIVE.kid, typ="JWT"), p), "typ")
    invalid("kid missing", sign(ACTIVE, header(None), p), "kid")  # type: ignore[arg-type]
    invalid("kid not in the key set", sign(ACTIVE, header("AAAAAAAAAAAAAAAAAAAAAA"), p), "kid")
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64(STRANGER.public)}
    invalid('header member "jwk" is refused, never followed', sign(STRANGER, header(ACTIVE.kid, jwk=jwk), p), "jwk")
    invalid('header member "jku" is refused, never followed',
            sign(ACTIVE, header(ACTIVE.kid, jku="https://keys.example.org/jwks.json"), p), "jku")
    invalid('header member "x5u" is refused', sign(ACTIVE, header(ACTIVE.kid, x5u="https://keys.example.org/x"), p), "x5u")
    invalid('header member "crit" is refused', sign(ACTIVE, header(ACTIVE.kid, crit=["exp"]), p), "crit")

    # Time and the key's rules.
    p = claims("expired", iat=NOW - 400, exp=NOW - 100)
    invalid("expired", sign(ACTIVE, header(ACTIVE.kid), p), "exp")
    p = claims("expires at this very second", iat=NOW - 300, exp=NOW)
    invalid("expires at the verifier's now", sign(ACTIVE, header(ACTIVE.kid), p), "exp")
    p = claims("a retired key's grant, checked once expired", iat=NOW - 150, exp=NOW + 150)
    invalid("a retired key's valid grant, checked after it expired", sign(RETIRED, header(RETIRED.kid), p), "exp",
            now=NOW + 151)
    invalid("a retired key's grant after the key left the set", sign(RETIRED, header(RETIRED.kid), p), "kid",
            keyset="after_drop")
    p = claims("forged with the retired key after its retirement", iat=NOW - 50, exp=NOW + 100)
    invalid("forged with the retired key after its retirement", sign(RETIRED, header(RETIRED.kid), p), "retired")
    p = claims("exp beyond max_ttl", iat=NOW - 10, exp=NOW + 600)
    invalid("exp - iat beyond the key's max_ttl_s", sign(ACTIVE, header(ACTIVE.kid), p), "max_ttl")
    p = claims("issued before its key was created", iat=NOW - 100, exp=NOW + 100)
    invalid("issued before its key was created", sign(FRESH, header(FRESH.kid), p), "iat")
    p = claims("exp not after iat", iat=NOW + 10, exp=NOW + 10)
    invalid("exp not after iat", sign(ACTIVE, header(ACTIVE.kid), p), "exp")
    p = claims("issued in the future", iat=NOW + 120, exp=NOW + 300)
    invalid("issued beyond the 60 s clock skew", sign(ACTIVE, header(ACTIVE.kid), p), "iat")

    # What it grants, against what is about to run.
    p = claims("replayed")
    tok = sign(ACTIVE, header(ACTIVE.kid), p)
    invalid("replayed: an earlier proposal's grant for a new proposal", tok, "proposal_id",
            exp=expect(proposal_id="p-grant-2", proposal_sha256=hashlib.sha256(b"other bytes").hexdigest()))
    invalid("replayed: the same id, other proposal bytes", tok, "proposal_sha256",
            exp=expect(proposal_sha256=hashlib.sha256(b"other bytes").hexdigest()))
    invalid("another tenant's grant", tok, "tenant", exp=expect(tenant="globex"))
    invalid("another action", tok, "action", exp=expect(action="db_drop_table"))
    invalid("another target", tok, "target_sha256",
            exp=expect(target_json='{"device_id":8,"service":"nginx","tags":["production"]}'))
    invalid("the same target with one more tag", tok, "target_sha256",
            exp=expect(target_json='{"device_id":7,"service":"nginx","tags":["production","eu"]}'))
    invalid("a target with a member twice", tok, "target_sha256",
            exp=expect(target_json='{"device_id":7,"device_id":8,"service":"nginx","tags":["production"]}'))
    invalid("a target with a lone surrogate", tok, "target_sha256",
            exp=expect(target_json='{"device_id":7,"service":"\\ud800","tags":["production"]}'))
    invalid("a target with a number beyond a double", tok, "target_sha256",
            exp=expect(target_json='{"device_id":1e400,"service":"nginx","tags":["production"]}'))

    # The payload's members and types.
    def bad_payload(name: str, member: str, **changes: Any) -> None:
        invalid(name, sign(ACTIVE, header(ACTIVE.kid), claims(name, **changes)), member)

    bad_payload("v is 2", "v", v=2)
    bad_payload("v is a string", "v", v="1")
    bad_payload("iss is not gated", "iss", iss="someone-else")
    bad_payload("gid is too short", "gid", gid="AAAA")
    bad_payload("gid is not base64url", "gid", gid="++++++++++++++++++++++")
    bad_payload("iat is a string", "iat", iat=str(NOW - 20))
    bad_payload("iat is not an integer", "iat", iat=NOW - 20.5)
    bad_payload("exp is null", "exp", exp=None)
    bad_payload("tenant is a number", "tenant", tenant=7)
    bad_payload("target_sha256 in upper case", "target_sha256", target_sha256=TARGET_SHA.upper())
    bad_payload("proposal_sha256 too short", "proposal_sha256", proposal_sha256=PROPOSAL_SHA[:40])
    bad_payload("reviewers is an object", "reviewers", reviewers={"plugin": "sop"})
    bad_payload("a reviewer without a model", "reviewers", reviewers=[{"plugin": "sop", "plugin_version": "1", "persona": "r"}])
    bad_payload("policy_revision is a number", "policy_revision", policy_revision=3)
    p = claims("an unknown payload member")
    p["admin"] = True
    invalid("an unknown payload member", sign(ACTIVE, header(ACTIVE.kid), p), "admin")
    p = claims("a payload member twice")
    twice = compact(p)[:-1] + ',"tenant":"globex"}'
    invalid("a payload member twice", sign(ACTIVE, header(ACTIVE.kid), twice), "format")
    p = claims("a missing payload member")
    del p["target_sha256"]
    invalid("target_sha256 missing", sign(ACTIVE, header(ACTIVE.kid), p), "target_sha256")

    # The token's form.
    invalid("two parts", f"{h64}.{p64}", "format")
    invalid("four parts", f"{h64}.{p64}.{s64}.{s64}", "format")
    invalid("padded base64", f"{h64}.{p64}=.{s64}", "format")
    invalid("the standard base64 alphabet", f"{h64}.{p64}.+{s64[1:]}", "format")
    invalid("a header that is not JSON", b64(b"alg=EdDSA") + "." + p64 + "." + s64, "format")
    invalid("a payload that is not an object", sign(ACTIVE, header(ACTIVE.kid), "[1,2,3]"), "format")
    invalid("an empty token", "", "format")
    return out


def jcs_cases() -> list[dict[str, Any]]:
    texts = [
        ("members sorted by name", '{"b":1,"a":2,"c":{"z":true,"y":false}}'),
        ("the proposal's target", TARGET_JSON),
        ("an empty object", "{}"),
        ("numbers as ECMAScript prints them",
         "[1E21,1e20,1e-7,0.000001,-0.0,0,1.0,100,1.5,-2.25,5e-324,1.7976931348623157e308,"
         "9.999999999999997e22,1e23,333333333.3333333,1424953923781206.2,4.50,2e-3,123456789012345680000]"),
        ("an integer beyond 2^53 as the double it reads as", "[9007199254740993,18446744073709551615]"),
        ("strings with only the escapes JSON needs", '["\\u20ac\\n\\"\\\\\\u0001\\u001f\\u007f\\u2028\\/", "\\u00e9t\\u00e9"]'),
        ("names sorted by UTF-16 code units", '{"\\ufb33":1,"\\ud83d\\ude00":2,"\\u20ac":3,"a":4,"\\u0080":5}'),
        ("nested arrays and white space", '{ "list" : [ [ ], { } , [1, [2, [3]]] ], "n": null }'),
    ]
    out = []
    for name, text in texts:
        value = json.loads(text)
        canon = canonical_json(value)
        out.append({
            "name": name, "target": value, "json": text, "canonical": canon.decode("utf-8"),
            "sha256": hashlib.sha256(canon).hexdigest(),
        })
    return out


def vectors() -> dict[str, Any]:
    return {
        "comment": (
            "Grants (docs/GRANTS.md) every verifier must judge alike. Check each case at its own now, or at the top "
            "level now; verify the token with keysets[keyset] for what expect describes (target_json digested as "
            "RFC 8785 JCS). Accept exactly the valid cases, with their claims; refuse each other case with an error "
            "that names error_member. jcs: the canonical JSON of each json text, and its SHA-256. The seeds are "
            "for tests only."
        ),
        "now": NOW,
        "keysets": KEYSETS,
        "seeds": {k.kid: b64(k.seed) for k in (ACTIVE, RETIRED, FRESH, STRANGER)},
        "jcs": jcs_cases(),
        "grants": cases(),
    }


def render() -> str:
    return json.dumps(vectors(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail unless the file is what this script writes")
    args = ap.parse_args()
    text = render()
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.name} differs from what {Path(__file__).name} writes", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
