"""gated's NATS contract as the fleet client uses it: subjects, headers,
tokens, and the byte-exact proposal encoding the shared vectors pin."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from json.encoder import encode_basestring as _encode_basestring
from typing import Any, Final

from gated.errors import BadProposal
from gated.fold import as_go_string as _valid_unicode
from gated.fold import check_folded

SCHEMA_VERSION: Final = 1
PROPOSAL_SUBJECT_PREFIX: Final = "gated.proposals."
VERDICT_SUBJECT_PREFIX: Final = "gated.verdicts."
STATUS_SUBJECT_PREFIX: Final = "gated.status."
STATUS_WATCH_SUBJECT_PREFIX: Final = "gated.watch."
REVIEW_SUBJECT: Final = "gated.review"
GRANT_KEYS_SUBJECT: Final = "gated.grants.keys"
GRANT_SUBJECT_PREFIX: Final = "gated.grants."
OUTCOME_SUBJECT_PREFIX: Final = "gated.outcomes."
OUTCOME_STATUSES: Final = ("started", "succeeded", "failed", "refused")
VERDICT_BUCKET: Final = "GATED_VERDICTS"
DEFAULT_API_PREFIX: Final = "$JS.API"
MSG_ID_HEADER: Final = "Nats-Msg-Id"
STATUS_HEADER: Final = "Gated-Status"
SUBJECT_HEADER: Final = "Nats-Subject"
SERVICE_ERROR_CODE_HEADER: Final = "Nats-Service-Error-Code"
SERVICE_ERROR_HEADER: Final = "Nats-Service-Error"

_TENANT = re.compile(r"[a-z0-9_-]{1,64}")
_WIDE = re.compile(r"[A-Za-z0-9_-]{1,128}")


def valid_tenant(s: object) -> bool:
    """Whether s is a tenant token: [a-z0-9_-]{1,64}."""
    return isinstance(s, str) and _TENANT.fullmatch(s) is not None


def valid_id(s: object) -> bool:
    """Whether s is a proposal id: [A-Za-z0-9_-]{1,128}."""
    return isinstance(s, str) and _WIDE.fullmatch(s) is not None


def valid_action(s: object) -> bool:
    """Whether s is an action token: [A-Za-z0-9_-]{1,128}."""
    return isinstance(s, str) and _WIDE.fullmatch(s) is not None


def proposal_subject(tenant: str, action: str) -> str:
    """Where a proposal of tenant for action is published."""
    return PROPOSAL_SUBJECT_PREFIX + tenant + "." + action


def verdict_subject(tenant: str, id: str) -> str:
    """Where the verdict for tenant and id is published."""
    return VERDICT_SUBJECT_PREFIX + tenant + "." + id


def status_subject(tenant: str, id: str) -> str:
    """Where gated publishes each stage of tenant's proposal id."""
    return STATUS_SUBJECT_PREFIX + tenant + "." + id


def status_watch_subject(tenant: str, id: str) -> str:
    """Where a watch asks gated for the status of tenant's proposal id."""
    return STATUS_WATCH_SUBJECT_PREFIX + tenant + "." + id


def review_subject(tenant: str) -> str:
    """The review service's endpoint of one tenant."""
    return REVIEW_SUBJECT + "." + tenant


def grant_use_subject(tenant: str, agent: str | None = None) -> str:
    """Where an executor asks gated to use one of tenant's grants; with
    ``agent``, that agent's subject, where gated accepts only a grant
    issued to it."""
    subject = GRANT_SUBJECT_PREFIX + tenant + ".use"
    return subject + "." + agent if agent else subject


def outcome_subject(tenant: str, id: str, agent: str | None = None) -> str:
    """Where an executor reports what happened to tenant's approved
    proposal id (stream GATED_OUTCOMES captures it); with ``agent``, that
    agent's subject, where gated takes a report only from the agent the
    grant was issued to or that used it."""
    subject = OUTCOME_SUBJECT_PREFIX + tenant + "." + id
    return subject + "." + agent if agent else subject


def verdict_lookup_subject(api_prefix: str, tenant: str, id: str) -> str:
    """The JetStream direct-get subject that reads the stored verdict of
    tenant and id (the Go client's VerdictLookupSubject)."""
    return f"{api_prefix}.DIRECT.GET.KV_{VERDICT_BUCKET}.$KV.{VERDICT_BUCKET}.{tenant}.{id}"


