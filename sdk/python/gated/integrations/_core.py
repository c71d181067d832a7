"""What every framework integration shares: a tool call mapped to a
proposal by the catalog, proposed through :class:`gated.ToolGate` (which
waits, verifies and uses the approval's grant, and reports ``started``),
run with exactly the reviewed arguments, its end reported; and the typed
refusals a framework hands its agent when the call does not run."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import nats.errors

from gated.errors import (
    AwaitingOperator,
    ConnectionLost,
    GatedError,
    GrantRefused,
    InvalidConfig,
    InvalidToolSpec,
    NoVerdict,
    NotApproved,
    PublishError,
    ReviewTimeout,
    ServiceUnavailable,
)
from gated.gate import DEFAULT_REVIEW_TIMEOUT, Change, Identity, ToolGate, _encoded_arguments, _json_int, new_proposal_id
from gated.integrations._catalog import CLASSES, DEFAULT_REASON_ARGUMENT, Catalog, action_name, resolve_pointer
from gated.verdict import Verdict

log = logging.getLogger("gated.integrations")

DEFAULT_BLAST_RADIUS: Final = "single_device"


class ToolRefused(GatedError):
    """A tool call gated did not let run: the tool was not called. The
    message is written for the agent's model to read and reason about;
    ``verdict`` is gated's verdict when there is one."""

    kind = "tool_refused"

    def __init__(self, tool: str, why: str, verdict: Verdict | None = None) -> None:
        self.tool = tool
        self.why = why
        self.verdict = verdict
        named = f" (verdict {verdict.tenant}.{verdict.proposal_id})" if verdict is not None else ""
        super().__init__(f"gated did not approve {tool}: {why}{named}. The call was not made.")


class ToolDenied(ToolRefused):
    """The policy, a reviewer or an operator refused the call, or its
    approval did not hold up (a grant that does not verify or was used)."""

    kind = "tool_denied"


class ToolHeld(ToolRefused):
    """The policy holds the call for an operator: ``verdict.awaiting_operator``
    says who may decide and until when. Not final: the call may run once an
    operator approves (each integration says how it resumes)."""

    kind = "tool_held"


class ToolTimedOut(ToolRefused):
    """No decision in time: the review passed its deadline inside gated, or
    the wait for the verdict (or the operator) ended first."""

    kind = "tool_timed_out"


class GatedUnreachable(ToolRefused):
    """gated could not be asked: no connection, or nothing serving it.
    Fails closed: the call does not run."""

    kind = "gated_unreachable"


