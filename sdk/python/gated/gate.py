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

What runs is what was reviewed: a write or destructive call's arguments are
encoded once as JSON and proposed as the proposal's ``arguments``, and
``describe`` and the tool get the values decoded from exactly those bytes,
never the caller's objects (see :meth:`ToolGate.guard`).

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
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from gated.errors import (
    AwaitingOperator,
    BadProposal,
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
from gated.wire import encode_arguments, encode_proposal, valid_action, valid_tenant

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
    labels: list[str] | None = None
    """Flow labels the proposal adds to its action's (docs/POLICIES.md#flows):
    what the call reads (private, secret, pii), untrusted for untrusted
    output, egress for a call that communicates outside."""
    arguments: dict[str, Any] | None = None
    """The call's arguments as the tool receives them, for the policy and
    the reviewer to read beside the target; the approval's grant binds
    them. :meth:`ToolGate.guard` sets them from the call (a ``describe``
    that sets them is refused). A runtime that calls
    :meth:`ToolGate.authorize` itself and sets them must run the call with
    exactly these, as JSON decodes them. They must be JSON values, with no
    two member names, at any depth, equal under case folding."""


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
        """The proposal of one call. Raises InvalidToolSpec for arguments
        that cannot be proposed."""
        return self._proposal(action, class_, change, _encoded_arguments(action, change.arguments))

    def _proposal(self, action: str, class_: str, change: Change, arguments: str | None) -> dict[str, Any]:
        """The proposal of one call whose arguments are encoded as
        ``arguments`` (None: the call has none)."""
        op = self.identity.operator
        return Proposal(
            id=change.id or self._new_id(),
            tenant=self.identity.tenant,
            kind="action",
            action=action,
            class_=class_,
            target=change.target,
            arguments=None if arguments is None else _as_proposed(arguments),
            reason=change.reason,
            blast_radius=change.blast_radius,
            operator=Operator(op.id, list(op.roles)) if op else None,
            requested_by=None,
            incident_id=change.incident_id,
            context_summary=change.context_summary,
            flags=change.flags,
            reviewer=change.reviewer or self.identity.reviewer,
            labels=change.labels,
        ).to_dict() | {"requested_by": {"agent": self.identity.agent, "session": self.identity.session}}

    async def authorize(
        self, action: str, class_: str, change: Change | None = None, *, timeout: float | None = None
    ) -> Verdict | None:
        """Ask gated whether a call of action, of class_, may make change.
        Returns None at once for class read (nothing is proposed) unless
        the change has labels (a labelled read is proposed, so that its
        labels join the agent's flow state when its grant is used), the
        approval for write, destructive and a labelled read once its grant is verified and
        used and ``started`` is reported: run the call then, and report its
        end with :meth:`report`. Raises otherwise: the NotApproved subclass
        of the verdict's outcome (AwaitingOperator for a held verdict,
        unless the gate waits for operators), GrantRefused (a grant that is
        missing, does not verify for this proposal, or that gated refuses
        to let be used), NoVerdict, InvalidToolSpec, PublishError (started
        could not be reported), or a transport error.

        ``change.arguments``, when set, are proposed as the call's
        arguments: the runtime must then run the call with exactly those
        (as JSON decodes them), not with its own objects, which may have
        changed during the review. Arguments that are not JSON values, or
        that name two members equal under case folding, raise
        InvalidToolSpec before anything is proposed."""
        if class_ == "read" and not (change is not None and change.labels):
            return None
        if class_ not in CLASSES:
            raise InvalidToolSpec(f"tool {action} has class {class_!r}; want read, write or destructive")
        if change is None:
            raise InvalidToolSpec(f"{class_} tool {action} needs a Change to say what a call changes")
        return await self._authorize(action, class_, change, _encoded_arguments(action, change.arguments), timeout)

    async def _authorize(
        self, action: str, class_: str, change: Change, arguments: str | None, timeout: float | None
    ) -> Verdict:
        """authorize, for a call whose arguments are encoded as
        ``arguments``: the proposal carries exactly those bytes."""
        p = self._proposal(action, class_, change, arguments)
        # The bytes the proposer publishes, encoded once: the grant is
        # verified against these whatever the caller's objects become.
        _, data = encode_proposal(p)
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
        await self._take_grant(p, data, v)
        return v

    def _grants(self) -> GrantUser:
        for name in ("verify_grant", "use_grant", "report_outcome"):
            if not callable(getattr(self._proposer, name, None)):
                raise GrantRefused(
                    "grant", f"cannot be checked: the proposer has no {name} (build the ToolGate on gated.Client)"
                )
        return cast(GrantUser, self._proposer)

    async def _take_grant(self, p: dict[str, Any], data: bytes, v: Verdict) -> None:
        """Verify v's grant against proposal p's exact bytes, data, use it,
        and report started; raise unless all three are done."""
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
        tool at once, with the caller's arguments; a write or destructive
        tool once, after an approval of the proposal built from
        ``spec.describe``. Works on async and sync functions; the wrapped
        function keeps its kind. An unusable spec, or a function whose
        signature cannot be read, raises InvalidToolSpec at once. A call
        that ran is reported: ``succeeded``, or ``failed`` with the text of
        what it raised (which is raised on).

        What runs is what was reviewed. A write or destructive call's
        arguments are bound to the function's signature (positional-only,
        ``*args`` and ``**kwargs`` parameters too, defaults included) and
        encoded once as a JSON object, each parameter by its name (``*args``
        as a list, ``**kwargs`` as an object): the proposal carries those
        bytes as its ``arguments``, and ``describe`` and the tool are called
        the way the tool was, with values decoded from exactly those bytes,
        never with the caller's objects. A dict or list the caller, or
        another task or thread, changes while gated reviews changes nothing
        that runs. So every argument must be a JSON value: None, a bool, an
        int within +-2**53, a finite float, a str, a list or tuple, or a
        dict with str keys, of such values; the tool gets them as JSON
        decodes them (a tuple as a list, 2.0 as 2). An argument that is not,
        or arguments naming two members equal under case folding (``host``
        and ``HOST`` in one dict), raise InvalidToolSpec, naming the
        argument, before anything is proposed. ``describe`` must not set
        ``Change.arguments``: the gate sets them from the call."""
        spec.validate()

        def wrap(fn: F) -> F:
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError) as e:
                raise InvalidToolSpec(f"tool {spec.action}: its signature cannot be read to bind a call's arguments: {e}") from None

            def review(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Change, str, Callable[[], _Call]]:
                """The call's Change and its arguments encoded once, and
                how to decode them for the tool."""
                assert spec.describe is not None
                bound = sig.bind(*args, **kwargs)  # a TypeError, as calling fn would raise
                bound.apply_defaults()
                data = _encoded_arguments(spec.action, bound.arguments)
                assert data is not None
                described_args, described_kwargs = _call_of(sig, data)
                change = spec.describe(*described_args, **described_kwargs)
                if not isinstance(change, Change):
                    raise InvalidToolSpec(f"describe of tool {spec.action} returned a {type(change).__name__}, not a Change")
                if change.arguments is not None:
                    raise InvalidToolSpec(
                        f"describe of tool {spec.action} set Change.arguments: a guarded call's arguments are the call's, "
                        "and the gate sets them"
                    )
                return change, data, lambda: _call_of(sig, data)

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    if spec.class_ == "read":
                        return await fn(*args, **kwargs)
                    change, data, reviewed = review(args, kwargs)
                    v = await self._authorize(spec.action, spec.class_, change, data, None)
                    call_args, call_kwargs = reviewed()
                    try:
                        result = await fn(*call_args, **call_kwargs)
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
                change, data, reviewed = review(args, kwargs)
                v = self._block(self._authorize(spec.action, spec.class_, change, data, None))
                call_args, call_kwargs = reviewed()
                try:
                    result = fn(*call_args, **call_kwargs)
                except BaseException as e:
                    self._finish_sync(v, e)
                    raise
                self._finish_sync(v, None)
                return result

            return cast(F, sync_tool)

        return wrap


# ---------------------------------------------------------------------------
# A call's arguments: encoded once, proposed, and decoded for what runs.

_Call = tuple[list[Any], dict[str, Any]]

_EXACT_INT = 2**53
"""Integers beyond it are not exact as JSON numbers (float64, as gated and
the proposal encoding read them): the tool would get another number."""


def _json_problem(v: Any, path: str, depth: int = 0) -> str:
    """Why v is not a JSON value the tool can get back exactly, or ""."""
    if depth > 200:
        return f"{path} is nested more than 200 levels deep"
    if v is None or isinstance(v, (bool, str)):
        return ""
    if isinstance(v, int):
        return "" if -_EXACT_INT <= v <= _EXACT_INT else f"{path}: the integer {v} is beyond 2**53, not exact as a JSON number"
    if isinstance(v, float):
        return "" if math.isfinite(v) else f"{path}: {v} is not a JSON number"
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                return f"{path}: the key {k!r} is not a string"
            if problem := _json_problem(x, f"{path}.{k}", depth + 1):
                return problem
        return ""
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            if problem := _json_problem(x, f"{path}[{i}]", depth + 1):
                return problem
        return ""
    return f"{path} is a {type(v).__name__}, not a JSON value"


def _encoded_arguments(action: str, arguments: Mapping[str, Any] | None) -> str | None:
    """arguments encoded as a proposal carries them, or None for none.
    Raises InvalidToolSpec for what cannot be proposed and run exactly as
    proposed: a value that is not JSON (or an integer JSON does not hold
    exactly), or two member names equal under case folding."""
    if arguments is None:
        return None
    if not isinstance(arguments, Mapping):
        raise InvalidToolSpec(f"the arguments of {action} must be a dict, not a {type(arguments).__name__}")
    for name, value in arguments.items():
        if not isinstance(name, str):
            raise InvalidToolSpec(f"the arguments of tool {action} name {name!r}, not a string")
        if problem := _json_problem(value, name):
            raise InvalidToolSpec(
                f"argument {name!r} of tool {action} is not JSON a reviewer can read ({problem}): "
                "a call runs with the arguments gated reviewed, so they must be JSON values"
            )
    try:
        return encode_arguments(dict(arguments))
    except BadProposal as e:
        raise InvalidToolSpec(f"the arguments of tool {action} cannot be proposed: {e}") from None


def _as_proposed(data: str) -> dict[str, Any]:
    """The arguments encoded as data, decoded for the proposal: every
    number a float, as gated reads it, so that encoding the proposal gives
    data again, byte for byte (which is checked)."""
    v: dict[str, Any] = json.loads(data, parse_int=float)
    if encode_arguments(v) != data:
        raise GatedError("the arguments do not encode again as they were proposed")
    return v


def _json_int(digits: str) -> int | float:
    """A JSON integer as the tool gets it: an int while exact as a JSON
    number, else the float64 gated reads (a float argument of 5e16 is
    written 50000000000000000 and must come back as that float)."""
    n = int(digits)
    return n if -_EXACT_INT <= n <= _EXACT_INT else float(n)


def _call_of(sig: inspect.Signature, data: str) -> _Call:
    """Positional and keyword arguments for a call of a function of
    signature sig, decoded afresh from data, a JSON object of its
    arguments by parameter name."""
    values: dict[str, Any] = json.loads(data, parse_int=_json_int)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, param in sig.parameters.items():
        if name not in values:
            continue
        v = values[name]
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            args.append(v)
        elif param.kind == param.VAR_POSITIONAL:
            args.extend(v)
        elif param.kind == param.KEYWORD_ONLY:
            kwargs[name] = v
        else:
            kwargs.update(v)
    return args, kwargs