def verdict_key_subject(tenant: str, id: str) -> str:
    """The subject of the stored verdict's entry in the bucket's stream."""
    return f"$KV.{VERDICT_BUCKET}.{tenant}.{id}"


def digest(data: bytes) -> str:
    """The hex SHA-256 of a proposal's exact bytes: a verdict's
    proposal_sha256."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Address:
    """What a proposal must carry to be published: its tenant, id and
    action tokens."""

    tenant: str
    id: str
    action: str

    @property
    def key(self) -> str:
        """The proposal's Nats-Msg-Id and its verdict's key: <tenant>.<id>."""
        return self.tenant + "." + self.id

    def check(self) -> None:
        """Raise BadProposal unless every token is valid."""
        if not valid_tenant(self.tenant):
            raise BadProposal(f"tenant {self.tenant!r} must match [a-z0-9_-]{{1,64}}")
        if not valid_id(self.id):
            raise BadProposal(f"id {self.id!r} must match [A-Za-z0-9_-]{{1,128}}")
        if not valid_action(self.action):
            raise BadProposal(f"action {self.action!r} must match [A-Za-z0-9_-]{{1,128}}")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: bytes | str) -> Any:
    """Strict JSON decoding: UTF-8 only (no guessing of UTF-16 or 32), and
    NaN and Infinity are refused, as Go does. Raises ValueError."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data).decode("utf-8")
    return json.loads(data, parse_constant=_no_constants)


def address_of(data: bytes) -> Address:
    """Read the address of a raw proposal. It checks only what publishing
    needs; gated validates the rest and answers invalid. Keys are matched
    exactly. Raises BadProposal."""
    try:
        doc = loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BadProposal(f"proposal is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadProposal(f"proposal is a JSON {type(doc).__name__}, not an object")
    fields: list[str] = []
    for name in ("tenant", "id", "action"):
        value = doc.get(name)
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise BadProposal(f"proposal field {name} is a JSON {type(value).__name__}, not a string")
        fields.append(value)
    a = Address(*fields)
    a.check()
    return a


# ---------------------------------------------------------------------------
# The byte-exact encoding of a proposal: what Go's encoding/json makes of
# engine.Proposal (test/vectors/README.md).

_STR, _INT, _BOOL, _ANY_MAP, _TIME, _STR_LIST = "str", "int", "bool", "map", "time", "strs"
# A map whose member names, at any depth, must not fold together.
_ARGS = "args"

# A struct schema: (JSON name, type, omitempty) in the Go struct's order.
_Schema = tuple[tuple[str, Any, bool], ...]

_FINDING: _Schema = (
    ("id", _STR, False),
    ("body", _STR, False),
    ("path", _STR, True),
    ("line", "intptr", False),
    ("criterion", _STR, True),
    ("status", _STR, True),
    ("resolution", _STR, True),
)
_PRIOR_REVIEW: _Schema = (
    ("proposal_id", _STR, True),
    ("round", _INT, False),
    ("findings", ("list", _FINDING), True),
    ("summary", _STR, True),
)
_RUN: _Schema = (
    ("run_id", _STR, False),
    ("task_id", _STR, True),
    ("status", _STR, False),
    ("summary", _STR, True),
    ("diff", _STR, True),
    ("test_output", _STR, True),
    ("round", _INT, False),
    ("worker", _STR, False),
    ("prior_reviews", ("list", _PRIOR_REVIEW), True),
)
_CRITERION: _Schema = (
    ("id", _STR, False),
    ("description", _STR, False),
    ("required", _BOOL, False),
    ("kind", _STR, True),
    ("params", _ANY_MAP, True),
    ("evidence", _ANY_MAP, True),
)
_OPERATOR: _Schema = (("id", _STR, False), ("roles", _STR_LIST, True))
_REQUESTED_BY: _Schema = (("agent", _STR, False), ("session", _STR, True))
_FLAGS: _Schema = (
    ("skip_review", _BOOL, False),
    ("force_approve", _BOOL, False),
    ("force_approve_no_sop", _BOOL, False),
    ("user_confirmed", _BOOL, False),
)
_PROPOSAL: _Schema = (
    ("v", _INT, False),
    ("id", _STR, False),
    ("tenant", _STR, False),
    ("kind", _STR, True),
    ("action", _STR, False),
    ("class", _STR, False),
    ("target", _ANY_MAP, True),
    ("arguments", _ARGS, True),
    ("reason", _STR, True),
    ("blast_radius", _STR, True),
    ("operator", ("ptr", _OPERATOR), True),
    ("requested_by", ("ptr", _REQUESTED_BY), True),
    ("incident_id", _STR, True),
    ("context_summary", _STR, True),
    ("flags", ("struct", _FLAGS), False),
    ("reviewer", _STR, True),
    ("criteria", ("list", _CRITERION), True),
    ("run", ("ptr", _RUN), True),
    ("created_at", _TIME, True),
    ("labels", _STR_LIST, True),
)

_HTML = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


# Printable ASCII but for ", \\, <, > and &: written as it is.
_PLAIN = re.compile(r"[ !#-%'-;=?-\[\]-~]*")


def encode_string(s: str) -> str:
    """A JSON string as Go's encoding/json writes it."""
    if _PLAIN.fullmatch(s):
        return '"' + s + '"'
    # Python escapes ", \\, \\b, \\f, \\n, \\r, \\t and other controls as \\u00xx,
    # as Go does; Go also escapes <, >, & and the line separators.
    return _encode_basestring(_valid_unicode(s)).translate(_HTML)


def encode_float(f: float) -> str:
    """A number as Go's encoding/json writes a float64."""
    if math.isnan(f) or math.isinf(f):
        raise BadProposal(f"number {f} cannot be encoded as JSON")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign, digits, exp = Decimal(repr(f)).as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    # exp counts from the last digit of the original tuple: rebase it on ds.
    exp += len(digits) - len(ds)
    neg = "-" if sign else ""
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        e = exp + len(ds) - 1
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        es = f"{abs(e):02d}" if e < 0 else f"{e:02d}"
        out = f"{mant}e{'-' if e < 0 else '+'}{es}"
        if e < 0 and len(es) == 2 and es[0] == "0":
            out = f"{mant}e-{es[1]}"
        return neg + out
    if exp >= 0:
        return neg + ds + "0" * exp
    point = len(ds) + exp
    if point > 0:
        return neg + ds[:point] + "." + ds[point:]
    return neg + "0." + "0" * (-point) + ds


def _encode_any(v: Any, path: str, depth: int = 0) -> str:
    if depth > 10000:
        raise BadProposal(f"{path}: nested too deeply")
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return encode_string(v)
    if isinstance(v, int):
        try:
            return encode_float(float(v))
        except OverflowError:
            raise BadProposal(f"{path}: number {v} does not fit a float64") from None
    if isinstance(v, float):
        return encode_float(v)
    if isinstance(v, dict):
        return _encode_map(v, path, depth)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_encode_any(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)) + "]"
    raise BadProposal(f"{path}: a {type(v).__name__} is not a JSON value")