@dataclass(frozen=True)
class ToolMapping:
    """How one tool's calls become proposals (docs/INTEGRATIONS.md)."""

    tool: str
    action: str
    class_: str
    blast_radius: str = DEFAULT_BLAST_RADIUS
    target: dict[str, str] = field(default_factory=dict)
    target_fixed: dict[str, Any] = field(default_factory=dict)
    reason_argument: str = DEFAULT_REASON_ARGUMENT
    reviewer: str = ""
    labels: tuple[str, ...] = ()
    """The catalog's flow labels, on every proposal of the tool; a
    labelled read is proposed (its labels join the agent's flow state when
    its grant is used), an unlabelled one is not."""


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool as the framework hands it over: the tool's name,
    its arguments (a JSON object), and the framework's id of the call when
    it has one (the proposal id is derived from it, so a call resumed after
    an interruption is the same proposal)."""

    tool: str
    arguments: Mapping[str, Any]
    call_id: str = ""


class Gate:
    """gated in front of a framework's tools: the shared core of every
    integration. Safe for concurrent use.

    ``client`` is a connected :class:`gated.Client`. ``catalog`` (a
    :class:`Catalog` or the path of a catalog file) maps tools to actions,
    classes and targets; a tool it does not name is proposed as its name
    (made an action token), of class ``default_class`` (``write`` unless
    said otherwise: a framework's tool says nothing of its side effects),
    with its whole arguments as its target."""

    def __init__(
        self,
        client: Any,
        identity: Identity,
        *,
        catalog: Catalog | str | Path | None = None,
        default_class: str = "write",
        review_timeout: float = DEFAULT_REVIEW_TIMEOUT,
        operator_timeout: float | None = None,
        framework: str = "python",
    ) -> None:
        if default_class not in CLASSES:
            raise InvalidConfig(f"default class {default_class!r}: want read, write or destructive")
        self.catalog = catalog if isinstance(catalog, Catalog) else Catalog.load(catalog) if catalog else Catalog()
        self.default_class = default_class
        self.identity = identity
        self.framework = framework
        self.tool_gate = ToolGate(client, identity, review_timeout=review_timeout)
        self._waiting = ToolGate(
            client, identity, review_timeout=review_timeout, await_operator=True, operator_timeout=operator_timeout
        )

    def mapping(self, tool: str) -> ToolMapping:
        """The mapping of a tool's calls: the catalog's rule over the
        defaults."""
        c = self.catalog
        r = c.tools.get(tool)
        return ToolMapping(
            tool=tool,
            action=(r and r.action) or action_name(tool),
            class_=(r and r.class_) or self.default_class,
            blast_radius=(r and r.blast_radius) or c.blast_radius or DEFAULT_BLAST_RADIUS,
            target=dict(r.target) if r else {},
            target_fixed=dict(r.target_fixed) if r else {},
            reason_argument=(r and r.reason_argument) or c.reason_argument or DEFAULT_REASON_ARGUMENT,
            reviewer=r.reviewer if r else "",
            labels=r.labels if r else (),
        )

    def proposal_id(self, call: ToolCall) -> str:
        """The proposal id of a call: derived from the framework's call id
        and who calls (the same call resumed is the same proposal, and
        proposing it again is idempotent), else a new one."""
        if not call.call_id:
            return new_proposal_id()
        who = "\x00".join((self.identity.tenant, self.identity.agent, self.identity.session, call.tool, call.call_id))
        return "tc-" + hashlib.sha256(who.encode("utf-8")).hexdigest()[:40]

    def change(self, call: ToolCall) -> tuple[ToolMapping, Change, str, dict[str, Any]]:
        """The mapping, the Change gated reviews, the arguments encoded
        once as proposed, and those arguments as the tool gets them
        (decoded from exactly those bytes). Raises ToolDenied for a call
        that cannot be proposed (a reason that is not text, arguments that
        are not JSON, a target pointer that names nothing)."""
        m = self.mapping(call.tool)
        if not isinstance(call.arguments, Mapping):
            raise ToolDenied(call.tool, f"its arguments are a {type(call.arguments).__name__}, not an object")
        args = dict(call.arguments)
        reason = args.pop(m.reason_argument, "")
        if not isinstance(reason, str):
            raise ToolDenied(call.tool, f"the reason argument {m.reason_argument} is not text")
        try:
            encoded = _encoded_arguments(m.action, args)
        except InvalidToolSpec as e:
            raise ToolDenied(call.tool, str(e)) from None
        assert encoded is not None
        reviewed: dict[str, Any] = json.loads(encoded, parse_int=_json_int)
        if m.target:
            target: dict[str, Any] = {}
            for member, ptr in m.target.items():
                try:
                    target[member] = resolve_pointer(reviewed, ptr)
                except LookupError:
                    raise ToolDenied(call.tool, f"the catalog's target {member} points at {ptr!r}, which names no argument") from None
        else:
            target = json.loads(encoded)
        target.update(m.target_fixed)
        change = Change(
            target=target,
            reason=reason or f"{self.framework} agent {self.identity.agent} calls tool {call.tool}",
            blast_radius=m.blast_radius,
            id=self.proposal_id(call),
            reviewer=m.reviewer,
            labels=list(m.labels) or None,
            context_summary=f"tool {call.tool} of a {self.framework} agent, its class from "
            + ("the catalog" if (r := self.catalog.tools.get(call.tool)) and r.class_ else "the default"),
        )
        return m, change, encoded, reviewed

    async def authorize(self, call: ToolCall, *, wait_for_operator: bool = False) -> tuple[Verdict | None, dict[str, Any]]:
        """Propose a call and wait for gated: the approval (None for an
        unlabelled read, which is not proposed) once its grant is verified and used and
        ``started`` reported, and the arguments to run the tool with.
        Raises a ToolRefused subclass otherwise; ToolHeld for a held call
        unless ``wait_for_operator``, when the call waits for the
        operator's decision."""
        m, change, encoded, reviewed = self.change(call)
        if m.class_ == "read" and not m.labels:
            return None, reviewed
        gate = self._waiting if wait_for_operator else self.tool_gate
        try:
            v = await gate._authorize(m.action, m.class_, change, encoded, None)
        except BaseException as e:
            r = refusal(call.tool, e)
            if r is e:
                raise
            raise r from e
        return v, reviewed

    async def held(self, call: ToolCall) -> Verdict | None:
        """Propose a call, and return its verdict when the policy holds it
        for an operator; None otherwise: for an unlabelled read (not proposed), and for
        an approval, a refusal or an error, which :meth:`authorize` meets
        again (the same call proposed again is the same proposal, answered
        from gated's store). Nothing runs here, and no grant is used: for a
        framework that asks whether to pause before it invokes a tool."""
        try:
            m, change, encoded, _ = self.change(call)
        except ToolRefused:
            return None
        if m.class_ == "read" and not m.labels:
            return None
        p = self.tool_gate._proposal(m.action, m.class_, change, encoded)
        try:
            await self.tool_gate._proposer.propose(p, timeout=self.tool_gate.review_timeout)
        except AwaitingOperator as e:
            return e.verdict
        except (GatedError, nats.errors.Error, OSError) as e:
            log.debug("asking gated whether %s is held: %s", call.tool, e)
        return None

    async def run(
        self,
        call: ToolCall,
        fn: Callable[[dict[str, Any]], Any],
        *,
        wait_for_operator: bool = False,
    ) -> Any:
        """Run ``fn`` (sync or async) with the call's reviewed arguments
        once gated allows it (see :meth:`authorize`), and report its end:
        ``succeeded``, or ``failed`` with what it raised (raised on)."""
        v, arguments = await self.authorize(call, wait_for_operator=wait_for_operator)
        try:
            result = fn(arguments)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as e:
            await self.finish(v, e)
            raise
        await self.finish(v, None)
        return result

    def run_sync(
        self,
        call: ToolCall,
        fn: Callable[[dict[str, Any]], Any],
        *,
        wait_for_operator: bool = False,
    ) -> Any:
        """:meth:`run`, for a synchronous framework: gated is asked on the
        client's event loop (build the gate on a :class:`gated.SyncClient`),
        and ``fn`` runs in the calling thread."""
        block = self.tool_gate._block
        v, arguments = block(self.authorize(call, wait_for_operator=wait_for_operator))
        try:
            result = fn(arguments)
        except BaseException as e:
            block(self.finish(v, e))
            raise
        block(self.finish(v, None))
        return result

    async def finish(self, verdict: Verdict | None, error: BaseException | str | None = None) -> None:
        """Report the end of a call :meth:`authorize` allowed: ``succeeded``,
        or ``failed`` with error. A report that fails is logged, not raised:
        it hides neither the tool's result nor its error."""
        try:
            await self.tool_gate.report(verdict, error)
        except GatedError as e:
            log.warning("reporting the outcome of %s: %s", verdict and verdict.proposal_id, e)


def refusal(tool: str, e: BaseException) -> BaseException:
    """The typed refusal of what stopped a call before it ran; anything
    that is not gated's or the connection's is returned as it is."""
    if isinstance(e, ToolRefused):
        return e
    if isinstance(e, AwaitingOperator):
        hold = e.verdict.awaiting_operator
        why = "held for an operator's decision" + (f" ({hold.rule}: {hold.reason}, until {hold.deadline})" if hold else "")
        return ToolHeld(tool, why, e.verdict)
    if isinstance(e, ReviewTimeout):
        return ToolTimedOut(tool, f"the review timed out at stage {e.verdict.stage}: {e.verdict.reason}", e.verdict)
    if isinstance(e, NotApproved):
        v = e.verdict
        return ToolDenied(tool, f"{v.outcome} at stage {v.stage}: {v.reason}", v)
    # NoVerdict is a TimeoutError, so an OSError: asked before those.
    if isinstance(e, (NoVerdict, nats.errors.TimeoutError)) and not isinstance(e, ConnectionLost):
        return ToolTimedOut(tool, f"no verdict in time ({e}); failing closed")
    if isinstance(e, (ConnectionLost, ServiceUnavailable, PublishError, nats.errors.Error, OSError)):
        return GatedUnreachable(tool, f"gated cannot be reached ({type(e).__name__}: {e}); failing closed")
    if isinstance(e, GrantRefused):
        return ToolDenied(tool, f"its approval's grant was refused: {e}")
    if isinstance(e, GatedError):
        return ToolDenied(tool, f"{type(e).__name__}: {e}")
    return e
