"""gated in front of a Pydantic AI agent's tools, as a toolset wrapper
(``pip install gated[pydantic-ai]``). One line::

    agent = Agent(model, toolsets=[GatedToolset(FunctionToolset([restart_service, drop_table]), gate)])

Each call of a wrapped tool is proposed to gated; the tool runs only on an
approval, with exactly the arguments gated reviewed, and its end is
reported. A refusal is a failed tool result the model reads (Pydantic AI's
``ToolFailed``): ``gated did not approve TOOL: ... The call was not made.``

A call the policy holds for an operator is a deferred approval
(``ApprovalRequired``, its metadata naming the proposal): give the agent
``output_type=[..., DeferredToolRequests]`` and the run ends with the held
calls in ``DeferredToolRequests.approvals``. Once the operator has decided
(``gated operator decide``), run again with the run's messages and
``DeferredToolResults(approvals={call_id: True})``: approving it there only
resumes the call, which then waits for the operator's signed decision as
gated records it and runs only on an approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import ApprovalRequired, RunContext, ToolFailed, WrapperToolset
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from gated.integrations._core import Gate, ToolCall, ToolHeld, ToolRefused

__all__ = ["GatedToolset"]


@dataclass
class GatedToolset(WrapperToolset[Any]):
    """A toolset whose every tool call goes through gate first."""

    gate: Gate

    def __init__(self, wrapped: AbstractToolset[Any], gate: Gate) -> None:
        super().__init__(wrapped)
        self.gate = gate

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        call = ToolCall(name, tool_args, ctx.tool_call_id or "")
        try:
            # Approved in the run (deferred results): wait for the
            # operator's decision; the run's approval decides nothing.
            v, arguments = await self.gate.authorize(call, wait_for_operator=ctx.tool_call_approved)
        except ToolHeld as held:
            hv = held.verdict
            hold = hv.awaiting_operator if hv is not None else None
            raise ApprovalRequired(
                metadata={
                    "gated": "held",
                    "tenant": hv.tenant if hv else "",
                    "proposal_id": hv.proposal_id if hv else "",
                    "rule": hold.rule if hold else "",
                    "deadline": hold.deadline if hold else "",
                    "message": str(held),
                }
            ) from held
        except ToolRefused as r:
            raise ToolFailed(str(r)) from r
        try:
            out = await super().call_tool(name, arguments, ctx, tool)
        except BaseException as e:
            await self.gate.finish(v, e)
            raise
        await self.gate.finish(v, None)
        return out
