"""What a reviewer sees and answers: the request, the response and the errors."""

from __future__ import annotations

import asyncio
import enum
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

# Names of the tools gated itself answers, when a review's bag holds them.
TOOL_GET_SOP_TEXT = "get_sop_text"
TOOL_GET_VERDICT_HISTORY = "get_verdict_history"
TOOL_GET_PROPOSAL = "get_proposal"


class PluginError(Exception):
    """Root of the errors gated.plugin raises."""


class MalformedRequest(PluginError):
    """gated sent a review the SDK cannot read (a proposal, run context or
    history that is not the JSON the protocol promises). The review fails
    with an error, which gated records as an ``error`` verdict: never an
    approval. The plugin and gated disagree about the protocol; update the
    SDK to the version of the gated that runs the plugin."""


class HandshakeError(PluginError):
    """The process was not started by a gated host that speaks this
    protocol: no magic cookie, no protocol version 1 offered, or no client
    certificate for mutual TLS. ``serve`` prints it and exits 1."""


class ToolError(PluginError):
    """A tool call did not give a result."""


class ToolDenied(ToolError):
    """gated refused the tool call: the tool is not in this review's tool
    bag, the review is over, or the arguments were malformed. Treat it as
    missing evidence, never as permission."""


class ToolFailed(ToolError):
    """The tool was allowed but did not answer: its provider failed, found
    nothing, answered something that is not JSON, or ran out of time."""


class NoTools(ToolError):
    """gated offered no tools for this review."""


class Decision(enum.StrEnum):
    """The reviewer's structured decision; it must agree with the text."""

    APPROVE = "approve"
    REJECT = "reject"


@dataclass(frozen=True)
class Description:
    """Who the plugin is. ``describe`` is called once after launch."""

    name: str
    version: str
    #: Personas this plugin serves; empty means any persona.
    personas: Sequence[str] = ()
    #: Models it can run, as provider/model.
    models: Sequence[str] = ()
    #: How many reviews it takes at once; 0 lets the host decide (at most 16).
    max_concurrency: int = 0


@dataclass(frozen=True)
class Tool:
    """One tool of the review's effective tool bag."""

    name: str
    description: str = ""
    #: The JSON schema of the tool's arguments, as JSON text.
    input_schema: str = ""


@dataclass(frozen=True)
class Persona:
    """The persona gated composed for this review."""

    name: str = ""
    #: The composed prompt: base prompt, persona body, critical reminder.
    system_prompt: str = ""
    model: str = ""
    max_turns: int = 0
    tools: tuple[Tool, ...] = ()
    required_gates: tuple[str, ...] = ()
    permission_mode: str = ""


@dataclass(frozen=True)
class SOP:
    """The catalog entry that covers the action."""

    id: str = ""
    title: str = ""
    actions: tuple[str, ...] = ()
    rollback: str = ""
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """What the policy established before review."""

    revision: str = ""
    why: str = ""
    #: The SOP covering the action; None when none does.
    sop: SOP | None = None
    denied_tools: tuple[str, ...] = ()
    #: Recent verdicts on the same tenant and target (decoded JSON array).
    history: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Gate:
    """A gate the reviewer checked. Every gate the persona requires must be
    reported as passed, or gated rejects."""

    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Criterion:
    """The reviewer's judgement of one ai_review criterion of a run."""

    id: str
    passed: bool
    confidence: float
    reason: str = ""
    refs: Sequence[str] = ()


@dataclass(frozen=True)
class Comment:
    """A remark on a run's diff; line None is about the file as a whole."""

    path: str
    body: str
    line: int | None = None


@dataclass(frozen=True)
class Tokens:
    """Model tokens a review used."""

    prompt: int = 0
    completion: int = 0


