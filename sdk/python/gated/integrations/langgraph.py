"""gated in front of a LangGraph graph's tools (``pip install gated[langgraph]``).

One line, where the graph's ToolNode is built::

    tools = gated_tool_node([restart_service, drop_table], gate)

or, on a ToolNode built elsewhere, ``ToolNode(tools, awrap_tool_call=gated_tool_call(gate))``.

Each tool call the model makes is proposed to gated; the tool runs only on
an approval, with exactly the arguments gated reviewed, and its end is
reported. A refusal becomes the tool's answer to the model: a ToolMessage
with status ``error`` whose text says why (the typed refusal is its
``artifact``). A call the policy holds for an operator becomes a LangGraph
``interrupt`` (the graph needs a checkpointer): the run stops with the
hold's details as the interrupt's value. Resume it with
``Command(resume=...)`` once the operator has decided (``gated operator
decide``): the resume value only wakes the graph; what counts is the
operator's signed decision, which gated checks and this call waits for.
The graph runs with ``ainvoke`` or ``astream``: the gate is asyncio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from gated.integrations._core import Gate, ToolCall, ToolHeld, ToolRefused

__all__ = ["gated_tool_call", "gated_tool_node", "hold_value"]

Execute = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


def hold_value(held: ToolHeld) -> dict[str, Any]:
    """The value of the interrupt a held call raises: what an operator, or
    the application asking one, needs to find the proposal."""
    v = held.verdict
    hold = v.awaiting_operator if v is not None else None
    return {
        "gated": "held",
        "tool": held.tool,
        "tenant": v.tenant if v else "",
        "proposal_id": v.proposal_id if v else "",
        "rule": hold.rule if hold else "",
        "reason": hold.reason if hold else "",
        "deadline": hold.deadline if hold else "",
        "message": str(held),
    }


def _refused(call: dict[str, Any], r: ToolRefused) -> ToolMessage:
    return ToolMessage(
        content=str(r), tool_call_id=call.get("id") or "", name=call.get("name"), status="error", artifact=r
    )


def gated_tool_call(gate: Gate) -> Callable[[ToolCallRequest, Execute], Awaitable[ToolMessage | Command[Any]]]:
    """A ToolNode ``awrap_tool_call`` that puts gate in front of every
    call the node executes."""

    async def wrap(request: ToolCallRequest, execute: Execute) -> ToolMessage | Command[Any]:
        tc = request.tool_call
        call = ToolCall(tool=tc["name"], arguments=tc.get("args") or {}, call_id=tc.get("id") or "")
        try:
            try:
                v, arguments = await gate.authorize(call)
            except ToolHeld as held:
                # The first time, this stops the run; on resume it returns
                # the resume value, which decides nothing: the call waits
                # for the operator's decision as gated records it.
                interrupt(hold_value(held))
                v, arguments = await gate.authorize(call, wait_for_operator=True)
        except ToolRefused as r:
            return _refused(dict(tc), r)
        try:
            out = await execute(request.override(tool_call={**tc, "args": arguments}))
        except BaseException as e:
            await gate.finish(v, e)
            raise
        failed = isinstance(out, ToolMessage) and out.status == "error"
        await gate.finish(v, str(out.content) if isinstance(out, ToolMessage) and failed else None)
        return out

    return wrap


def gated_tool_node(tools: Sequence[BaseTool | Callable[..., Any]], gate: Gate, **kwargs: Any) -> ToolNode:
    """A LangGraph ToolNode of tools, each call behind gate; kwargs go to
    ToolNode."""
    return ToolNode(tools, awrap_tool_call=gated_tool_call(gate), **kwargs)
