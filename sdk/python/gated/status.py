"""A proposal's progress: the status events gated publishes on
gated.status.<tenant>.<id> (docs/FLEET.md), read as strictly as the Go
client reads them. The shared vectors (test/vectors/statuses.json) hold
this module to what the Go client does."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from gated.errors import StatusError
from gated.verdict import OUTCOMES, Verdict, decode_verdict
from gated.wire import valid_id, valid_tenant

STAGES: Final = ("received", "policy_decided", "review_started", "awaiting_operator", "decided")
"""The stages of the v1 status contract, in the order a proposal passes them."""

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_FIELDS = ("v", "tenant", "id", "stage", "at", "reviewer", "deadline", "reason", "verdict")
_OWN = (("reviewer", "review_started"), ("reason", "awaiting_operator"), ("verdict", "decided"))


@dataclass(frozen=True)
class Status:
    """One step of a proposal's progress. ``reviewer`` is set on
    review_started, ``deadline`` on review_started and awaiting_operator,
    ``reason`` on awaiting_operator, ``verdict`` on decided. A status shows
    progress; only the verdict a proposal call returns says what may run."""

    tenant: str
    id: str
    stage: str
    at: str
    v: int = 1
    reviewer: str = ""
    deadline: str = ""
    reason: str = ""
    verdict: Verdict | None = None


def _time(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise StatusError(name, f"must be an RFC 3339 time string, not {json.dumps(value)[:40]}")
    if not _TIME.fullmatch(value):
        raise StatusError(name, f"must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not {value[:40]!r}")
    return value


def decode_status(data: bytes | str) -> Status:
    """Decode one status event strictly: one JSON object, every member
    known and given once, of the right type, the members of its stage only,
    and the ones its stage requires present. Raises StatusError naming the
    member at fault."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise StatusError("", "not valid UTF-8") from None
    else:
        text = data
    if not text.strip():
        raise StatusError("", "empty; expected a JSON object")
    # Each object remembers a member given twice; only the top object's
    # count here: nested objects are the verdict's, read as a verdict
    # message is.
    dups: dict[int, str] = {}

    def pairs(members: list[tuple[str, Any]]) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for k, v in members:
            if k in d and id(d) not in dups:
                dups[id(d)] = k
            d[k] = v
        return d

    try:
        top = json.loads(text, object_pairs_hook=pairs, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise StatusError("", f"not valid JSON: {e}") from None
    if not isinstance(top, dict):
        raise StatusError("", "must be a JSON object")
    if id(top) in dups:
        raise StatusError(dups[id(top)][:64], "appears more than once")
    out: dict[str, Any] = {}
    for key, value in top.items():
        if key not in _FIELDS:
            raise StatusError(key[:64], "is not a field of the v1 status event")
        if key == "v":
            if isinstance(value, bool) or not isinstance(value, int) or value != 1:
                raise StatusError(key, f"must be 1, not {json.dumps(value)[:40]}")
            out["v"] = 1
        elif key == "tenant":
            if not valid_tenant(value):
                raise StatusError(key, f"must be a tenant token [a-z0-9_-]{{1,64}}, not {json.dumps(value)[:80]}")
            out[key] = value
        elif key == "id":
            if not valid_id(value):
                raise StatusError(key, f"must be a proposal id [A-Za-z0-9_-]{{1,128}}, not {json.dumps(value)[:160]}")
            out[key] = value
        elif key == "stage":
            if not isinstance(value, str):
                raise StatusError(key, f"must be a string, not {json.dumps(value)[:40]}")
            if value not in STAGES:
                raise StatusError(key, f"{value[:40]!r} is not a stage of the v1 status contract")
            out[key] = value
        elif key in ("at", "deadline"):
            out[key] = _time(key, value)
        elif key == "reviewer":
            if not isinstance(value, str) or not value:
                raise StatusError(key, f"must be a non-empty string, not {json.dumps(value)[:40]}")
            out[key] = value
        elif key == "reason":
            if not isinstance(value, str):
                raise StatusError(key, f"must be a string, not {json.dumps(value)[:40]}")
            out[key] = value
        elif key == "verdict":
            if not isinstance(value, dict):
                raise StatusError(key, f"must be an object, not {json.dumps(value)[:40]}")
            try:
                out[key] = decode_verdict(json.dumps(value).encode("utf-8"))
            except (ValueError, RecursionError) as e:
                raise StatusError(key, f"is not a verdict: {e}") from None
    for name in ("v", "tenant", "id", "stage", "at"):
        if name not in top:
            raise StatusError(name, "is missing")
    stage = out["stage"]
    for name, own in _OWN:
        if name in top and stage != own:
            raise StatusError(name, f"belongs to stage {own}, not {stage}")
    if "deadline" in top and stage not in ("review_started", "awaiting_operator"):
        raise StatusError("deadline", f"belongs to stages review_started and awaiting_operator, not {stage}")
    if stage == "review_started" and "reviewer" not in top:
        raise StatusError("reviewer", "is missing; stage review_started names its reviewer")
    if stage == "awaiting_operator" and "deadline" not in top:
        raise StatusError("deadline", "is missing; stage awaiting_operator has a deadline")
    if stage == "decided":
        v: Verdict | None = out.get("verdict")
        if v is None:
            raise StatusError("verdict", "is missing; stage decided carries the verdict")
        if v.tenant != out["tenant"] or v.proposal_id != out["id"]:
            raise StatusError("verdict", f"names {v.tenant[:64]}.{v.proposal_id[:128]}, not the status's {out['tenant']}.{out['id']}")
        if v.outcome not in OUTCOMES:
            raise StatusError("verdict.outcome", f"{v.outcome[:40]!r} is not an outcome")
        if v.approved != (v.outcome == "approved"):
            raise StatusError("verdict.approved", f"is {str(v.approved).lower()} for outcome {v.outcome}")
    return Status(**out)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def status_update(tenant: str, id: str, data: bytes | str) -> Status:
    """Read one message of tenant's proposal id's status subject: the
    status, or StatusError when it is malformed or names another proposal."""
    st = decode_status(data)
    if st.tenant != tenant:
        raise StatusError("tenant", f"is {st.tenant} on the status subject of {tenant}.{id}")
    if st.id != id:
        raise StatusError("id", f"is {st.id} on the status subject of {tenant}.{id}")
    return st
