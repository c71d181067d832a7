"""Verdicts and the client's judgement of them: which messages are answers,
and which answers are believed. The shared vectors (test/vectors) hold this
module to what the Go client does."""

from __future__ import annotations

import re
from datetime import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gated.errors import (
    GatedError,
    IDReused,
    Malformed,
    NotFound,
    NotGated,
    NotThisProposal,
    StoreError,
    Unconfirmed,
    not_approved,
    service_error,
)
from gated.wire import SERVICE_ERROR_CODE_HEADER, SERVICE_ERROR_HEADER, SUBJECT_HEADER, Address, loads, verdict_key_subject

OUTCOMES = ("approved", "rejected", "blocked", "error", "timeout", "invalid")


@dataclass(frozen=True)
class OperatorHold:
    """Why an action's verdict waits for an operator, and until when."""

    deadline: str
    """RFC 3339: when the hold ends in a timeout, never an approval."""
    reason: str = ""
    """Why a person must decide."""
    rule: str = ""
    """The policy rule that held the action."""


@dataclass(frozen=True)
class OperatorDecision:
    """An operator's decision on a held action, as its verdict records it."""

    id: str
    """The operator's id in gated's operator list."""
    key: str = ""
    """The public nkey that signed the decision."""
    decision: str = ""
    """approve or reject."""
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    """gated's answer to a proposal (docs/FLEET.md). ``raw`` holds the whole
    decoded message, reviews and policy included."""

    proposal_id: str
    tenant: str
    outcome: str
    approved: bool
    v: int = 0
    action: str = ""
    kind: str = ""
    stage: str = ""
    reason: str = ""
    policy: dict[str, Any] | None = None
    reviews: list[dict[str, Any]] = field(default_factory=list)
    decided_at: str = ""
    latency_ms: float = 0.0
    audit_seq: int = 0
    proposal_sha256: str = ""
    target_key: str = ""
    agent: str = ""
    duplicate_of: str = ""
    run: dict[str, Any] | None = None
    awaiting_operator: OperatorHold | None = None
    """Set on an action's verdict held for an operator: the verdict is not
    final (:attr:`is_final`)."""
    operator_decision: OperatorDecision | None = None
    """Set on the verdict of a held action an operator decided."""
    grant: str = ""
    """On an approval: gated's signed grant (a compact JWS, docs/GRANTS.md)
    that lets the approved action run once. Verify it and use it before
    acting (:class:`gated.ToolGate` does); "" on any other verdict."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_approval(self) -> bool:
        """True only for outcome approved with approved true."""
        return self.outcome == "approved" and self.approved is True

    @property
    def is_final(self) -> bool:
        """False only for a verdict held for an operator: outcome blocked
        with ``awaiting_operator`` (an action) or ``run.awaiting_operator``
        (a run). gated replaces such a verdict with the operator's decision
        or, for an action, a timeout at its deadline: wait for it with
        :meth:`gated.Client.await_decision`. A held verdict is never an
        approval."""
        if self.outcome != "blocked":
            return True
        return self.awaiting_operator is None and not (self.run or {}).get("awaiting_operator")

    def check(self) -> Verdict:
        """Return the verdict when it approves its proposal, else raise the
        typed NotApproved error of its outcome."""
        if not self.is_approval:
            raise not_approved(self)
        return self


_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_STR_FIELDS = ("proposal_id", "tenant", "action", "kind", "outcome", "stage", "reason", "proposal_sha256",
               "target_key", "agent", "duplicate_of", "decided_at", "grant")


def decode_verdict(data: bytes) -> Verdict:
    """Decode a verdict as Go decodes engine.Verdict: a JSON object whose
    known members have their types (null is the zero value). Raises
    ValueError."""
    doc = loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"a JSON {type(doc).__name__}, not an object")
    out: dict[str, Any] = {}
    for name in _STR_FIELDS:
        v = doc.get(name)
        if v is None:
            continue
        if not isinstance(v, str):
            raise ValueError(f"{name} is a {type(v).__name__}, not a string")
        out[name] = v
    if "decided_at" in out and not _TIME.fullmatch(out["decided_at"]):
        raise ValueError(f"decided_at {out['decided_at']!r} is not an RFC 3339 time")
    for name in ("v", "audit_seq"):
        v = doc.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or (name == "audit_seq" and not 0 <= v < 2**64):
            raise ValueError(f"{name} is not an integer in range")
        out[name] = v
    approved = doc.get("approved")
    if approved is not None and not isinstance(approved, bool):
        raise ValueError("approved is not a boolean")
    out["approved"] = approved is True
    lat = doc.get("latency_ms")
    if lat is not None:
        if isinstance(lat, bool) or not isinstance(lat, (int, float)):
            raise ValueError("latency_ms is not a number")
        out["latency_ms"] = float(lat)
    for name in ("policy", "run"):
        v = doc.get(name)
        if v is not None and not isinstance(v, dict):
            raise ValueError(f"{name} is not an object")
        out[name] = v
    run = out.get("run")
    if run is not None:
        awaited = run.get("awaiting_operator")
        if awaited is not None and (not isinstance(awaited, list) or not all(isinstance(c, str) for c in awaited)):
            raise ValueError("run.awaiting_operator is not a list of strings")
    hold = _members(doc, "awaiting_operator", ("deadline", "reason", "rule"))
    if hold is not None:
        dl = hold.get("deadline")
        if dl is not None and not (_TIME.fullmatch(dl) and _valid_time(dl)):
            raise ValueError(f"awaiting_operator.deadline {hold.get('deadline')!r} is not an RFC 3339 time")
        out["awaiting_operator"] = OperatorHold(
            deadline=hold.get("deadline", "0001-01-01T00:00:00Z"), reason=hold.get("reason", ""), rule=hold.get("rule", "")
        )
    decided = _members(doc, "operator_decision", ("id", "key", "decision", "reason"))
    if decided is not None:
        out["operator_decision"] = OperatorDecision(**{"id": "", **decided})
    reviews = doc.get("reviews")
    if reviews is not None:
        if not isinstance(reviews, list) or not all(isinstance(r, dict) for r in reviews):
            raise ValueError("reviews is not a list of objects")
        out["reviews"] = reviews
    out.setdefault("proposal_id", "")
    out.setdefault("tenant", "")
    out.setdefault("outcome", "")
    return Verdict(raw=doc, **out)


def _members(doc: dict[str, Any], name: str, fields: tuple[str, ...]) -> dict[str, str] | None:
    """The string members of the object doc[name], as Go reads a pointer
    to a struct of strings: None when absent or null, ValueError when it is
    not an object or a member is not a string."""
    obj = doc.get(name)
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ValueError(f"{name} is a {type(obj).__name__}, not an object")
    out: dict[str, str] = {}
    for f in fields:
        v = obj.get(f)
        if v is None:
            continue
        if not isinstance(v, str):
            raise ValueError(f"{name}.{f} is a {type(v).__name__}, not a string")
        out[f] = v
    return out


def _valid_time(s: str) -> bool:
    """Whether an RFC 3339 text names a real date and time, as Go's
    time.Time requires (no month 13, no February 30)."""
    try:
        datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def verdict_message(a: Address, data: bytes) -> Verdict | None:
    """Read a message on a's verdict subject. Anything that is not a verdict
    naming a's tenant and id is not an answer (None) and is skipped, not
    taken as a failure: another client can have a reply sent there."""
    try:
        v = decode_verdict(data)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    if v.tenant != a.tenant or v.proposal_id != a.id:
        return None
    return v


def answer(a: Address, sha256: str, v: Verdict) -> Verdict:
    """Accept only a verdict for exactly these bytes: an earlier proposal's
    verdict under the same id, or a message that merely claims to be a
    verdict, is not this proposal's answer."""
    if v.tenant != a.tenant or v.proposal_id != a.id:
        raise NotThisProposal(f"verdict names {v.tenant}.{v.proposal_id}, want {a.key}")
    if v.proposal_sha256 != sha256:
        if v.proposal_sha256 == "":
            raise NotGated(f"verdict of {a.key} names no proposal digest: gated always sets one, so it is not gated's")
        raise IDReused(f"proposal id already used by a different proposal: {a.key}")
    return v


