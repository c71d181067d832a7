"""gated in front of the tools of agent frameworks, one line each.

The shared core (:class:`Gate`) maps a tool call to a proposal with a
catalog in `gated mcp`'s format, proposes it through :class:`gated.ToolGate`
(the approval's grant verified and used once), runs the tool with exactly
the arguments gated reviewed and reports the outcome; a call that does not
run raises a :class:`ToolRefused` subclass: :class:`ToolDenied`,
:class:`ToolHeld`, :class:`ToolTimedOut` or :class:`GatedUnreachable`.
Each framework's hook is a module of its own, installed with its extra
(``pip install gated[langgraph]``): ``gated.integrations.langgraph``,
``gated.integrations.openai_agents``, ``gated.integrations.pydantic_ai``,
``gated.integrations.adk``, ``gated.integrations.crewai``. See
docs/INTEGRATIONS.md.
"""

from gated.integrations._catalog import Catalog, InvalidCatalog, ToolRule, action_name
from gated.integrations._core import (
    Gate,
    GatedUnreachable,
    ToolCall,
    ToolDenied,
    ToolHeld,
    ToolMapping,
    ToolRefused,
    ToolTimedOut,
)

__all__ = [
    "Catalog",
    "Gate",
    "GatedUnreachable",
    "InvalidCatalog",
    "ToolCall",
    "ToolDenied",
    "ToolHeld",
    "ToolMapping",
    "ToolRefused",
    "ToolRule",
    "ToolTimedOut",
    "action_name",
]
