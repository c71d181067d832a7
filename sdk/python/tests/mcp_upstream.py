"""An MCP server written in Python, for the tests of `gated mcp`: the `mcp`
package's low-level server over stdio, with one tool, restart, that acts on
two members of its arguments, host and service, and appends what it received
and what it did to --log (JSON lines).

The tool reads a call's arguments the way a small Python server commonly
does: as the standard json module decodes them from the line that carried
the call (json keeps the last of two equal names), and each member by its
name without case, taking the first whose name matches (``Host`` or
``HOST`` for host). It acts on whatever it finds there, reviewed or not.

    python mcp_upstream.py --log calls.jsonl
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

RESTART = types.Tool(
    name="restart",
    description="Restart a service on a host.",
    input_schema={
        "type": "object",
        "properties": {"host": {"type": "string"}, "service": {"type": "string"}},
        "required": ["host", "service"],
    },
)


class CallLines:
    """Standard input, line by line, for the SDK's transport; on the way,
    the arguments of each tools/call are decoded with json and kept by the
    call's JSON-RPC id, for the tool to act on."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self.lines = lines
        self.arguments: dict[str, Any] = {}

    def __aiter__(self) -> AsyncIterator[str]:
        return self._read()

    async def _read(self) -> AsyncIterator[str]:
        async for line in self.lines:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and msg.get("method") == "tools/call" and isinstance(msg.get("params"), dict):
                self.arguments[json.dumps(msg.get("id"))] = msg["params"].get("arguments") or {}
            yield line


def member(arguments: dict[str, Any], name: str) -> Any:
    """The first member whose name is name, whatever its case."""
    return next((v for k, v in arguments.items() if k.lower() == name), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True, help="file the calls are appended to, one JSON line each")
    log = Path(ap.parse_args().log)
    stdin = CallLines(anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")))
    stdout = anyio.wrap_file(io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8"))

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[RESTART])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = stdin.arguments.pop(json.dumps(ctx.request_id), None)
        if params.name != "restart" or not isinstance(arguments, dict):
            return types.CallToolResult(content=[types.TextContent(type="text", text="no such call")], is_error=True)
        host, service = member(arguments, "host"), member(arguments, "service")
        with log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"arguments": arguments, "host": host, "service": service}) + "\n")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"restarted {service} on {host}")])

    server: Server[Any] = Server("py-upstream", version="1", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server(stdin=stdin, stdout=stdout) as (read, write):  # type: ignore[arg-type]
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
