"""Grants: gated's signed permission to run one approved action, once.

Every approved verdict carries a grant (``Verdict.grant``): a compact JWS
(RFC 7515) signed with Ed25519 (``alg`` ``EdDSA``, RFC 8037) that binds the
proposal's digest, tenant, id and action, the digest of its target, the
policy revision, the reviewers, and an expiry. docs/GRANTS.md is the
normative format; this module is its Python verifier:

    keys = KeySet.from_file("grant-keys.json")      # `gated grants keys` printed it
    claims = verify(token, keys, time.time(),
                    Expected.of(tenant="acme", action="host_restart_service",
                                target={"device_id": 7, "service": "nginx"}))

:func:`verify` is pure: it checks the header, the key's rules, the
signature, then every payload member against what is about to run, and
returns the :class:`Claims` or raises :class:`~gated.errors.GrantRefused`
naming the member that fails. Using a grant once and reporting what
happened need gated: see :meth:`gated.Client.use_grant`,
:meth:`gated.Client.accept_grant` and :class:`gated.ToolGate`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gated.errors import GrantRefused, KeySetError
from gated.wire import valid_action, valid_id, valid_tenant

ALG: Final = "EdDSA"
TYP: Final = "gated-grant+jwt"
ISSUER: Final = "gated"
VERSION: Final = 1
CLOCK_SKEW: Final = 60
"""Seconds a grant's ``iat`` may lie ahead of the verifier's clock."""
MAX_TOKEN: Final = 16 * 1024
"""Bytes of the longest token read; anything longer is refused unread."""

HEADER_MEMBERS: Final = ("alg", "typ", "kid")
PAYLOAD_MEMBERS: Final = (
    "v",
    "gid",
    "iss",
    "tenant",
    "proposal_id",
    "proposal_sha256",
    "action",
    "target_sha256",
    "policy_revision",
    "reviewers",
    "iat",
    "exp",
)
REVIEWER_MEMBERS: Final = ("plugin", "plugin_version", "persona", "model")

_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_INT = 2**63 - 1


def b64url(raw: bytes) -> str:
    """Unpadded base64url, as JWS and the key set write bytes."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(s: str) -> bytes:
    """Decode unpadded base64url strictly: only the URL alphabet, no
    padding, no stray bits (the one encoding of the bytes). Raises
    ValueError."""
    if not _B64URL.fullmatch(s) or len(s) % 4 == 1:
        raise ValueError("is not unpadded base64url")
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if b64url(raw) != s:
        raise ValueError("is not the canonical base64url of its bytes")
    return raw


def key_id(public: bytes) -> str:
    """A key's id: the first 16 bytes of the SHA-256 of the raw public key,
    unpadded base64url."""
    return b64url(hashlib.sha256(public).digest()[:16])


class _Duplicate(ValueError):
    pass


def _pairs(kv: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in kv:
        if k in d:
            raise _Duplicate(f"member {k!r} appears twice")
        d[k] = v
    return d


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON strictly: UTF-8, no NaN or Infinity, no member twice in
    an object (a verifier and gated must not read different values from one
    text). Raises ValueError (RecursionError for absurd nesting is turned
    into ValueError too)."""
    try:
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data).decode("utf-8")
        return json.loads(data, object_pairs_hook=_pairs, parse_constant=_no_constants)
    except RecursionError:
        raise ValueError("is nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8") from None


# ---------------------------------------------------------------------------
# RFC 8785 (JCS): the canonical JSON a target is digested in.


def es6_number(f: float) -> str:
    """A number as ECMAScript's Number.prototype.toString writes it, which
    is RFC 8785's number serialisation: the shortest digits that read back
    as the same double, plain notation from 1e-6 up to below 1e21,
    exponential (``1e+21``, ``1.5e-7``) outside. Raises ValueError for NaN
    and the infinities."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"number {f} is not JSON")
    if f == 0:
        return "0"  # and -0
    sign, digits, exp = Decimal(repr(abs(f))).as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits)).rstrip("0")
    exp += len(digits) - len(ds)
    k = len(ds)
    n = k + exp  # the value is 0.ds × 10^n
    neg = "-" if f < 0 else ""
    if k <= n <= 21:
        return neg + ds + "0" * (n - k)
    if 0 < n <= 21:
        return neg + ds[:n] + "." + ds[n:]
    if -6 < n <= 0:
        return neg + "0." + "0" * -n + ds
    e = n - 1
    mant = ds if k == 1 else ds[0] + "." + ds[1:]
    return f"{neg}{mant}e{'+' if e >= 0 else '-'}{abs(e)}"


