"""Grants: the shared vectors (test/vectors/grants.json) decide what the
Python verifier accepts; the key set's rules, JCS, and the tool gate's
order (verify, use, started, run, succeeded or failed)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from dataclasses import replace
from typing import Any

import pytest

import gated
from gatedkit import vectors
from gated import Change, Identity, ToolGate, ToolSpec
from gated.errors import GrantRefused, GrantUseRefused, KeySetError, Malformed
from gated.grant import (
    Claims,
    Expected,
    KeySet,
    b64url,
    canonical_json,
    es6_number,
    gid_of,
    header_kid,
    outcome_report,
    read_use_reply,
    target_sha256,
    verify,
)
from gated.wire import encode_proposal

GRANTS = vectors("grants.json")
KEYSETS = {name: KeySet.from_json(ks) for name, ks in GRANTS["keysets"].items()}


def expected(e: dict[str, str]) -> Expected:
    return Expected.of(
        tenant=e["tenant"],
        proposal_id=e["proposal_id"],
        proposal_sha256=e["proposal_sha256"],
        action=e["action"],
        target=e["target_json"],
    )


@pytest.mark.parametrize("case", GRANTS["grants"], ids=lambda c: c["name"])
def test_grant_vectors(case: dict[str, Any]) -> None:
    keys = KEYSETS[case["keyset"]]
    now = case.get("now", GRANTS["now"])
    if case["valid"]:
        claims = verify(case["token"], keys, now, expected(case["expect"]))
        assert claims.to_dict() == case["claims"]
        assert keys.get(claims.kid) is not None
        return
    with pytest.raises(GrantRefused) as e:
        verify(case["token"], keys, now, expected(case["expect"]))
    assert case["error_member"] in str(e.value), f"{e.value} does not name {case['error_member']}"
    assert str(e.value).startswith("grant refused: ")


def test_grant_vectors_cover_the_issue() -> None:
    """Every bad grant the issue lists has a case, and both verdicts occur."""
    members = {c["error_member"] for c in GRANTS["grants"] if not c["valid"]}
    assert members >= {"kid", "signature", "alg", "typ", "exp", "retired", "max_ttl", "tenant", "proposal_id",
                       "proposal_sha256", "action", "target_sha256", "iat", "format"}
    algs = {json.loads(_b64d(c["token"].split(".")[0])).get("alg") for c in GRANTS["grants"]
            if c["token"] and not c["valid"] and c["error_member"] == "alg"}
    assert {"none", "HS256"} <= algs
    assert sum(c["valid"] for c in GRANTS["grants"]) >= 3


def _b64d(s: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


@pytest.mark.parametrize("case", GRANTS["jcs"], ids=lambda c: c["name"])
def test_jcs_vectors(case: dict[str, Any]) -> None:
    canon = canonical_json(json.loads(case["json"]))
    assert canon.decode("utf-8") == case["canonical"]
    assert hashlib.sha256(canon).hexdigest() == case["sha256"]
    assert target_sha256(case["json"]) == case["sha256"]
    # The canonical form is a fixed point.
    assert canonical_json(json.loads(case["canonical"])) == canon


@pytest.mark.parametrize(
    "bits,text",
    [
        # RFC 8785 appendix B: IEEE 754 doubles and their serialisation.
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7FEFFFFFFFFFFFFF, "1.7976931348623157e+308"),
        (0xFFEFFFFFFFFFFFFF, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xC340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44B52D02C7E14AF5, "9.999999999999997e+22"),
        (0x44B52D02C7E14AF6, "1e+23"),
        (0x44B52D02C7E14AF7, "1.0000000000000001e+23"),
        (0x444B1AE4D6E2EF4E, "999999999999999700000"),
        (0x444B1AE4D6E2EF4F, "999999999999999900000"),
        (0x444B1AE4D6E2EF50, "1e+21"),
        (0x3EB0C6F7A0B5ED8C, "9.999999999999997e-7"),
        (0x3EB0C6F7A0B5ED8D, "0.000001"),
        (0x41B3DE4355555553, "333333333.3333332"),
        (0x41B3DE4355555554, "333333333.33333325"),
        (0x41B3DE4355555555, "333333333.3333333"),
        (0x41B3DE4355555556, "333333333.3333334"),
        (0x41B3DE4355555557, "333333333.33333343"),
        (0xBECBF647612F3696, "-0.0000033333333333333333"),
        (0x43143FF3C1CB0959, "1424953923781206.2"),
    ],
)
def test_es6_numbers(bits: int, text: str) -> None:
    import struct

    f = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    assert es6_number(f) == text


def test_jcs_refuses_what_is_not_i_json() -> None:
    case = next(c for c in GRANTS["grants"] if c["valid"])
    for name, v in [
        ("NaN", math.nan),
        ("infinity", [math.inf]),
        ("a lone surrogate", {"k": "\ud800"}),
        ("a lone surrogate in a name", {"\udc00": 1}),
        ("a number beyond a double", [10**400]),
        ("a key that is not a string", {1: 2}),
        ("a set", {1, 2}),
        ("a member twice", '{"a":1,"a":2}'),
        ("JSON text with an escaped lone surrogate", '{"a":"\\udc00"}'),
        ("JSON text with 1e400", "[1e400]"),
    ]:
        if not isinstance(v, str):
            with pytest.raises(ValueError):
                canonical_json(v)
        with pytest.raises(ValueError):
            target_sha256(v)
        # No grant matches such a target, whatever the grant holds.
        e = expected(case["expect"])
        bad = Expected(e.tenant, e.action, "", e.proposal_id, e.proposal_sha256)
        assert Expected.of(tenant="acme", action="x", target=v).target_problem, name
        with pytest.raises(GrantRefused) as err:
            verify(case["token"], KEYSETS[case["keyset"]], case.get("now", GRANTS["now"]),
                   Expected.of(tenant=e.tenant, action=e.action, proposal_id=e.proposal_id,
                               proposal_sha256=e.proposal_sha256, target=v))
        assert err.value.member == "target_sha256", name
        with pytest.raises(GrantRefused):
            verify(case["token"], KEYSETS[case["keyset"]], case.get("now", GRANTS["now"]), bad)
    # No target is digested as {}.
    assert target_sha256(None) == target_sha256({}) == target_sha256("{}") == target_sha256("null")
    assert target_sha256({}) == hashlib.sha256(b"{}").hexdigest()


def test_expected_of_proposal_bytes() -> None:
    """What a gate expects of a proposal is read from the exact bytes it
    sent: digest, tokens, and the target as gated reads it."""
    _, data = encode_proposal({"id": "p-1", "tenant": "acme", "action": "x", "class": "write",
                               "target": {"b": [1.0, 2], "a": "\u2028"}})
    e = Expected.of_proposal(data)
    assert (e.tenant, e.proposal_id, e.action) == ("acme", "p-1", "x")
    assert e.proposal_sha256 == hashlib.sha256(data).hexdigest()
    assert e.target_sha256 == hashlib.sha256('{"a":"\u2028","b":[1,2]}'.encode()).hexdigest()
    _, bare = encode_proposal({"id": "p-1", "tenant": "acme", "action": "x", "class": "read", "target": {}})
    assert Expected.of_proposal(bare).target_sha256 == hashlib.sha256(b"{}").hexdigest()
    for bad in (b"[]", b"{", b'{"tenant":1}', b"\xff"):
        with pytest.raises(GrantRefused) as err:
            Expected.of_proposal(bad)
        assert err.value.member == "proposal"


def key_json(**changes: Any) -> dict[str, Any]:
    k = dict(GRANTS["keysets"]["main"]["keys"][0])
    k.update(changes)
    return {"keys": [{n: v for n, v in k.items() if v is not None}]}


def test_keyset_refuses_what_is_wrong() -> None:
    first = GRANTS["keysets"]["main"]["keys"][0]
    other_x = GRANTS["keysets"]["main"]["keys"][1]["x"]
    for name, doc, member in [
        ("not JSON", b"{", ""),
        ("a list", b"[]", ""),
        ("an unknown top-level member", {"keys": [], "extra": 1}, ""),
        ("keys not a list", {"keys": {}}, "keys"),
        ("another kty", key_json(kty="EC"), "kty"),
        ("another crv", key_json(crv="X25519"), "crv"),
        ("x too short", key_json(x=b64url(b"\x01" * 31)), "x"),
        ("x padded", key_json(x=first["x"] + "="), "x"),
        ("kid of another key", key_json(x=other_x), "kid"),
        ("created_at a string", key_json(created_at="1"), "created_at"),
        ("max_ttl_s zero", key_json(max_ttl_s=0), "max_ttl_s"),
        ("retired before created", key_json(retired_at=first["created_at"] - 1), "retired_at"),
        ("an unknown member", key_json(jku="https://keys.example.org"), ""),
        ("alg not EdDSA", key_json(alg="RS256"), "alg"),
        ("a kid twice", {"keys": [first, first]}, "kid"),
    ]:
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        with pytest.raises(KeySetError) as e:
            KeySet.from_json(data)
        assert member in e.value.member, f"{name}: {e.value}"
    assert KeySet.from_json(key_json(alg="EdDSA", use="sig")).keys[0].kid == first["kid"]
    # What the key set writes, it reads back.
    ks = KEYSETS["main"]
    assert KeySet.from_json(json.dumps(ks.to_dict())) == ks
    assert ks.to_dict() == GRANTS["keysets"]["main"]


VALID = [c for c in GRANTS["grants"] if c["valid"]]


def test_rotation_keeps_a_grant_until_it_expires() -> None:
    """A retired key's grant issued before the retirement verifies at every
    second until its exp, and at none after."""
    retired = [c for c in VALID if (k := KEYSETS[c["keyset"]].get(header_kid(c["token"]))) and k.retired_at is not None]
    assert retired, "the vectors hold a retired key's valid grant"
    for case in retired:
        keys, e = KEYSETS[case["keyset"]], expected(case["expect"])
        exp = case["claims"]["exp"]
        for now in range(case.get("now", GRANTS["now"]), exp):
            assert verify(case["token"], keys, now, e).exp == exp
        for now in (exp, exp + 1, exp + 3600):
            with pytest.raises(GrantRefused, match="exp"):
                verify(case["token"], keys, now, e)


def test_a_retired_key_signs_nothing_after_its_retirement() -> None:
    """Whoever holds a retired key's seed cannot make a grant that verifies
    after the retirement, at any now."""
    for name, ks in KEYSETS.items():
        for key in ks.keys:
            if key.retired_at is None or key.kid not in GRANTS["seeds"]:
                continue
            for iat in (key.retired_at, key.retired_at + 1):
                token = sign_grant(key.kid, iat=iat, exp=iat + 60)
                for now in (iat, iat + 30):
                    with pytest.raises(GrantRefused) as e:
                        verify(token, ks, now, EXPECT)
                    assert e.value.member == "retired", f"{name} {key.kid} at {now}: {e.value}"


def test_header_kid_reads_only_a_sound_header() -> None:
    for case in VALID:
        claims = verify(case["token"], KEYSETS[case["keyset"]], case.get("now", GRANTS["now"]), expected(case["expect"]))
        assert header_kid(case["token"]) == claims.kid
    for c in GRANTS["grants"]:
        if not c["valid"] and c["error_member"] in ("alg", "typ", "jwk", "crit"):
            with pytest.raises(GrantRefused):
                header_kid(c["token"])


def test_use_replies() -> None:
    assert read_use_reply(b'{"ok":true,"gid":"abc"}') == "abc"
    with pytest.raises(GrantUseRefused) as e:
        read_use_reply(b'{"ok":false,"error":"already used at 2026-11-25T10:00:00Z by ops-agent"}')
    assert "already used" in str(e.value) and e.value.member == "use"
    assert isinstance(e.value, GrantRefused)
    with pytest.raises(GrantUseRefused, match="no reason given"):
        read_use_reply(b'{"ok":false}')
    for bad in (b"", b"[]", b'{"ok":"true"}', b'{"ok":true}', b'{"ok":false,"error":3}', b"\xff"):
        with pytest.raises(Malformed):
            read_use_reply(bad)


def test_use_requests() -> None:
    from gated.grant import use_request

    assert json.loads(use_request("a.b.c", "ops-agent")) == {"grant": "a.b.c", "by": "ops-agent"}
    long = json.loads(use_request("a.b.c", "\u00e9" * 200))["by"]
    assert long == "\u00e9" * 128 and len(long.encode()) == 256
    assert json.loads(use_request("a.b.c", "x" * 300 + "\ud800"))["by"] == "x" * 256
    for grant, by in (("", "x"), (None, "x"), ("a.b.c", None)):
        with pytest.raises(GrantRefused):
            use_request(grant, by)  # type: ignore[arg-type]


def test_outcome_reports() -> None:
    doc = json.loads(outcome_report("acme", "p-1", "g", "failed", "x" * 5000, "2026-11-25T10:00:00.000Z"))
    assert list(doc) == ["v", "gid", "tenant", "proposal_id", "status", "error", "at"]
    assert len(doc["error"]) == 1024 and doc["error"].endswith("(truncated)")
    assert "error" not in json.loads(outcome_report("acme", "p-1", "g", "started", "", "t"))
    assert json.loads(outcome_report("acme", "p-1", "g", "failed", "", "t"))["error"] == "failed"
    assert outcome_report("acme", "p-1", "g", "failed", "\ud800 \u00e9", "t").isascii()
    with pytest.raises(ValueError):
        outcome_report("acme", "p-1", "g", "done", "", "t")


# ---------------------------------------------------------------------------
# The tool gate: an approval runs a tool only through its grant.

RESTART = ToolSpec(
    "host_restart_service",
    "write",
    lambda device: Change(target={"device_id": device, "service": "nginx", "tags": ["production"]},
                          reason="nginx stopped answering health checks", blast_radius="single_device", id="p-grant-1"),
)


class Approver:
    """A proposer that answers with one verdict, verifies grants with the
    vectors' keys at the vectors' clock, and records what the gate asks of
    gated. It stands in for the client's network, not for the verifier."""

    def __init__(self, verdict: gated.Verdict, *, use_error: str = "") -> None:
        """Answer every proposal with verdict; refuse every use with
        use_error when it is set."""
        self.verdict = verdict
        self.use_error = use_error
        self.calls: list[tuple[str, ...]] = []
        self.proposed: list[dict[str, Any]] = []

    async def propose(self, proposal: Any, *, timeout: float | None = None) -> gated.Verdict:
        self.proposed.append(proposal)
        return self.verdict

    async def verify_grant(self, grant: str, expect: Expected, *, now: float | None = None) -> Claims:
        self.calls.append(("verify",))
        return verify(grant, KEYSETS["main"], GRANTS["now"], expect)

    async def use_grant(self, tenant: str, grant: str, *, by: str, timeout: float | None = None) -> str:
        self.calls.append(("use", tenant, by))
        if self.use_error:
            raise GrantUseRefused(self.use_error)
        return gid_of(grant)

    async def report_outcome(self, tenant: str, proposal_id: str, gid: str, status: str, error: str = "",
                             *, timeout: float | None = None) -> None:
        self.calls.append(("report", status, error))


