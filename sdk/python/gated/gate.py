"""Put gated in front of an agent's tools.

Tools of class read run at once; write and destructive tools run only after
gated approves a proposal describing the call. It mirrors the Go ToolGate
(bus/fleet/toolgate.go)::

    gate = ToolGate(client, Identity(tenant="acme", agent="ops-agent"))

    @gate.guard(ToolSpec("host_restart_service", "write",
                         lambda host, service: Change(target={"host": host, "service": service},
                                                      reason="wedged", blast_radius="single_device")))
    async def restart(host: str, service: str) -> str: ...

The class of a tool is the runtime's claim, made in code when the tool is
registered: gated never sees a read, so never let a model choose it.

An approval is acted on only through its grant: the gate verifies the
verdict's grant against the proposal it just sent (tenant, id, the exact
bytes' digest, action, target), has gated use it (once: a second use
fails), reports ``started``, runs the tool, and reports ``succeeded`` or
``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from gated.errors import (
    AwaitingOperator,
    GatedError,
    GrantRefused,
    GrantUseRefused,
    InvalidConfig,
    InvalidToolSpec,
    NotApproved,
)
from gated.grant import Claims, Expected, gid_of
from gated.proposal import Flags, Operator, Proposal
from gated.verdict import Verdict
from gated.wire import encode_proposal, valid_action, valid_tenant

log = logging.getLogger("gated")

CLASSES = ("read", "write", "destructive")
DEFAULT_REVIEW_TIMEOUT = 90.0
"""Seconds a guarded call waits for its verdict: longer than gated's
default review deadline (60 s), so a slow review ends in a timeout verdict
rather than in NoVerdict."""

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Proposer(Protocol):
    """What a ToolGate needs to reach gated; :class:`gated.Client` is one.
    ``propose`` must return only an approval and raise otherwise."""

    async def propose(self, proposal: Proposal | Mapping[str, Any], *, timeout: float | None = None) -> Verdict:
        """Publish and wait; return only an approval."""
        ...


class DecisionWaiter(Protocol):
    """What a ToolGate that waits for operators needs besides propose;
    :class:`gated.Client` is one."""

    async def await_decision(self, held: Verdict, *, timeout: float | None = None) -> Verdict:
        """Wait for the verdict that replaces a held one; return only an
        approval."""
        ...


class GrantUser(Protocol):
    """What a ToolGate needs to act on a grant; :class:`gated.Client` is
    one."""

    async def verify_grant(self, grant: str, expect: Expected, *, now: float | None = None) -> Claims:
        """Verify a grant for what is about to run."""
        ...

    async def use_grant(self, tenant: str, grant: str, *, by: str, timeout: float | None = None) -> str:
        """Use a grant once; return its gid."""
        ...

    async def report_outcome(
        self, tenant: str, proposal_id: str, gid: str, status: str, error: str = "", *, timeout: float | None = None
    ) -> None:
        """Report started, succeeded or failed."""
        ...


@dataclass(frozen=True)
class Identity:
    """Who proposes through a ToolGate."""

    tenant: str
    """The tenant token, [a-z0-9_-]{1,64}."""
    agent: str
    """The proposing agent (requested_by.agent), used against self-review."""
    session: str = ""
    operator: Operator | None = None
    """The human on whose behalf the agent acts."""
    reviewer: str = ""
    """A persona to ask for unless a Change names its own."""

    def validate(self) -> None:
        """Raise InvalidConfig unless the identity is usable."""
        if not valid_tenant(self.tenant):
            raise InvalidConfig(f"identity tenant {self.tenant!r} must match [a-z0-9_-]{{1,64}}")
        if not isinstance(self.agent, str) or not self.agent.strip():
            raise InvalidConfig("identity needs an agent name")
        if self.operator is not None and not self.operator.id.strip():
            raise InvalidConfig("identity operator needs an id")
        if self.reviewer and not valid_tenant(self.reviewer):
            raise InvalidConfig(f"identity reviewer {self.reviewer!r} must be a persona name matching [a-z0-9_-]{{1,64}}")


@dataclass
class Change:
    """One call of a mutating tool: what gated reviews."""

    target: dict[str, Any] | None = None
    reason: str = ""
    blast_radius: str = ""
    """single_device, cluster or tenant_wide. Required for write tools."""
    id: str = ""
    """The proposal id, an idempotency key. Default: a new id per call."""
    incident_id: str = ""
    context_summary: str = ""
    flags: Flags = field(default_factory=Flags)
    reviewer: str = ""


@dataclass(frozen=True)
class ToolSpec:
    """A tool's action token, its class, and how a call's arguments become
    the Change gated reviews (``describe`` gets the tool's arguments)."""

    action: str
    class_: str
    describe: Callable[..., Change] | None = None

    def validate(self) -> None:
        """Raise InvalidToolSpec unless the spec is usable."""
        if not valid_action(self.action):
            raise InvalidToolSpec(f"action {self.action!r} must match [A-Za-z0-9_-]{{1,128}}")
        if self.class_ not in CLASSES:
            raise InvalidToolSpec(f"tool {self.action} has class {self.class_!r}; want read, write or destructive")
        if self.class_ != "read" and self.describe is None:
            raise InvalidToolSpec(f"{self.class_} tool {self.action} needs describe to say what a call changes")


def new_proposal_id() -> str:
    """A fresh id: a millisecond timestamp in base 36 (ids sort by time)
    and 64 random bits."""
    ms = time.time_ns() // 1_000_000
    digits = ""
    while ms:
        ms, r = divmod(ms, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    return (digits or "0") + "-" + secrets.token_hex(8)


class ToolGate:
    """gated in front of an agent's tools. Safe for concurrent use."""

    def __init__(
        self,
        proposer: Any,
        identity: Identity,
        *,
        review_timeout: float = DEFAULT_REVIEW_TIMEOUT,
        new_id: Callable[[], str] = new_proposal_id,
        observe: Callable[[dict[str, Any], Verdict], None] | None = None,
        await_operator: bool = False,
        operator_timeout: float | None = None,
        require_grant: bool = True,
        by: str = "",
    ) -> None:
        """``proposer`` is a :class:`gated.Client`, a
        :class:`gated.SyncClient`, or any :class:`Proposer`.

        A call whose proposal the policy holds for an operator raises
        :class:`~gated.errors.AwaitingOperator` (not approved) unless
        ``await_operator`` is True: then the call waits, with the
        proposer's ``await_decision``, for the operator's decision or the
        hold's deadline, and runs only on an approval. ``operator_timeout``
        bounds that wait in seconds (default: the hold's deadline and a
        minute more).

        An approval lets a tool run only once its grant is verified and
        used, and ``started`` is reported (``by`` names the executor to
        gated; default the identity's agent and session). An approval
        without a grant is refused unless ``require_grant`` is False, for a
        gated that does not sign approvals yet: then such an approval is
        believed as the verdict says (a grant that is there is still
        verified and used)."""
        from gated.sync import SyncClient

        if proposer is None:
            raise InvalidConfig("a ToolGate needs a proposer such as gated.Client")
        identity.validate()
        if not review_timeout > 0:
            raise InvalidConfig(f"review timeout {review_timeout} must be positive")
        self._sync: SyncClient | None = proposer if isinstance(proposer, SyncClient) else None
        self._proposer: Proposer = proposer.client if self._sync else proposer
        self.identity = identity
        self.review_timeout = review_timeout
        self._new_id = new_id
        self._observe = observe
        self._waiter: DecisionWaiter | None = None
        if await_operator:
            if not callable(getattr(self._proposer, "await_decision", None)):
                raise InvalidConfig("await_operator needs a proposer with await_decision, such as gated.Client")
            self._waiter = cast(DecisionWaiter, self._proposer)
        if operator_timeout is not None and not operator_timeout > 0:
            raise InvalidConfig(f"operator timeout {operator_timeout} must be positive")
        self.operator_timeout = operator_timeout
        self.require_grant = require_grant
        self.by = by or (identity.agent + (" " + identity.session if identity.session else ""))

    def proposal(self, action: str, class_: str, change: Change) -> dict[str, Any]:
        """The proposal of one call."""
        op = self.identity.operator
        return Proposal(
            id=change.id or self._new_id(),
            tenant=self.identity.tenant,
            kind="action",
            action=action,
            class_=class_,
            target=change.target,
            reason=change.reason,
            blast_radius=change.blast_radius,
            operator=Operator(op.id, list(op.roles)) if op else None,
            requested_by=None,
            incident_id=change.incident_id,
            context_summary=change.context_summary,
            flags=change.flags,
            reviewer=change.reviewer or self.identity.reviewer,
        ).to_dict() | {"requested_by": {"agent": self.identity.agent, "session": self.identity.session}}

    async def authorize(
        self, action: str, class_: str, change: Change | None = None, *, timeout: float | None = None
    ) -> Verdict | None:
        """Ask gated whether a call of action, of class_, may make change.
        Returns None at once for class read (nothing is proposed), the
        approval for write and destructive once its grant is verified and
        used and ``started`` is reported: run the call then, and report its
        end with :meth:`report`. Raises otherwise: the NotApproved subclass
        of the verdict's outcome (AwaitingOperator for a held verdict,
        unless the gate waits for operators), GrantRefused (a grant that is
        missing, does not verify for this proposal, or that gated refuses
        to let be used), NoVerdict, InvalidToolSpec, PublishError (started
        could not be reported), or a transport error."""
        if class_ == "read":
            return None
        if class_ not in CLASSES:
            raise InvalidToolSpec(f"tool {action} has class {class_!r}; want read, write or destructive")
        if change is None:
            raise InvalidToolSpec(f"{class_} tool {action} needs a Change to say what a call changes")
        p = self.proposal(action, class_, change)
        try:
            try:
                v = await self._proposer.propose(p, timeout=timeout or self.review_timeout)
            except AwaitingOperator as e:
                if self._waiter is None:
                    raise
                # Held: a person decides. Only the final verdict counts.
                self._notify(p, e.verdict)
                v = await self._waiter.await_decision(e.verdict, timeout=self.operator_timeout)
        except NotApproved as e:
            self._notify(p, e.verdict)
            raise
        self._notify(p, v)
        # Trust nothing but an approval of exactly this proposal, whatever
        # the proposer says.
        if not isinstance(v, Verdict):
            raise GatedError(f"the proposer returned a {type(v).__name__}, not a verdict")
        v.check()
        if v.tenant != p["tenant"] or v.proposal_id != p["id"] or v.action != p["action"]:
            raise NotApproved(
                v,
                f"the approval names {v.tenant}.{v.proposal_id} ({v.action}), "
                f"not proposal {p['tenant']}.{p['id']} ({p['action']})",
            )
        await self._take_grant(p, v)
        return v

    def _grants(self) -> GrantUser:
        for name in ("verify_grant", "use_grant", "report_outcome"):
            if not callable(getattr(self._proposer, name, None)):
                raise GrantRefused(
                    "grant", f"cannot be checked: the proposer has no {name} (build the ToolGate on gated.Client)"
                )
        return cast(GrantUser, self._proposer)

    async def _take_grant(self, p: dict[str, Any], v: Verdict) -> None:
        """Verify v's grant against proposal p's exact bytes, use it, and
        report started; raise unless all three are done."""
        if not v.grant:
            if self.require_grant:
                missing = GrantRefused(
                    "grant",
                    f"is missing from the approval of {v.tenant}.{v.proposal_id}: gated signs every approval, "
                    "so the tool does not run (a gated without grants needs ToolGate(..., require_grant=False))",
                )
                await self._report_refusal(p, missing)
                raise missing
            return
        grants = self._grants()
        _, data = encode_proposal(p)  # the bytes the proposer published
        try:
            claims = await grants.verify_grant(v.grant, Expected.of_proposal(data))
        except GrantRefused as e:
            if not isinstance(e, GrantUseRefused):
                await self._report_refusal(p, e)
            raise
        gid = await grants.use_grant(claims.tenant, v.grant, by=self.by)
        if gid != claims.gid:
            raise GrantRefused("gid", f"gated used grant {gid}, not the approval's ({claims.gid})")
        await grants.report_outcome(claims.tenant, claims.proposal_id, claims.gid, "started")

    async def _report_refusal(self, p: dict[str, Any], refusal: GrantRefused) -> None:
        """Tell gated this gate refused p's grant (status refused), which
        gated audits as grant.refused by the executor. A report that fails
        is logged: the refusal stands, the tool does not run."""
        try:
            await self._grants().report_outcome(p["tenant"], p["id"], "", "refused", str(refusal))
        except GatedError as e:
            log.warning("reporting the refused grant of %s.%s: %s", p["tenant"], p["id"], e)

    async def report(self, verdict: Verdict | None, error: BaseException | str | None = None) -> None:
        """Report the end of a call :meth:`authorize` allowed: ``succeeded``
        when error is None, else ``failed`` with its text. Nothing for a
        read call (verdict None) or an approval without a grant. Raises
        PublishError."""
        if verdict is None or not verdict.grant:
            return
        status, text = "succeeded", ""
        if isinstance(error, str):
            status, text = "failed", error
        elif error is not None:
            status, text = "failed", type(error).__name__
            if str(error):
                text += f": {error}"
        await self._grants().report_outcome(verdict.tenant, verdict.proposal_id, gid_of(verdict.grant), status, text)

    async def _finish(self, verdict: Verdict | None, error: BaseException | None) -> None:
        """report, for a call that ran: a report that fails is logged, not
        raised, so that it hides neither the tool's result nor its error
        (gated records the grant as used either way)."""
        try:
            await self.report(verdict, error)
        except GatedError as e:
            log.warning("reporting the outcome of %s.%s: %s", verdict and verdict.tenant, verdict and verdict.proposal_id, e)

    def report_sync(self, verdict: Verdict | None, error: BaseException | str | None = None) -> None:
        """:meth:`report`, blocking."""
        if verdict is None or not verdict.grant:
            return
        self._block(self.report(verdict, error))

    def _finish_sync(self, verdict: Verdict | None, error: BaseException | None) -> None:
        if verdict is None or not verdict.grant:
            return
        self._block(self._finish(verdict, error))

    def _notify(self, p: dict[str, Any], v: Verdict) -> None:
        if self._observe is not None:
            self._observe(p, v)

    def authorize_sync(
        self, action: str, class_: str, change: Change | None = None, *, timeout: float | None = None
    ) -> Verdict | None:
        """authorize, blocking: for synchronous tools."""
        if class_ == "read":
            return None
        return self._block(self.authorize(action, class_, change, timeout=timeout))

    def _block(self, c: Coroutine[Any, Any, T]) -> T:
        if self._sync is not None:
            return self._sync.run(c)
        loop = getattr(self._proposer, "loop", None)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            c.close()
            raise GatedError(
                "a synchronous guarded tool was called on a running event loop: it would block it; "
                "make the tool async, or build the ToolGate on a gated.SyncClient"
            )
        if isinstance(loop, asyncio.AbstractEventLoop):
            if loop.is_running():
                return asyncio.run_coroutine_threadsafe(c, loop).result()
            c.close()
            raise GatedError("the client's event loop is not running: a synchronous tool cannot wait on it")
        return asyncio.run(c)

    @contextlib.asynccontextmanager
    async def authorized(
        self, action: str, class_: str, change: Change | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[Verdict | None]:
        """``async with gate.authorized(...) as verdict:`` runs its body only
        when the call may run (see authorize); otherwise the typed error is
        raised before the body. The body's end is reported: ``succeeded``,
        or ``failed`` with the exception it raises."""
        v = await self.authorize(action, class_, change, timeout=timeout)
        try:
            yield v
        except BaseException as e:
            await self._finish(v, e)
            raise
        await self._finish(v, None)

    @contextlib.contextmanager
    def authorized_sync(
        self, action: str, class_: str, change: Change | None = None, *, timeout: float | None = None
    ) -> Iterator[Verdict | None]:
        """The blocking form of :meth:`authorized`."""
        v = self.authorize_sync(action, class_, change, timeout=timeout)
        try:
            yield v
        except BaseException as e:
            self._finish_sync(v, e)
            raise
        self._finish_sync(v, None)

    def guard(self, spec: ToolSpec) -> Callable[[F], F]:
        """A decorator that runs the tool only when gated allows it: a read
        tool at once, a write or destructive tool once, after an approval
        of the proposal built from ``spec.describe(*args, **kwargs)``.
        Works on async and sync functions; the wrapped function keeps its
        kind. An unusable spec raises InvalidToolSpec at once. A call that
        ran is reported: ``succeeded``, or ``failed`` with the text of what
        it raised (which is raised on)."""
        spec.validate()

        def wrap(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    if spec.class_ == "read":
                        return await fn(*args, **kwargs)
                    assert spec.describe is not None
                    v = await self.authorize(spec.action, spec.class_, spec.describe(*args, **kwargs))
                    try:
                        result = await fn(*args, **kwargs)
                    except BaseException as e:
                        await self._finish(v, e)
                        raise
                    await self._finish(v, None)
                    return result

                return cast(F, async_tool)

            @functools.wraps(fn)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                if spec.class_ == "read":
                    return fn(*args, **kwargs)
                assert spec.describe is not None
                v = self.authorize_sync(spec.action, spec.class_, spec.describe(*args, **kwargs))
                try:
                    result = fn(*args, **kwargs)
                except BaseException as e:
                    self._finish_sync(v, e)
                    raise
                self._finish_sync(v, None)
                return result

            return cast(F, sync_tool)

        return wrap