_JCS_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_JCS_SPECIAL = re.compile(r'["\\\x00-\x1f]')
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _jcs_string(s: str) -> str:
    if _SURROGATE.search(s):
        raise ValueError("a string holds a lone surrogate: not I-JSON")
    return '"' + _JCS_SPECIAL.sub(lambda m: _JCS_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), s) + '"'


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be")


def _jcs(v: Any, out: list[str], depth: int) -> None:
    if depth > 1000:
        raise ValueError("is nested too deeply")
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_jcs_string(v))
    elif isinstance(v, int):
        try:
            out.append(es6_number(float(v)))
        except OverflowError:
            raise ValueError(f"number {v} does not fit a double") from None
    elif isinstance(v, float):
        out.append(es6_number(v))
    elif isinstance(v, Mapping):
        for k in v:
            if not isinstance(k, str):
                raise ValueError(f"object key {k!r} is not a string")
        out.append("{")
        # Members sorted by the UTF-16 code units of their names.
        for i, k in enumerate(sorted(v, key=_utf16)):
            if i:
                out.append(",")
            out.append(_jcs_string(k))
            out.append(":")
            _jcs(v[k], out, depth + 1)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _jcs(x, out, depth + 1)
        out.append("]")
    else:
        raise ValueError(f"a {type(v).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JCS) canonical form of a JSON value: members sorted by
    the UTF-16 code units of their names, no white space, strings with only
    the escapes JSON requires, numbers as :func:`es6_number` writes them.
    Raises ValueError for what is not I-JSON (NaN, lone surrogates,
    non-string keys, numbers beyond a double)."""
    out: list[str] = []
    _jcs(value, out, 0)
    return "".join(out).encode("utf-8")


def target_sha256(target: Any) -> str:
    """The lowercase hex SHA-256 of a target's canonical JSON, as a grant's
    ``target_sha256`` holds it. ``target`` is a JSON value, or JSON text as
    ``str`` or ``bytes`` (read strictly: a member twice is refused); None
    (a proposal without a target) is digested as ``{}``. Raises
    ValueError."""
    if isinstance(target, (str, bytes, bytearray, memoryview)):
        target = parse_json(target)
    if target is None:
        target = {}
    return hashlib.sha256(canonical_json(target)).hexdigest()


# ---------------------------------------------------------------------------
# Keys.


@dataclass(frozen=True)
class Key:
    """One of gated's grant signing keys, as its key set publishes it."""

    kid: str
    """The first 16 bytes of SHA-256 of ``public``, unpadded base64url."""
    public: bytes
    """The raw 32-byte Ed25519 public key (the JWK's ``x``)."""
    created_at: int
    """Unix seconds: no grant issued before verifies under the key."""
    max_ttl_s: int
    """The longest lifetime (``exp - iat``) of a grant the key signs."""
    retired_at: int | None = None
    """Unix seconds: set once the key is retired; grants it signs at or
    after it never verify, earlier ones until they expire."""

    def verifier(self) -> Ed25519PublicKey:
        """The key as a cryptography public key."""
        return Ed25519PublicKey.from_public_bytes(self.public)

    def to_dict(self) -> dict[str, Any]:
        """The key as a key set member."""
        d: dict[str, Any] = {
            "kid": self.kid,
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64url(self.public),
            "created_at": self.created_at,
        }
        if self.retired_at is not None:
            d["retired_at"] = self.retired_at
        d["max_ttl_s"] = self.max_ttl_s
        return d


_KEY_MEMBERS = ("kid", "kty", "crv", "x", "created_at", "retired_at", "max_ttl_s")
# JWKS members a key may carry besides gated's, with the one value each may have.
_JWK_OPTIONAL = {"alg": ALG, "use": "sig"}


def _int_member(obj: Mapping[str, Any], name: str, where: str) -> int:
    v = obj.get(name)
    if type(v) is not int:
        raise KeySetError(f"{where}.{name}", f"is {_kind(v)}, not an integer")
    if not 0 <= v <= _MAX_INT:
        raise KeySetError(f"{where}.{name}", f"{v} is out of range")
    return v


def _key(obj: Any, i: int) -> Key:
    where = f"keys[{i}]"
    if not isinstance(obj, dict):
        raise KeySetError(where, f"is {_kind(obj)}, not an object")
    for k, v in obj.items():
        if k in _JWK_OPTIONAL:
            if v != _JWK_OPTIONAL[k]:
                raise KeySetError(f"{where}.{k}", f"is {v!r}, want {_JWK_OPTIONAL[k]!r}")
        elif k not in _KEY_MEMBERS:
            raise KeySetError(where, f"has an unknown member {k!r}")
    for name, want in (("kty", "OKP"), ("crv", "Ed25519")):
        if obj.get(name) != want:
            raise KeySetError(f"{where}.{name}", f"is {obj.get(name)!r}, want {want!r}")
    x = obj.get("x")
    if not isinstance(x, str):
        raise KeySetError(f"{where}.x", f"is {_kind(x)}, not a string")
    try:
        public = b64url_decode(x)
    except ValueError as e:
        raise KeySetError(f"{where}.x", str(e)) from None
    if len(public) != 32:
        raise KeySetError(f"{where}.x", f"holds {len(public)} bytes, not a 32-byte Ed25519 key")
    kid = obj.get("kid")
    if not isinstance(kid, str):
        raise KeySetError(f"{where}.kid", f"is {_kind(kid)}, not a string")
    if kid != key_id(public):
        raise KeySetError(f"{where}.kid", f"{kid!r} is not the id of its key ({key_id(public)!r})")
    created = _int_member(obj, "created_at", where)
    ttl = _int_member(obj, "max_ttl_s", where)
    if ttl == 0:
        raise KeySetError(f"{where}.max_ttl_s", "is 0: the key could sign no grant")
    retired = None
    if obj.get("retired_at") is not None:
        retired = _int_member(obj, "retired_at", where)
        if retired < created:
            raise KeySetError(f"{where}.retired_at", f"{retired} is before its created_at {created}")
    try:
        Ed25519PublicKey.from_public_bytes(public)
    except ValueError as e:
        raise KeySetError(f"{where}.x", f"is not an Ed25519 public key: {e}") from None
    return Key(kid=kid, public=public, created_at=created, max_ttl_s=ttl, retired_at=retired)


@dataclass(frozen=True)
class KeySet:
    """gated's published grant keys: the active one and the retired ones
    whose grants may not have expired yet."""

    keys: tuple[Key, ...] = ()

    def get(self, kid: str) -> Key | None:
        """The key with id kid, or None."""
        for k in self.keys:
            if k.kid == kid:
                return k
        return None

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> KeySet:
        """Read a key set: ``{"keys": [{"kid", "kty": "OKP", "crv":
        "Ed25519", "x", "created_at", "retired_at"?, "max_ttl_s"}]}`` as JSON
        text or a decoded mapping. Unknown members, wrong types, a kid that
        is not its key's id, and a kid twice are refused. Raises
        KeySetError."""
        if isinstance(data, Mapping):
            doc: Any = data
        else:
            try:
                doc = parse_json(data)
            except ValueError as e:
                raise KeySetError("", f"is not JSON: {e}") from None
        if not isinstance(doc, Mapping):
            raise KeySetError("", f"is {_kind(doc)}, not an object")
        for k in doc:
            if k != "keys":
                raise KeySetError("", f"has an unknown member {k!r}")
        raw = doc.get("keys")
        if not isinstance(raw, list):
            raise KeySetError("keys", f"is {_kind(raw)}, not a list")
        keys = tuple(_key(k, i) for i, k in enumerate(raw))
        seen: set[str] = set()
        for k in keys:
            if k.kid in seen:
                raise KeySetError("kid", f"{k.kid!r} appears twice")
            seen.add(k.kid)
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | Path) -> KeySet:
        """Read a key set from a file, such as the one `gated grants keys`
        prints. Raises KeySetError, OSError."""
        return cls.from_json(Path(path).read_bytes())

    def to_dict(self) -> dict[str, Any]:
        """The key set as JSON value."""
        return {"keys": [k.to_dict() for k in self.keys]}