IDENTITY = Identity(tenant="acme", agent="ops-agent", session="s-1")
# What the guarded restart(7) proposes: the call's arguments beside the
# change describe gives.
RESTART_CHANGE = replace(RESTART.describe(7), arguments={"device": 7})  # type: ignore[misc]
RESTART_PROPOSAL = ToolGate(object(), IDENTITY).proposal("host_restart_service", "write", RESTART_CHANGE)


_, RESTART_BYTES = encode_proposal(RESTART_PROPOSAL)
EXPECT = Expected.of_proposal(RESTART_BYTES)
NOW = GRANTS["now"]


def _active_kid(keyset: str = "main") -> str:
    """A key of the vectors that is active at their now and whose test seed
    they publish."""
    return next(k.kid for k in KEYSETS[keyset].keys
                if k.retired_at is None and k.created_at <= NOW - 400 and k.kid in GRANTS["seeds"])


def _stranger_kid() -> str:
    """A test key no key set of the vectors holds."""
    held = {k.kid for ks in KEYSETS.values() for k in ks.keys}
    return next(str(kid) for kid in GRANTS["seeds"] if kid not in held)


def sign_grant(kid: str | None = None, **changes: Any) -> str:
    """A grant for RESTART_PROPOSAL, signed with a test seed of the vectors."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    kid = kid or _active_kid()
    claims: dict[str, Any] = {
        "v": 1, "gid": b64url(hashlib.sha256(json.dumps(changes, sort_keys=True).encode()).digest()[:16]),
        "iss": "gated", "tenant": EXPECT.tenant, "proposal_id": EXPECT.proposal_id,
        "proposal_sha256": EXPECT.proposal_sha256, "action": EXPECT.action, "target_sha256": EXPECT.target_sha256,
        "policy_revision": "rev-1",
        "reviewers": [{"plugin": "sop", "plugin_version": "1.0.0", "persona": "reviewer", "model": ""}],
        "iat": NOW - 10, "exp": NOW + 200,
    }
    claims.update(changes)
    h = b64url(json.dumps({"alg": "EdDSA", "typ": "gated-grant+jwt", "kid": kid}).encode())
    p = b64url(json.dumps(claims).encode())
    seed = _b64d(GRANTS["seeds"][kid])
    return f"{h}.{p}." + b64url(Ed25519PrivateKey.from_private_bytes(seed).sign(f"{h}.{p}".encode()))


def approval(grant: str = "") -> gated.Verdict:
    return gated.Verdict(proposal_id=EXPECT.proposal_id or "", tenant="acme", outcome="approved", approved=True,
                         action="host_restart_service", proposal_sha256=EXPECT.proposal_sha256 or "", grant=grant)


def gate_for(proposer: Any, **kw: Any) -> ToolGate:
    return ToolGate(proposer, IDENTITY, **kw)


async def test_an_approval_without_a_grant_does_not_run() -> None:
    """gated signs every approval: one without a grant (an old or forged
    answer) runs nothing, unless the gate was told gated does not sign."""
    runs: list[int] = []
    p = Approver(gated.Verdict(proposal_id="p-grant-1", tenant="acme", outcome="approved", approved=True,
                               action="host_restart_service"))
    gate = gate_for(p)

    @gate.guard(RESTART)
    async def restart(device: int) -> str:
        runs.append(device)
        return "restarted"

    with pytest.raises(gated.GatedError, match="grant") as e:
        await restart(7)
    assert runs == []
    # The refusal is the gate's own: gated hears of it.
    assert p.calls == [("report", "refused", str(e.value))]
    p.calls.clear()

    optout = gate_for(p, require_grant=False)
    assert await optout.guard(RESTART)(restart.__wrapped__)(7) == "restarted"  # type: ignore[attr-defined]
    assert runs == [7] and p.calls == []


async def test_the_gate_verifies_uses_and_reports() -> None:
    """The tool runs once, after verify, use and started; succeeded or
    failed follows."""
    runs: list[int] = []
    assert verify(sign_grant(), KEYSETS["main"], NOW, EXPECT).tenant == "acme"
    p = Approver(approval(sign_grant()))
    gate = gate_for(p)

    @gate.guard(RESTART)
    async def restart(device: int) -> str:
        runs.append(device)
        assert p.calls[-1] == ("report", "started", "")
        return "restarted"

    assert await restart(7) == "restarted"
    assert runs == [7]
    assert p.calls == [("verify",), ("use", "acme", "ops-agent s-1"), ("report", "started", ""),
                       ("report", "succeeded", "")]

    p = Approver(approval(sign_grant()))
    gate = gate_for(p)

    @gate.guard(RESTART)
    def broken(device: int) -> str:
        raise RuntimeError("systemctl: unit nginx.service not found")

    with pytest.raises(RuntimeError):
        await asyncio.to_thread(broken, 7)
    assert p.calls[-1] == ("report", "failed", "RuntimeError: systemctl: unit nginx.service not found")

    p = Approver(approval(sign_grant()))
    async with gate_for(p).authorized("host_restart_service", "write", RESTART_CHANGE) as v:
        assert v is not None and v.grant
    assert [c[1] for c in p.calls if c[0] == "report"] == ["started", "succeeded"]


async def test_the_gate_refuses_a_grant_that_does_not_fit() -> None:
    """A grant for another proposal, target or action, an altered, expired
    or forged one, or one gated will not let be used: the tool does not
    run, and nothing is reported as started."""
    good = sign_grant()
    h, body, sig = good.split(".")
    altered = json.loads(_b64d(body))
    altered["exp"] += 60
    runs: list[int] = []
    for name, token, use_error, member in [
        ("another action's grant", sign_grant(action="db_drop_table"), "", "action"),
        ("another target's grant", sign_grant(target_sha256=target_sha256({"device_id": 8})), "", "target_sha256"),
        ("another proposal's grant", sign_grant(proposal_id="p-other"), "", "proposal_id"),
        ("same id, other bytes", sign_grant(proposal_sha256="0" * 64), "", "proposal_sha256"),
        ("another tenant's grant", sign_grant(tenant="globex"), "", "tenant"),
        ("altered", f"{h}.{b64url(json.dumps(altered).encode())}.{sig}", "", "signature"),
        ("expired", sign_grant(iat=NOW - 400, exp=NOW - 100), "", "exp"),
        ("forged", sign_grant(_stranger_kid()), "", "kid"),
        ("used already", good, "already used at 2026-11-18T09:40:00Z by bot", "use"),
    ]:
        p = Approver(approval(token), use_error=use_error)
        gate = gate_for(p)

        @gate.guard(RESTART)
        async def restart(device: int) -> None:
            runs.append(device)

        with pytest.raises(GrantRefused) as e:
            await restart(7)
        assert e.value.member == member, f"{name}: {e.value}"
        # Nothing started; a refusal of the gate's own is reported to
        # gated, one of gated's (a use refused) gated audits itself.
        reports = [c[1] for c in p.calls if c[0] == "report"]
        assert reports == ([] if member == "use" else ["refused"]), name
    assert runs == []


def test_a_verdict_carries_its_grant() -> None:
    """The verdict's grant is read as a string; any other type makes the
    message no verdict at all (a stored one a StoreError)."""
    from gated.errors import StoreError
    from gated.verdict import decode_stored_verdict, decode_verdict

    doc = {"v": 1, "proposal_id": "p-1", "tenant": "acme", "outcome": "approved", "approved": True,
           "proposal_sha256": "0" * 64}
    assert decode_verdict(json.dumps(doc).encode()).grant == ""
    assert decode_verdict(json.dumps(doc | {"grant": "a.b.c"}).encode()).grant == "a.b.c"
    for bad in (5, ["a.b.c"], {"token": "a.b.c"}, True):
        with pytest.raises(ValueError):
            decode_verdict(json.dumps(doc | {"grant": bad}).encode())
        with pytest.raises(StoreError):
            decode_stored_verdict("acme", "p-1", {}, json.dumps(doc | {"grant": bad}).encode())
