"""Typed errors of the gated fleet client.

They mirror the Go client's errors (package bus/fleet). Every error has a
``kind``: the name the shared test vectors use for it. A verdict that is not
an approval raises a :class:`NotApproved` subclass that carries the verdict;
a refusal of the review service raises a :class:`ServiceError` that is also
an instance of the error its status code means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gated.verdict import Verdict


class GatedError(Exception):
    """Base class of every error the gated client raises."""

    kind: str = "gated_error"


class BadProposal(GatedError, ValueError):
    """The proposal cannot be addressed: it is not a JSON object with valid
    tenant, id and action tokens, or cannot be encoded. gated never saw it."""

    kind = "bad_proposal"


class NoVerdict(GatedError, TimeoutError):
    """No verdict arrived before the deadline. The proposal may still be
    decided later: look it up with ``Client.verdict``, and never act on it
    before."""

    kind = "no_verdict"


class ConnectionLost(NoVerdict):
    """The connection to NATS closed while the client waited: no verdict
    was received. The proposal may still be decided later."""

    kind = "no_verdict"


class IDReused(GatedError):
    """The id was already used by a different proposal of the same tenant
    (the verdict names other bytes). The new proposal was never decided:
    choose a new id."""

    kind = "id_reused"


class NotGated(GatedError):
    """A verdict without a proposal digest: gated always sets one, so the
    message is not gated's."""

    kind = "not_gated"


class NotThisProposal(GatedError):
    """A verdict that names another tenant or proposal id."""

    kind = "not_this_proposal"


class Unconfirmed(GatedError):
    """An approval that arrived as a message but that the stored verdict,
    which only gated can write, does not confirm. It is not an approval."""

    kind = "unconfirmed"


class Malformed(GatedError):
    """A reply of the review service that is not a verdict."""

    kind = "malformed"


class StatusError(GatedError, ValueError):
    """A message on a proposal's status subject that is not a well-formed
    status event. ``field`` names the member at fault ("" for the message as
    a whole, "verdict.outcome" for a member of the verdict). A watch that
    raises it stays open."""

    kind = "bad_status"

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"status event: field {field}: {problem}" if field else f"status event: {problem}")


class StoreError(GatedError):
    """The stored verdict could not be read or decoded."""

    kind = "store_error"


class NotFound(StoreError):
    """No verdict is stored under the key (never decided, or past the
    bucket's TTL)."""

    kind = "not_found"


class InvalidConfig(GatedError, ValueError):
    """A client or tool-gate setting is unusable."""

    kind = "invalid_config"


class InvalidToolSpec(GatedError, ValueError):
    """A guarded tool's spec is unusable; such a tool never runs."""

    kind = "invalid_tool_spec"


class NotApproved(GatedError):
    """A verdict that is not an approval, whatever its outcome. The
    subclasses name the outcome; an unknown outcome raises this class."""

    kind = "not_approved"
    outcome: str = ""

    def __init__(self, verdict: Verdict, message: str | None = None) -> None:
        self.verdict = verdict
        super().__init__(
            message
            or f"proposal {verdict.tenant}.{verdict.proposal_id} {verdict.outcome} "
            f"at stage {verdict.stage}: {verdict.reason}"
        )


class ReviewRejected(NotApproved):
    """Outcome rejected: the policy or a reviewer said no."""

    outcome = "rejected"


class ReviewBlocked(NotApproved):
    """Outcome blocked: no reviewer could be routed."""

    outcome = "blocked"


class AwaitingOperator(ReviewBlocked):
    """Outcome blocked, held for an operator (``awaiting_operator`` on an
    action, ``run.awaiting_operator`` on a run). Not final and never an
    approval: gated replaces the verdict with the operator's decision or,
    for an action, a timeout at the deadline. Wait for it with
    ``Client.await_decision(e.verdict)``."""


class ReviewError(NotApproved):
    """Outcome error: a reviewer, a tool or gated's infrastructure failed.
    Propose again with a new id."""

    outcome = "error"


class ReviewTimeout(NotApproved):
    """Outcome timeout: the review passed its deadline inside gated. It
    differs from :class:`NoVerdict`, which means the caller stopped
    waiting."""

    outcome = "timeout"