# ---------------------------------------------------------------------------
# Tokens.


@dataclass(frozen=True)
class Reviewer:
    """Who approved: a reviewer plugin and persona, or an operator
    (``plugin`` ``operator``, ``persona`` the operator's id)."""

    plugin: str
    plugin_version: str = ""
    persona: str = ""
    model: str = ""


@dataclass(frozen=True)
class Claims:
    """A verified grant's payload, and the key that signed it."""

    gid: str
    """The grant's id and nonce (22 characters of base64url)."""
    tenant: str
    proposal_id: str
    proposal_sha256: str
    action: str
    target_sha256: str
    policy_revision: str
    reviewers: tuple[Reviewer, ...]
    """Empty for an approval the policy alone made (class read)."""
    iat: int
    exp: int
    kid: str
    v: int = VERSION
    iss: str = ISSUER

    def to_dict(self) -> dict[str, Any]:
        """The payload as JSON value, members in the contract's order."""
        return {
            "v": self.v,
            "gid": self.gid,
            "iss": self.iss,
            "tenant": self.tenant,
            "proposal_id": self.proposal_id,
            "proposal_sha256": self.proposal_sha256,
            "action": self.action,
            "target_sha256": self.target_sha256,
            "policy_revision": self.policy_revision,
            "reviewers": [
                {"plugin": r.plugin, "plugin_version": r.plugin_version, "persona": r.persona, "model": r.model}
                for r in self.reviewers
            ],
            "iat": self.iat,
            "exp": self.exp,
        }