async def confirm_approval(
    a: Address, sha256: str, v: Verdict, stored: Callable[[], Awaitable[Verdict]]
) -> Verdict:
    """Accept a verdict that arrived as a message. A refusal is taken as it
    comes (it can only stop an action), but an approval counts only once the
    stored verdict, which only gated can write, confirms it; a look-up that
    fails is not an approval."""
    v = answer(a, sha256, v)
    if not v.approved:
        return v  # not an approval, whatever its outcome says
    try:
        s = await stored()
    except GatedError as e:
        raise Unconfirmed(f"confirming the approval of {a.key} with its stored verdict: {e}") from e
    return answer(a, sha256, s)


def decode_stored_verdict(tenant: str, id: str, headers: Mapping[str, str] | None, data: bytes) -> Verdict:
    """Read a direct-get reply of the verdict bucket: a 404 status or a KV
    delete marker raises NotFound, anything else unreadable StoreError."""
    h = headers or {}
    if not data:
        status = h.get("Status", "")
        if status == "404":
            raise NotFound(f"no verdict stored for {tenant}.{id}")
        if status:
            raise StoreError(f"reading verdict {tenant}.{id}: JetStream answered {status} {h.get('Description', '')}")
    if h.get("KV-Operation") in ("DEL", "PURGE"):
        raise NotFound(f"the verdict of {tenant}.{id} was deleted")
    subj = h.get(SUBJECT_HEADER, "")
    if subj and subj != verdict_key_subject(tenant, id):
        raise StoreError(f"reading verdict {tenant}.{id}: JetStream returned the entry of {subj}")
    try:
        v = decode_verdict(data)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise StoreError(f"decoding stored verdict {tenant}.{id}: {e}") from None
    if v.tenant != tenant or v.proposal_id != id:
        raise StoreError(f"stored verdict under {tenant}.{id} names {v.tenant}.{v.proposal_id}")
    return v


def decode_review_reply(headers: Mapping[str, str] | None, data: bytes) -> Verdict:
    """Read a reply of the review service: a micro error (headers
    Nats-Service-Error-Code and Nats-Service-Error) raises the typed
    ServiceError, anything else must be a verdict (else Malformed)."""
    h = headers or {}
    code = h.get(SERVICE_ERROR_CODE_HEADER, "")
    if code:
        n = int(code) if re.fullmatch(r"[+-]?[0-9]{1,9}", code) else 500
        if n < 100 or n > 999:
            n = 500
        raise service_error(n, h.get(SERVICE_ERROR_HEADER, "") or "no description")
    try:
        v = decode_verdict(data)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise Malformed(f"decoding the review service's reply: {e}") from None
    if not v.proposal_id or not v.tenant or not v.outcome:
        raise Malformed("decoding the review service's reply: not a verdict (no proposal_id, tenant or outcome)")
    return v