class ProposalInvalid(NotApproved):
    """Outcome invalid: gated's strict decoding refused the proposal; the
    reason names the field."""

    outcome = "invalid"


_OUTCOME_ERRORS: dict[str, type[NotApproved]] = {
    c.outcome: c for c in (ReviewRejected, ReviewBlocked, ReviewError, ReviewTimeout, ProposalInvalid)
}


def not_approved(verdict: Verdict) -> NotApproved:
    """The typed error of a verdict that is not an approval."""
    if not verdict.is_final:
        return AwaitingOperator(verdict)
    return _OUTCOME_ERRORS.get(verdict.outcome, NotApproved)(verdict)


class ServiceError(GatedError):
    """A refusal of the gated.review service: a micro error reply with a
    status code and a description. Instances for 400/413, 403, 409, 503 and
    504 are also instances of BadProposal, TenantMismatch, IDReused,
    ServiceUnavailable and NoVerdict."""

    kind = "service_error"

    def __init__(self, code: int, description: str) -> None:
        self.code = code
        self.description = description
        super().__init__(f"gated.review refused the request ({code}): {description}")


class ServiceUnavailable(GatedError):
    """The gated.review service did not take the request: nothing serves
    it, or it is overloaded or stopping. Retry with backoff, or propose on
    the durable path instead."""

    kind = "service_unavailable"


class TenantMismatch(GatedError):
    """A proposal sent to gated.review.<tenant> names another tenant."""

    kind = "tenant_mismatch"


class _ServiceBadProposal(ServiceError, BadProposal):
    kind = "bad_proposal"


class _ServiceTenantMismatch(ServiceError, TenantMismatch):
    kind = "tenant_mismatch"


class _ServiceIDReused(ServiceError, IDReused):
    kind = "id_reused"


class _ServiceUnavailable(ServiceError, ServiceUnavailable):
    kind = "service_unavailable"


class _ServiceNoVerdict(ServiceError, NoVerdict):
    kind = "no_verdict"


_SERVICE_ERRORS: dict[int, type[ServiceError]] = {
    400: _ServiceBadProposal,
    413: _ServiceBadProposal,
    403: _ServiceTenantMismatch,
    409: _ServiceIDReused,
    503: _ServiceUnavailable,
    504: _ServiceNoVerdict,
}


def service_error(code: int, description: str) -> ServiceError:
    """The typed error of a review-service status code."""
    return _SERVICE_ERRORS.get(code, ServiceError)(code, description)


class PublishError(GatedError):
    """JetStream did not take the proposal (it was not decided) or the
    outcome report: no stream captures its subject (is gated running?) or
    the stream refused it."""

    kind = "publish_error"


class GrantRefused(GatedError, ValueError):
    """A grant that may not be acted on: forged, altered, expired, signed
    by a key that does not allow it, or for another tenant, proposal,
    action or target than the one about to run. ``member`` names the
    header or payload member, or the check, that fails (``alg``, ``kid``,
    ``signature``, ``exp``, ``max_ttl``, ``retired``, ``target_sha256``,
    ``format``, ...); the message names it too. The tool must not run."""

    kind = "grant_refused"

    def __init__(self, member: str, problem: str) -> None:
        self.member = member
        self.problem = problem
        if member == "format":
            super().__init__(f"grant refused: bad format: {problem}")
        else:
            super().__init__(f"grant refused: {member} {problem}")


class GrantUseRefused(GrantRefused):
    """gated refused to let a grant be used (``ok: false`` on
    gated.grants.<tenant>.use): already used, expired, unknown, forged.
    ``reason`` is gated's own text. The tool must not run."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        GatedError.__init__(self, f"grant refused by gated: {reason}")
        self.member = "use"
        self.problem = reason


class KeySetError(GatedError, ValueError):
    """A grant key set (gated.grants.keys, or a file `gated grants keys`
    printed) that is not well formed: ``member`` names what is wrong."""

    kind = "bad_keyset"

    def __init__(self, member: str, problem: str) -> None:
        self.member = member
        self.problem = problem
        super().__init__(f"grant key set: {member} {problem}")