@dataclass(frozen=True)
class Expected:
    """What the executor is about to do, which a grant must name exactly.
    ``proposal_id`` and ``proposal_sha256`` may be None for a service that
    never saw the proposal (it checks tenant, action and target); an agent
    that proposed checks them all."""

    tenant: str
    action: str
    target_sha256: str
    """"" when the target could not be digested (see target_problem)."""
    proposal_id: str | None = None
    proposal_sha256: str | None = None
    target_problem: str = ""
    """Why the target is not I-JSON, when it is not: every grant is then
    refused for its target_sha256."""

    @classmethod
    def of(
        cls,
        *,
        tenant: str,
        action: str,
        target: Any,
        proposal_id: str | None = None,
        proposal_sha256: str | None = None,
    ) -> Expected:
        """What is about to run: ``target`` as a JSON value or JSON text
        (None for no target). A target that is not I-JSON (a member twice,
        a lone surrogate, a number beyond a double) cannot match any grant:
        :func:`verify` refuses every grant for it, naming
        ``target_sha256``."""
        try:
            return cls(tenant, action, target_sha256(target), proposal_id, proposal_sha256)
        except ValueError as e:
            return cls(tenant, action, "", proposal_id, proposal_sha256, target_problem=str(e) or "not I-JSON")

    @classmethod
    def of_proposal(cls, data: bytes) -> Expected:
        """What the proposal with these exact bytes asks to run: its tenant,
        id, action and target, and the bytes' digest. Raises GrantRefused
        (member ``proposal``) for bytes that are not a proposal object."""
        try:
            doc = parse_json(data)
        except ValueError as e:
            raise GrantRefused("proposal", f"is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise GrantRefused("proposal", f"is {_kind(doc)}, not an object")
        fields = []
        for name in ("tenant", "id", "action"):
            v = doc.get(name)
            if not isinstance(v, str):
                raise GrantRefused("proposal", f"member {name} is {_kind(v)}, not a string")
            fields.append(v)
        return cls.of(
            tenant=fields[0],
            proposal_id=fields[1],
            action=fields[2],
            target=_as_target(doc.get("target")),
            proposal_sha256=hashlib.sha256(bytes(data)).hexdigest(),
        )


def _as_target(t: Any) -> Any:
    return {} if t is None else t


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return "a " + type(v).__name__


@dataclass(frozen=True)
class _Token:
    signing_input: bytes
    header: dict[str, Any]
    payload_b64: str
    signature: bytes


def _split(token: object) -> _Token:
    if not isinstance(token, str):
        raise GrantRefused("format", f"the token is {_kind(token)}, not a string")
    if len(token) > MAX_TOKEN:
        raise GrantRefused("format", f"the token is longer than {MAX_TOKEN} characters")
    parts = token.split(".")
    if len(parts) != 3:
        raise GrantRefused("format", f"the token has {len(parts)} parts, not 3 (compact JWS: header.payload.signature)")
    h64, p64, s64 = parts
    try:
        hraw = b64url_decode(h64)
    except ValueError as e:
        raise GrantRefused("format", f"the header {e}") from None
    try:
        b64url_decode(p64)
    except ValueError as e:
        raise GrantRefused("format", f"the payload {e}") from None
    try:
        sig = b64url_decode(s64)
    except ValueError as e:
        raise GrantRefused("format", f"the signature {e}") from None
    try:
        header = parse_json(hraw)
    except ValueError as e:
        raise GrantRefused("format", f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise GrantRefused("format", f"the header is {_kind(header)}, not an object")
    return _Token((h64 + "." + p64).encode("ascii"), header, p64, sig)


def _name(k: str) -> str:
    """A member name from a token, fit for an error message."""
    return k if k and k.isprintable() and len(k) <= 64 else json.dumps(k[:64])


def _check_header(h: dict[str, Any]) -> str:
    alg = h.get("alg")
    if alg != ALG:
        raise GrantRefused("alg", f"is {alg!r}, not {ALG!r}: only Ed25519 signatures are accepted")
    typ = h.get("typ")
    if typ != TYP:
        raise GrantRefused("typ", f"is {typ!r}, not {TYP!r}")
    for k in h:
        if k not in HEADER_MEMBERS:
            raise GrantRefused(_name(k), "is not allowed in the header (only alg, typ and kid; nothing is followed)")
    kid = h.get("kid")
    if not isinstance(kid, str) or not kid:
        raise GrantRefused("kid", "is missing from the header" if kid is None else f"is {_kind(kid)}, not a key id")
    return kid


def header_kid(token: str) -> str:
    """The key id a token names, once its form and header hold up (alg,
    typ, no other member). Nothing is verified yet. Raises GrantRefused."""
    return _check_header(_split(token).header)


def _str(p: Mapping[str, Any], name: str) -> str:
    v = p[name]
    if not isinstance(v, str):
        raise GrantRefused(name, f"is {_kind(v)}, not a string")
    return v


def _int(p: Mapping[str, Any], name: str) -> int:
    v = p[name]
    if type(v) is not int:
        raise GrantRefused(name, f"is {_kind(v)}, not an integer")
    if not 0 <= v <= _MAX_INT:
        raise GrantRefused(name, f"{v} is out of range")
    return v


def _decode_payload(p64: str, kid: str) -> Claims:
    try:
        p = parse_json(b64url_decode(p64))
    except ValueError as e:
        raise GrantRefused("format", f"the payload is not JSON: {e}") from None
    if not isinstance(p, dict):
        raise GrantRefused("format", f"the payload is {_kind(p)}, not an object")
    for k in p:
        if k not in PAYLOAD_MEMBERS:
            raise GrantRefused(_name(k), "is not a member of a grant's payload")
    for k in PAYLOAD_MEMBERS:
        if k not in p:
            raise GrantRefused(k, "is missing from the payload")
    v = _int(p, "v")
    if v != VERSION:
        raise GrantRefused("v", f"is {v}, not {VERSION}")
    gid = _str(p, "gid")
    try:
        nonce = b64url_decode(gid)
    except ValueError as e:
        raise GrantRefused("gid", str(e)) from None
    if len(nonce) != 16:
        raise GrantRefused("gid", f"holds {len(nonce)} bytes, not 16")
    iss = _str(p, "iss")
    if iss != ISSUER:
        raise GrantRefused("iss", f"is {iss!r}, not {ISSUER!r}")
    tenant = _str(p, "tenant")
    if not valid_tenant(tenant):
        raise GrantRefused("tenant", f"{tenant!r} is not a tenant token")
    pid = _str(p, "proposal_id")
    if not valid_id(pid):
        raise GrantRefused("proposal_id", f"{pid!r} is not a proposal id")
    action = _str(p, "action")
    if not valid_action(action):
        raise GrantRefused("action", f"{action!r} is not an action token")
    for name in ("proposal_sha256", "target_sha256"):
        if not _HEX64.fullmatch(_str(p, name)):
            raise GrantRefused(name, "is not a lowercase hex SHA-256")
    revision = _str(p, "policy_revision")
    rs = p["reviewers"]
    if not isinstance(rs, list):
        raise GrantRefused("reviewers", f"is {_kind(rs)}, not a list")
    reviewers = []
    for i, r in enumerate(rs):
        if not isinstance(r, dict):
            raise GrantRefused("reviewers", f"[{i}] is {_kind(r)}, not an object")
        if set(r) != set(REVIEWER_MEMBERS):
            raise GrantRefused("reviewers", f"[{i}] has members {sorted(r)}, want {list(REVIEWER_MEMBERS)}")
        for m in REVIEWER_MEMBERS:
            if not isinstance(r[m], str):
                raise GrantRefused("reviewers", f"[{i}].{m} is {_kind(r[m])}, not a string")
        reviewers.append(Reviewer(r["plugin"], r["plugin_version"], r["persona"], r["model"]))
    return Claims(
        gid=gid,
        tenant=tenant,
        proposal_id=pid,
        proposal_sha256=p["proposal_sha256"],
        action=action,
        target_sha256=p["target_sha256"],
        policy_revision=revision,
        reviewers=tuple(reviewers),
        iat=_int(p, "iat"),
        exp=_int(p, "exp"),
        kid=kid,
        v=v,
        iss=iss,
    )


def _key_rules(key: Key, c: Claims, now: float) -> None:
    if c.iat < key.created_at:
        raise GrantRefused("iat", f"{c.iat} is before key {key.kid} was created ({key.created_at})")
    if key.retired_at is not None:
        if c.iat >= key.retired_at:
            raise GrantRefused(
                "retired", f"key {key.kid} signed a grant at {c.iat}, at or after its retirement at {key.retired_at}"
            )
        if c.exp > key.retired_at + key.max_ttl_s:
            raise GrantRefused(
                "retired",
                f"key {key.kid}'s grant expires at {c.exp}, after its retirement ({key.retired_at}) "
                f"plus its max_ttl_s ({key.max_ttl_s})",
            )
    if c.exp - c.iat > key.max_ttl_s:
        raise GrantRefused(
            "max_ttl", f"exceeded: exp - iat is {c.exp - c.iat} s, key {key.kid} allows {key.max_ttl_s} s"
        )
    if c.exp <= c.iat:
        raise GrantRefused("exp", f"{c.exp} is not after iat {c.iat}")
    if c.iat > now + CLOCK_SKEW:
        raise GrantRefused("iat", f"{c.iat} is in the future (now {now:.0f}, {CLOCK_SKEW} s of skew allowed)")
    if not now < c.exp:
        raise GrantRefused("exp", f"has passed: the grant expired at {c.exp} (now {now:.0f})")


def _check_expected(c: Claims, e: Expected) -> None:
    if c.tenant != e.tenant:
        raise GrantRefused("tenant", f"{c.tenant!r} is not the tenant about to act ({e.tenant!r})")
    if e.proposal_id is not None and c.proposal_id != e.proposal_id:
        raise GrantRefused("proposal_id", f"{c.proposal_id!r} is not the proposal about to run ({e.proposal_id!r})")
    if e.proposal_sha256 is not None and c.proposal_sha256 != e.proposal_sha256:
        raise GrantRefused("proposal_sha256", "does not match the proposal's bytes")
    if c.action != e.action:
        raise GrantRefused("action", f"{c.action!r} is not the action about to run ({e.action!r})")
    if e.target_problem or not e.target_sha256:
        raise GrantRefused("target_sha256", f"cannot be checked: the target is not I-JSON: {e.target_problem}")
    if c.target_sha256 != e.target_sha256:
        raise GrantRefused("target_sha256", "does not match the target")


def verify(token: str, keys: KeySet, now: float, expect: Expected) -> Claims:
    """Verify a grant for what is about to run, at Unix time ``now``: the
    token's form, its header (``alg`` EdDSA, ``typ`` gated-grant+jwt, a
    ``kid`` in ``keys``, nothing else), the Ed25519 signature, the payload
    (every member, with its type, and no other), the key's rules (created
    before ``iat``; if retired, ``iat`` before the retirement and ``exp`` no
    later than the retirement plus the key's ``max_ttl_s``; ``exp - iat``
    within ``max_ttl_s``; ``iat`` at most 60 s ahead; ``now`` before
    ``exp``), and then every member against ``expect``.

    Returns the claims; raises GrantRefused naming the member or check that
    fails, and nothing else, whatever the token holds. It does not use the
    grant: only gated can, once (:meth:`gated.Client.use_grant`)."""
    t = _split(token)
    kid = _check_header(t.header)
    key = keys.get(kid)
    if key is None:
        raise GrantRefused("kid", f"{kid!r} is not in the key set (forged, or signed by a key dropped since)")
    if len(t.signature) != 64:
        raise GrantRefused("signature", f"holds {len(t.signature)} bytes, not the 64 of an Ed25519 signature")
    try:
        key.verifier().verify(t.signature, t.signing_input)
    except InvalidSignature:
        raise GrantRefused("signature", f"does not verify under key {kid}: the grant is forged or altered") from None
    claims = _decode_payload(t.payload_b64, kid)
    _key_rules(key, claims, now)
    _check_expected(claims, expect)
    return claims


def gid_of(token: str) -> str:
    """The ``gid`` of a grant verified before, read without verifying it
    again (it may have expired since): for reporting its outcome. Raises
    GrantRefused when the token has none."""
    t = _split(token)
    try:
        p = parse_json(b64url_decode(t.payload_b64))
    except ValueError as e:
        raise GrantRefused("format", f"the payload is not JSON: {e}") from None
    gid = p.get("gid") if isinstance(p, dict) else None
    if not isinstance(gid, str) or not gid:
        raise GrantRefused("gid", "is missing from the payload")
    return gid


# ---------------------------------------------------------------------------
# Using a grant, and reporting what happened.

MAX_OUTCOME_ERROR: Final = 1024
"""Characters of a failure's text an outcome report carries; the rest is
cut (and marked so)."""


MAX_BY: Final = 256
"""Bytes (UTF-8) of the ``by`` text a use request carries; the rest is cut."""


def use_request(grant: str, by: str) -> bytes:
    """The body of a request on gated.grants.<tenant>.use; ``by`` is cut
    to :data:`MAX_BY` bytes."""
    if not isinstance(grant, str) or not grant:
        raise GrantRefused("format", "no grant to use")
    if not isinstance(by, str):
        raise GrantRefused("by", f"is {_kind(by)}, not text naming who uses the grant")
    by = by.encode("utf-8", "replace")[:MAX_BY].decode("utf-8", "ignore")
    return json.dumps({"grant": grant, "by": by}, separators=(",", ":")).encode("ascii")


def read_use_reply(data: bytes) -> str:
    """Read gated's answer to a use request: ``{"ok": true, "gid": ...}``
    returns the gid; ``{"ok": false, "error": ...}`` raises GrantUseRefused
    with gated's reason; anything else raises Malformed."""
    from gated.errors import GrantUseRefused, Malformed

    try:
        doc = parse_json(data)
    except ValueError as e:
        raise Malformed(f"gated's answer to a grant use is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise Malformed(f"gated's answer to a grant use is {_kind(doc)}, not an object")
    ok = doc.get("ok")
    if ok is True:
        gid = doc.get("gid")
        if not isinstance(gid, str) or not gid:
            raise Malformed("gated's answer to a grant use says ok but names no gid")
        return gid
    if ok is False:
        why = doc.get("error", "")
        if not isinstance(why, str):
            raise Malformed(f"gated's refusal of a grant use has an error that is {_kind(why)}, not text")
        raise GrantUseRefused(why or "no reason given")
    raise Malformed(f"gated's answer to a grant use has ok {_kind(ok)}, not a boolean")


def outcome_report(tenant: str, proposal_id: str, gid: str, status: str, error: str, at: str) -> bytes:
    """The body of an outcome report on gated.outcomes.<tenant>.<id>:
    ``{"v":1,"gid","tenant","proposal_id","status","error"?,"at"}``, the
    error cut to :data:`MAX_OUTCOME_ERROR` characters and sent only with
    status failed or refused (the executor refused the grant; gid is then
    empty when the token did not verify). Raises ValueError for a status
    other than started, succeeded, failed or refused."""
    from gated.wire import OUTCOME_STATUSES

    if status not in OUTCOME_STATUSES:
        raise ValueError(f"outcome status {status!r}: want one of {', '.join(OUTCOME_STATUSES)}")
    doc: dict[str, Any] = {"v": 1, "gid": gid, "tenant": tenant, "proposal_id": proposal_id, "status": status}
    if status in ("failed", "refused"):
        error = error or status
        if len(error) > MAX_OUTCOME_ERROR:
            error = error[: MAX_OUTCOME_ERROR - 14] + " … (truncated)"
        doc["error"] = error
    doc["at"] = at
    return json.dumps(doc, separators=(",", ":")).encode("ascii")
