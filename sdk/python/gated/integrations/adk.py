"""gated in front of a Google ADK agent's tools, as its tool callbacks
(``pip install gated[adk]``). One line::

    agent = LlmAgent(name="ops", model=..., tools=[restart_service, drop_table], **gated_callbacks(gate))

``before_tool_callback`` proposes each call to gated; the tool runs only on
an approval, with exactly the arguments gated reviewed (the call's
arguments are replaced by them), and ``after_tool_callback`` and
``on_tool_error_callback`` report its end. A refusal is the tool's
response, ``{"error": "gated did not approve TOOL: ... The call was not
made."}``, which the model reads.

A call the policy holds for an operator asks for ADK's tool confirmation
(``tool_context.request_confirmation``, its payload naming the proposal):
the run pauses with an ``adk_request_confirmation`` function call. Once the
operator has decided (``gated operator decide``), answer it with a
``FunctionResponse`` of that name and id, ``{"confirmed": true}``: that only
resumes the call, which then waits for the operator's signed decision as
gated records it and runs only on an approval. ``{"confirmed": false}``
keeps the tool from running whatever the operator decides.
"""

from __future__ import annotations

from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from gated.integrations._core import Gate, ToolCall, ToolHeld, ToolRefused
from gated.verdict import Verdict

__all__ = ["GatedCallbacks", "gated_callbacks"]


class GatedCallbacks:
    """The tool callbacks that put gate in front of an agent's tools."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self._running: dict[str, Verdict] = {}

    async def before_tool_callback(self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any] | None:
        """Propose the call; None (run the tool) only on an approval."""
        call_id = tool_context.function_call_id or ""
        call = ToolCall(tool.name, dict(args), call_id)
        confirmation = tool_context.tool_confirmation
        if confirmation is not None and not confirmation.confirmed:
            return {"error": f"gated did not approve {tool.name}: the run declined to wait for an operator. The call was not made."}
        try:
            # Confirmed in the run: wait for the operator's decision; the
            # run's confirmation decides nothing.
            v, reviewed = await self.gate.authorize(call, wait_for_operator=confirmation is not None)
        except ToolHeld as held:
            hv = held.verdict
            hold = hv.awaiting_operator if hv is not None else None
            tool_context.request_confirmation(
                hint=str(held),
                payload={
                    "gated": "held",
                    "tenant": hv.tenant if hv else "",
                    "proposal_id": hv.proposal_id if hv else "",
                    "rule": hold.rule if hold else "",
                    "deadline": hold.deadline if hold else "",
                },
            )
            # The pause is not a result for the model to answer.
            tool_context.actions.skip_summarization = True
            return {"status": "held", "message": str(held)}
        except ToolRefused as r:
            return {"error": str(r)}
        args.clear()
        args.update(reviewed)
        if v is not None:
            self._running[call_id] = v
        return None

    async def after_tool_callback(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any
    ) -> dict[str, Any] | None:
        """Report succeeded, or failed for a response that is an error."""
        v = self._running.pop(tool_context.function_call_id or "", None)
        if v is not None:
            failed = isinstance(tool_response, dict) and "error" in tool_response
            await self.gate.finish(v, str(tool_response["error"]) if failed else None)
        return None

    async def on_tool_error_callback(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        """Report failed with what the tool raised; the error is ADK's to
        handle, as without gated."""
        v = self._running.pop(tool_context.function_call_id or "", None)
        if v is not None:
            await self.gate.finish(v, error)
        return None


def gated_callbacks(gate: Gate) -> dict[str, Any]:
    """The keyword arguments of an LlmAgent that put gate in front of its
    tools: ``before_tool_callback``, ``after_tool_callback`` and
    ``on_tool_error_callback``."""
    c = GatedCallbacks(gate)
    return {
        "before_tool_callback": c.before_tool_callback,
        "after_tool_callback": c.after_tool_callback,
        "on_tool_error_callback": c.on_tool_error_callback,
    }
