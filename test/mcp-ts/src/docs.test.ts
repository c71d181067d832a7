// The agent configuration docs/MCP.md gives ("Configuring an agent"), run
// as an MCP client runs it: the mcpServers entry's command, args and env,
// launched by the TypeScript SDK's StdioClientTransport. Only what the
// reader installs elsewhere is swapped for this repository's files: the
// binaries, the example's catalog and policy data, and the test's NATS.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { gatedBinary, opsBinary, repoRoot, resultText, startHarness, verdictOf, type Harness, type ToolResult } from "./harness.js";

interface ServerEntry {
  command: string;
  args: string[];
  env?: Record<string, string>;
}

/** The first ```json block of docs/MCP.md whose mcpServers entry launches a command. */
function documentedEntry(): ServerEntry {
  const doc = readFileSync(join(repoRoot, "docs/MCP.md"), "utf8");
  for (const m of doc.matchAll(/```json\n([\s\S]*?)```/g)) {
    const cfg = JSON.parse(m[1] ?? "") as { mcpServers?: Record<string, ServerEntry> };
    const entry = Object.values(cfg.mcpServers ?? {}).find((e) => typeof e.command === "string");
    if (entry) {
      return entry;
    }
  }
  throw new Error("docs/MCP.md has no mcpServers entry with a command");
}

let h: Harness;

before(async () => {
  h = await startHarness();
});

after(async () => {
  await h?.stop();
});

test("docs/MCP.md's agent configuration works as written", async () => {
  const entry = documentedEntry();
  const swap: Record<string, string> = {
    "/usr/local/bin/gated": gatedBinary(),
    "/usr/local/bin/mcp-ops": opsBinary(),
    "/etc/gated/mcp-ops-catalog.yaml": join(repoRoot, "examples/mcp-ops/catalog.yaml"),
    "/etc/gated/mcp-ops-policy-data.yaml": join(repoRoot, "examples/mcp-ops/policy-data.yaml"),
    "nats://127.0.0.1:4222": h.natsURL,
  };
  const args = entry.args.map((a) => swap[a] ?? a);
  assert.ok(!args.some((a) => a.startsWith("/etc/") || a.startsWith("/usr/")), `a path the test does not know: ${args.join(" ")}`);
  const transport = new StdioClientTransport({ command: swap[entry.command] ?? entry.command, args, env: entry.env ?? {}, stderr: "inherit" });
  const client = new Client({ name: "gated-ts-docs-agent", version: "1.0.0" });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ["drop_table", "list_services", "restart_service"]);
    // The read passes on the proxy's own evaluation of the policy, as
    // docs/MCP.md says a read the policy's catalog backs does: nothing is
    // proposed, and the result's verdict says it was decided locally.
    const read = (await client.callTool({ name: "list_services", arguments: { host: "web-1" } })) as ToolResult;
    assert.notEqual(read.isError, true, resultText(read));
    assert.equal(verdictOf(read)?.decided, "locally", `the read went to gated: ${JSON.stringify(verdictOf(read))}`);
    const drop = (await client.callTool({ name: "drop_table", arguments: { database: "orders", table: "docs", _reason: "free space" } })) as ToolResult;
    assert.equal(drop.isError, true, resultText(drop));
    assert.equal(verdictOf(drop)?.outcome, "rejected");
  } finally {
    await client.close();
  }
});
