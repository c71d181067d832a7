"""Typed proposals. A proposal can also be given as a plain dict with the
wire names (docs/FLEET.md); both encode to the same bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gated.wire import Address, encode_proposal


@dataclass
class Operator:
    """The human on whose behalf an agent acts."""

    id: str
    roles: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return {"id": self.id, "roles": list(self.roles)}


@dataclass
class RequestedBy:
    """The agent that proposes; gated uses it to forbid self-review."""

    agent: str
    session: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return {"agent": self.agent, "session": self.session}


@dataclass
class Flags:
    """The requests an agent may attach; the default policy refuses
    skip_review and force_approve outright."""

    skip_review: bool = False
    force_approve: bool = False
    force_approve_no_sop: bool = False
    user_confirmed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "skip_review": self.skip_review,
            "force_approve": self.force_approve,
            "force_approve_no_sop": self.force_approve_no_sop,
            "user_confirmed": self.user_confirmed,
        }


@dataclass
class Proposal:
    """A proposal (docs/FLEET.md). ``class_`` is the wire field ``class``.
    ``criteria`` and ``run`` (run reviews) are given in their wire form."""

    id: str
    tenant: str
    action: str
    class_: str
    v: int = 1
    kind: str = ""
    target: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None
    """What the executor runs the action with, when it forwards a call: no
    two member names, at any depth, may be equal under case folding."""
    reason: str = ""
    blast_radius: str = ""
    operator: Operator | None = None
    requested_by: RequestedBy | None = None
    incident_id: str = ""
    context_summary: str = ""
    flags: Flags = field(default_factory=Flags)
    reviewer: str = ""
    criteria: list[dict[str, Any]] | None = None
    run: dict[str, Any] | None = None
    created_at: str | None = None
    labels: list[str] | None = None
    """Flow labels the agent adds to its action's (docs/POLICIES.md#flows):
    at most 16, each matching [a-z0-9_-]{1,64}."""

    def to_dict(self) -> dict[str, Any]:
        """The proposal as a JSON value with the wire names."""
        d: dict[str, Any] = {
            "v": self.v,
            "id": self.id,
            "tenant": self.tenant,
            "kind": self.kind,
            "action": self.action,
            "class": self.class_,
            "target": self.target,
            "arguments": self.arguments,
            "reason": self.reason,
            "blast_radius": self.blast_radius,
            "operator": self.operator.to_dict() if self.operator else None,
            "requested_by": self.requested_by.to_dict() if self.requested_by else None,
            "incident_id": self.incident_id,
            "context_summary": self.context_summary,
            "flags": self.flags.to_dict(),
            "reviewer": self.reviewer,
            "criteria": self.criteria,
            "run": self.run,
            "created_at": self.created_at,
            "labels": list(self.labels) if self.labels else None,
        }
        return d

    def encode(self) -> tuple[Address, bytes]:
        """The address and the exact bytes a client publishes."""
        return encode_proposal(self.to_dict())
