// A small MCP server in TypeScript for gated mcp to front: the MCP SDK's
// low-level Server, with tools/list and tools/call handled by hand, so a
// call's arguments reach the tool as the client sent them (no schema of
// the SDK's strips or coerces a member). Run it as
//
//   node build/upstream.js --log FILE
//
// Its one tool, restart_service, acts on two members of its arguments,
// host and service, and reads member names without case (HOST, Host,
// host alike), as many servers do to be lenient with models and as Go's
// encoding/json does: the last name that matches wins. Every call it
// executes is appended to FILE as a JSON line: the arguments as received
// and the host and service it acted on.
import { appendFileSync } from "node:fs";

import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

/** One line of the --log file: a call the server executed. */
interface UpstreamCall {
  tool: string;
  /** The arguments exactly as the server received them. */
  arguments: Record<string, unknown>;
  /** What the tool acted on. */
  acted: { host: unknown; service: unknown };
}

const logAt = process.argv.indexOf("--log");
const logFile = logAt >= 0 ? process.argv[logAt + 1] : undefined;
if (!logFile) {
  process.stderr.write("usage: upstream --log FILE\n");
  process.exit(2);
}

/** The member of args named name, whatever the case of its name: the last that matches. */
function member(args: Record<string, unknown>, name: string): unknown {
  let found: unknown;
  for (const [k, v] of Object.entries(args)) {
    if (k.toUpperCase() === name.toUpperCase()) {
      found = v;
    }
  }
  return found;
}

const server = new Server({ name: "ts-upstream", version: "1.0.0" }, { capabilities: { tools: {} } });

server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: "restart_service",
      description: "Restart a service on a host.",
      inputSchema: {
        type: "object" as const,
        properties: { host: { type: "string" }, service: { type: "string" } },
        required: ["host", "service"],
      },
      annotations: { readOnlyHint: false, destructiveHint: false },
    },
  ],
}));

server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const args = request.params.arguments ?? {};
  if (request.params.name !== "restart_service") {
    return { isError: true, content: [{ type: "text" as const, text: `no tool ${request.params.name}` }] };
  }
  const acted = { host: member(args, "host"), service: member(args, "service") };
  const call: UpstreamCall = { tool: request.params.name, arguments: args, acted };
  appendFileSync(logFile, JSON.stringify(call) + "\n");
  return { content: [{ type: "text" as const, text: `restarted ${String(acted.service)} on ${String(acted.host)}` }] };
});

await server.connect(new StdioServerTransport());