def _encode_map(m: dict[Any, Any], path: str, depth: int) -> str:
    for k in m:
        if not isinstance(k, str):
            raise BadProposal(f"{path}: key {k!r} is not a string")
    keys = sorted(m, key=_valid_unicode)
    return "{" + ",".join(encode_string(k) + ":" + _encode_any(m[k], f"{path}.{k}", depth + 1) for k in keys) + "}"


_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|([+-])(\d{2}):(\d{2}))")


def encode_time(s: str, path: str) -> str:
    """An RFC 3339 time as Go's time.Time writes it back (RFC3339Nano: the
    fraction without trailing zeros, a zero offset as Z)."""
    m = _RFC3339.fullmatch(s)
    if m is None:
        raise BadProposal(f"{path}: {s!r} is not an RFC 3339 time")
    year, month, day, hour, minute, sec = (int(m.group(i)) for i in range(1, 7))
    try:
        datetime(year, month, day, hour, minute, sec)
    except ValueError as e:
        raise BadProposal(f"{path}: {s!r}: {e}") from None
    frac = (m.group(7) or "").rstrip("0")
    zone = "Z"
    if m.group(8) != "Z":
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise BadProposal(f"{path}: {s!r} has an offset out of range")
        if oh or om:
            zone = f"{m.group(9)}{oh:02d}:{om:02d}"
    return f'"{s[:19]}{"." + frac if frac else ""}{zone}"'


