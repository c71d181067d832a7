"""gated in front of an OpenAI Agents SDK agent's function tools
(``pip install gated[openai-agents]``). One line::

    agent = Agent(name="ops", tools=gated_tools([restart_service, drop_table], gate))

Each call of a function tool is proposed to gated; the tool runs only on an
approval, with exactly the arguments gated reviewed, and its end is
reported. A refusal is the tool's output, text the model reads: ``gated did
not approve TOOL: ... The call was not made.``

A call the policy holds for an operator pauses the run: the tool's
``needs_approval`` asks gated, and a held call becomes one of the result's
``interruptions``. Once the operator has decided (``gated operator
decide``), approve the item in the run state and run again
(``state = result.to_state(); state.approve(item); await Runner.run(agent,
state)``): approving it there only resumes the run; the call then waits for
the operator's signed decision as gated records it, and runs only on an
approval. Rejecting the item in the run state keeps the tool from running
whatever the operator decides.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper, Tool
from agents.tool_context import ToolContext

from gated.integrations._core import Gate, ToolCall, ToolRefused
from gated.wire import loads

__all__ = ["gated_tool", "gated_tools"]


def gated_tool(tool: FunctionTool, gate: Gate) -> FunctionTool:
    """A copy of a function tool whose calls go through gate."""
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"gated_tool takes a FunctionTool, not a {type(tool).__name__}")
    inner = tool.on_invoke_tool
    name = tool.name

    async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        # Only a hold pauses the run; any other answer is the invocation's
        # to act on (it proposes the same call again, which gated answers
        # from its store).
        return await gate.held(ToolCall(name, params, call_id)) is not None

    async def invoke(ctx: ToolContext[Any], input_json: str) -> Any:
        try:
            args = loads(input_json or "{}")
        except ValueError as e:
            return f"gated did not approve {name}: its arguments are not JSON ({e}). The call was not made."
        if not isinstance(args, dict):
            return f"gated did not approve {name}: its arguments are not a JSON object. The call was not made."
        call = ToolCall(name, args, ctx.tool_call_id)
        try:
            v, arguments = await gate.authorize(call, wait_for_operator=True)
        except ToolRefused as r:
            return str(r)
        try:
            out = await inner(ctx, json.dumps(arguments, ensure_ascii=False))
        except BaseException as e:
            await gate.finish(v, e)
            raise
        await gate.finish(v, None)
        return out

    wrapped = copy.copy(tool)
    wrapped.on_invoke_tool = invoke
    wrapped.needs_approval = needs_approval
    return wrapped


def gated_tools(tools: Sequence[Tool], gate: Gate) -> list[Tool]:
    """tools with every function tool behind gate. Other kinds of tool
    (hosted tools, which run at the model's provider) are refused: gated
    could not stand between the model and them."""
    out: list[Tool] = []
    for t in tools:
        if not isinstance(t, FunctionTool):
            raise TypeError(f"tool {getattr(t, 'name', t)!r} is a {type(t).__name__}: only function tools can be gated")
        out.append(gated_tool(t, gate))
    return out