@dataclass
class Response:
    """The reviewer's answer.

    ``text`` must start with the decision line ``Decision: approve`` or
    ``Decision: reject``; gated, not the plugin, reads it and is the only
    authority that turns it into an approval (docs/PLUGINS.md, "The
    answer"). ``decision`` must agree with it. Any other text is a
    rejection.
    """

    text: str
    decision: Decision
    gates: Sequence[Gate] = ()
    sop_id: str = ""
    rollback_path: str = ""
    notes: str = ""
    model: str = ""
    turns: int = 0
    tokens: Tokens = Tokens()
    criteria: Sequence[Criterion] = ()
    comments: Sequence[Comment] = ()
    missing_work: Sequence[str] = ()
    next_round_guidance: str = ""
    warnings: Sequence[str] = ()
    confidence: float = 0.0


#: Calls a tool for a review: (name, JSON object arguments) → JSON result.
ToolCall = Callable[[str, bytes], Awaitable[bytes]]


@dataclass
class Request:
    """One review.

    An async reviewer calls tools with ``await req.call_tool(...)``; a
    synchronous one (run in a worker thread) with ``req.call_tool_sync``.
    ``cancelled`` is set once the review is over for gated: its deadline
    passed, gated gave up on it, the plugin is asked to stop, or it was
    answered. A synchronous reviewer should look at it between slow
    steps.
    """

    review_id: str
    #: The decoded proposal (a JSON object).
    proposal: dict[str, Any]
    #: The proposal exactly as the agent published it.
    proposal_json: bytes
    persona: Persona
    policy: Policy
    #: When gated stops waiting (UTC).
    deadline: datetime
    #: The run context of a kind run proposal (JSON of gated's
    #: engine.RunContext); None for an action review.
    run: dict[str, Any] | None = None
    #: The W3C trace context of gated's review span, when gated traces
    #: (the Review call's gRPC metadata): the parent of the reviewer's own
    #: spans. ``gated.tracing.parent_context(req.traceparent, req.tracestate)``
    #: makes an OpenTelemetry context of it. None when gated sent none.
    traceparent: str | None = None
    tracestate: str | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    _call: ToolCall | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def has_tool(self, name: str) -> bool:
        """Tell whether the review's tool bag holds ``name``."""
        return any(t.name == name for t in self.persona.tools)

    async def call_tool(self, name: str, args: Any = None) -> Any:
        """Run one tool of the review's tool bag through gated and return
        its decoded JSON result. ``args`` is encoded as JSON (None sends
        ``{}``; bytes are sent as they are).

        Raises NoTools, ToolDenied or ToolFailed.
        """
        if self._call is None:
            raise NoTools(f"{name}: this review has no tools")
        if args is None:
            raw = b"{}"
        elif isinstance(args, bytes | bytearray):
            raw = bytes(args)
        else:
            try:
                raw = json.dumps(args, separators=(",", ":")).encode()
            except (TypeError, ValueError) as e:
                raise ToolDenied(f"{name}: encoding the arguments: {e}") from e
        out = await self._call(name, raw)
        try:
            return json.loads(out)
        except ValueError as e:
            raise ToolFailed(f"{name}: the result is not JSON: {e}") from e

    def call_tool_sync(self, name: str, args: Any = None) -> Any:
        """``call_tool`` for a synchronous reviewer, which runs in a worker
        thread. Never call it from the event loop's own thread."""
        if self._loop is None:
            if self._call is None:
                raise NoTools(f"{name}: this review has no tools")
            return asyncio.run(self.call_tool(name, args))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # Waiting here would stop the loop that has to make the call.
            raise PluginError(f"{name}: call_tool_sync from the event loop; an async reviewer awaits call_tool")
        fut = asyncio.run_coroutine_threadsafe(self.call_tool(name, args), self._loop)
        return fut.result()


@runtime_checkable
class Reviewer(Protocol):
    """What a plugin implements: one class with ``describe`` and ``review``.

    Either method may be ``async def`` or a plain function; plain ones run
    in a worker thread so that they never stall the plugin's health
    answers. ``review`` returns a Response or raises: an exception fails
    that one review (gated records an ``error`` verdict) and the plugin
    keeps serving.
    """

    def describe(self) -> Description | Awaitable[Description]:
        """Say who the plugin is."""
        ...

    def review(self, req: Request) -> Response | Awaitable[Response]:
        """Judge one proposal."""
        ...