def _empty(typ: Any, v: Any) -> bool:
    if v is None:
        return True
    if typ == _STR:
        return bool(v == "")
    if typ == _INT:
        return bool(v == 0)
    if typ in (_BOOL,):
        return v is False
    if typ in (_ANY_MAP, _ARGS, _STR_LIST) or (isinstance(typ, tuple) and typ[0] == "list"):
        return len(v) == 0
    return False


def _encode_field(typ: Any, v: Any, path: str) -> str:
    if typ == _STR:
        if v is None:
            v = ""
        if not isinstance(v, str):
            raise BadProposal(f"{path} must be a string, not a {type(v).__name__}")
        return encode_string(v)
    if typ in (_INT, "intptr"):
        if v is None:
            return "null" if typ == "intptr" else "0"
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadProposal(f"{path} must be an integer, not a {type(v).__name__}")
        if not -(2**63) <= v < 2**63:
            raise BadProposal(f"{path}: {v} does not fit a 64-bit integer")
        return str(v)
    if typ == _BOOL:
        if v is None:
            v = False
        if not isinstance(v, bool):
            raise BadProposal(f"{path} must be a boolean, not a {type(v).__name__}")
        return "true" if v else "false"
    if typ == _ANY_MAP:
        if v is None:
            return "null"
        if not isinstance(v, dict):
            raise BadProposal(f"{path} must be an object, not a {type(v).__name__}")
        return _encode_map(v, path, 0)
    if typ == _ARGS:
        return encode_arguments(v)
    if typ == _STR_LIST:
        if v is None:
            return "null"
        if not isinstance(v, (list, tuple)):
            raise BadProposal(f"{path} must be a list, not a {type(v).__name__}")
        return "[" + ",".join(_encode_field(_STR, x, f"{path}[{i}]") for i, x in enumerate(v)) + "]"
    if typ == _TIME:
        if not isinstance(v, str):
            raise BadProposal(f"{path} must be an RFC 3339 string, not a {type(v).__name__}")
        return encode_time(v, path)
    kind, schema = typ
    if kind == "list":
        if v is None:
            return "null"
        if not isinstance(v, (list, tuple)):
            raise BadProposal(f"{path} must be a list, not a {type(v).__name__}")
        return "[" + ",".join(_encode_struct(schema, x, f"{path}[{i}]") for i, x in enumerate(v)) + "]"
    if kind == "ptr" and v is None:
        return "null"
    return _encode_struct(schema, {} if v is None else v, path)


def encode_arguments(arguments: Any) -> str:
    """A proposal's arguments as the proposal carries them: a JSON object
    encoded as Go encodes it. Raises BadProposal for what is not a JSON
    object, and for two member names, at any depth, equal under Unicode
    simple case folding (gated refuses such a proposal as invalid)."""
    if not isinstance(arguments, dict):
        raise BadProposal(f"arguments must be an object, not a {type(arguments).__name__}")
    data = _encode_map(arguments, "arguments", 0)
    found = check_folded(arguments)
    if found is not None:
        raise BadProposal(str(found))
    return data


def _encode_struct(schema: _Schema, doc: Any, path: str) -> str:
    if not isinstance(doc, dict):
        raise BadProposal(f"{path} must be an object, not a {type(doc).__name__}")
    known = {name for name, _, _ in schema}
    for k in doc:
        if k not in known:
            raise BadProposal(f"{path}: unknown field {k!r}")
    parts = []
    for name, typ, omitempty in schema:
        v = doc.get(name)
        if omitempty and _empty(typ, v):
            continue
        parts.append(f'"{name}":' + _encode_field(typ, v, f"{path}.{name}" if path else name))
    return "{" + ",".join(parts) + "}"


def encode_proposal(doc: dict[str, Any]) -> tuple[Address, bytes]:
    """The exact bytes a client publishes for a proposal given as a JSON
    value, and its address. v is set to 1 when absent or zero; unknown
    fields, wrong types and bad tokens raise BadProposal."""
    if not isinstance(doc, dict):
        raise BadProposal(f"proposal must be an object, not a {type(doc).__name__}")
    if doc.get("v") is None or (doc.get("v") == 0 and doc.get("v") is not False):
        doc = {**doc, "v": SCHEMA_VERSION}
    data = _encode_struct(_PROPOSAL, doc, "").encode("utf-8")
    a = Address(doc.get("tenant") or "", doc.get("id") or "", doc.get("action") or "")
    a.check()
    return a, data
