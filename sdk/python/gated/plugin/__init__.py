"""Reviewer plugins for gated, in Python.

A reviewer is one class with ``describe`` and ``review`` (each async or
not); ``serve`` runs it as a plugin process that gated starts, pins and
talks to over hashicorp/go-plugin's gRPC protocol with mutual TLS::

    from gated.plugin import Decision, Description, Response, serve

    class Always:
        def describe(self):
            return Description(name="always-no", version="0.1.0")

        def review(self, req):
            return Response(text="Decision: reject\\nNotes: no.", decision=Decision.REJECT)

    serve(Always())

A plugin never approves anything by itself: gated reads the first line of
``Response.text`` and is the only authority that turns it into an
approval (docs/PLUGINS.md).
"""

from gated.plugin._server import SHUTDOWN_GRACE, log, serve
from gated.plugin._types import (
    SOP,
    TOOL_GET_PROPOSAL,
    TOOL_GET_SOP_TEXT,
    TOOL_GET_VERDICT_HISTORY,
    Comment,
    Criterion,
    Decision,
    Description,
    Gate,
    HandshakeError,
    MalformedRequest,
    NoTools,
    Persona,
    PluginError,
    Policy,
    Request,
    Response,
    Reviewer,
    Tokens,
    Tool,
    ToolDenied,
    ToolError,
    ToolFailed,
)

__all__ = [
    "SHUTDOWN_GRACE",
    "SOP",
    "TOOL_GET_PROPOSAL",
    "TOOL_GET_SOP_TEXT",
    "TOOL_GET_VERDICT_HISTORY",
    "Comment",
    "Criterion",
    "Decision",
    "Description",
    "Gate",
    "HandshakeError",
    "MalformedRequest",
    "NoTools",
    "Persona",
    "PluginError",
    "Policy",
    "Request",
    "Response",
    "Reviewer",
    "Tokens",
    "Tool",
    "ToolDenied",
    "ToolError",
    "ToolFailed",
    "log",
    "serve",
]
