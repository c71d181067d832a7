"""gated in front of a CrewAI agent's tools, as a tool wrapper
(``pip install gated[crewai]``). One line::

    agent = Agent(role=..., goal=..., backstory=..., tools=gated_tools([restart_service, drop_table], gate))

CrewAI runs tools synchronously: build the gate on a
:class:`gated.SyncClient`. Each call of a wrapped tool is proposed to
gated; the tool runs only on an approval, with exactly the arguments gated
reviewed, and its end is reported. A refusal is the tool's result, text the
agent reads: ``gated did not approve TOOL: ... The call was not made.``

CrewAI has no way to suspend a run and resume it later, so a call the
policy holds for an operator waits, in place, for the operator's signed
decision (``gated operator decide``) or the hold's deadline (bounded by the
gate's ``operator_timeout``), and runs only on an approval. With
``wait_for_operator=False`` a held call is refused at once instead, its
text naming the proposal for the agent to report.

CrewAI hands a tool no id of the call: each call is a new proposal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crewai.tools import BaseTool
from pydantic import PrivateAttr

from gated.integrations._core import Gate, ToolCall, ToolRefused

__all__ = ["GatedTool", "gated_tools"]


class GatedTool(BaseTool):
    """A CrewAI tool whose calls go through a gate before the wrapped
    tool runs."""

    _inner: BaseTool = PrivateAttr()
    _gate: Gate = PrivateAttr()
    _wait: bool = PrivateAttr(default=True)

    @classmethod
    def wrap(cls, tool: BaseTool, gate: Gate, *, wait_for_operator: bool = True) -> GatedTool:
        """tool behind gate, with its name, description and arguments."""
        if not isinstance(tool, BaseTool):
            raise TypeError(f"gated_tools takes CrewAI tools, not a {type(tool).__name__}")
        t = cls(name=tool.name, description=tool.description, args_schema=tool.args_schema)
        t._inner, t._gate, t._wait = tool, gate, wait_for_operator
        return t

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            return f"gated did not approve {self.name}: a call by position cannot be proposed. The call was not made."
        try:
            return self._gate.run_sync(
                ToolCall(self.name, kwargs), lambda reviewed: self._inner.run(**reviewed), wait_for_operator=self._wait
            )
        except ToolRefused as r:
            return str(r)


def gated_tools(tools: Sequence[BaseTool], gate: Gate, *, wait_for_operator: bool = True) -> list[BaseTool]:
    """tools, each behind gate."""
    return [GatedTool.wrap(t, gate, wait_for_operator=wait_for_operator) for t in tools]
