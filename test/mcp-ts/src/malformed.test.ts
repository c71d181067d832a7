// Messages that are not JSON-RPC 2.0, sent to gated mcp in the middle of
// a session the TypeScript SDK's client holds, over stdio and over
// streamable HTTP: each gets a JSON-RPC error, the session goes on, and
// the example server executes nothing.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";

import { connectHTTP, gatedBinary, opsBinary, readOpsLog, startHarness, tempDir, type Harness } from "./harness.js";

/**
 * Lines an agent may send that are not JSON-RPC 2.0, each with the error
 * code and the response id it must get (null: JSON-RPC 2.0's id for a
 * request whose id cannot be read).
 */
const malformed: { note: string; line: string; code: number; id: number | null }[] = [
  { note: "not JSON", line: `{this is not json`, code: -32700, id: null },
  { note: "a batch", line: `[{"jsonrpc":"2.0","id":20,"method":"tools/list"}]`, code: -32600, id: null },
  {
    note: "JSON-RPC 1.0",
    line: `{"jsonrpc":"1.0","id":21,"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`,
    code: -32600,
    id: 21,
  },
  {
    note: "no version",
    line: `{"id":22,"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`,
    code: -32600,
    id: 22,
  },
  {
    note: "a key twice",
    line: `{"jsonrpc":"2.0","id":23,"method":"tools/list","method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`,
    code: -32600,
    id: null,
  },
  {
    note: "an object as id",
    line: `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"name":"drop_table","arguments":{"database":"a","table":"b"}}}`,
    code: -32600,
    id: null,
  },
];

interface ErrorResponse {
  jsonrpc?: unknown;
  id?: unknown;
  error?: { code?: unknown; message?: unknown };
}

let h: Harness;

before(async () => {
  h = await startHarness();
});

after(async () => {
  await h?.stop();
});

describe("malformed JSON-RPC", () => {
  test("over stdio: each bad line gets a JSON-RPC error, the session goes on, nothing is executed", async () => {
    const log = join(tempDir(), "calls.jsonl");
    // gated mcp is started here rather than by StdioClientTransport, to
    // hold its standard input and write bad lines beside the client's.
    // The client runs over the SDK's other line transport, on the child's
    // pipes: the same newline-delimited JSON-RPC.
    const child = spawn(gatedBinary(), [...h.mcpArgs("raw"), "--", opsBinary(), "--log", log], { stdio: ["pipe", "pipe", "inherit"] });
    const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
    // Every line gated mcp writes, read apart from the SDK's own parsing.
    const errors: ErrorResponse[] = [];
    let partial = "";
    child.stdout.on("data", (d: Buffer) => {
      partial += d.toString();
      let i: number;
      while ((i = partial.indexOf("\n")) >= 0) {
        const line = partial.slice(0, i);
        partial = partial.slice(i + 1);
        const m = JSON.parse(line) as ErrorResponse;
        if (m.error !== undefined) {
          errors.push(m);
        }
      }
    });
    const client = new Client({ name: "gated-ts-test-agent", version: "1.0.0" });
    // The SDK refuses a response whose id is null (its schema allows a
    // string, a number or none), which JSON-RPC 2.0 requires for a
    // request whose id cannot be read, and one that answers no request
    // of its own: it reports each through onerror and reads on. The
    // lines read above are what this test checks.
    client.onerror = () => {};
    try {
      await client.connect(new StdioServerTransport(child.stdout, child.stdin));
      assert.ok((await client.listTools()).tools.length > 0);
      for (const tc of malformed) {
        const before = errors.length;
        child.stdin.write(tc.line + "\n");
        const deadline = Date.now() + 30_000;
        while (errors.length === before && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 10));
        }
        const m = errors[before];
        assert.ok(m, `${tc.note}: no JSON-RPC error came back`);
        assert.equal(m.jsonrpc, "2.0", tc.note);
        assert.equal(m.error?.code, tc.code, `${tc.note}: ${JSON.stringify(m)}`);
        assert.equal(m.id, tc.id, `${tc.note}: ${JSON.stringify(m)}`);
        assert.equal(typeof m.error?.message, "string", tc.note);
      }
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ["drop_table", "list_services", "restart_service"]);
      assert.equal(errors.length, malformed.length, `unexpected errors: ${JSON.stringify(errors)}`);
      assert.deepEqual(readOpsLog(log), []);
    } finally {
      await client.close();
      child.stdin.end();
      child.kill("SIGKILL");
      await exited;
    }
  });

  test("over streamable HTTP: each bad body gets 400 with a JSON-RPC error, the session goes on, nothing is executed", async () => {
    const log = join(tempDir(), "calls.jsonl");
    const s = await connectHTTP(h, "raw", log);
    try {
      const session = s.transport.sessionId;
      assert.ok(session, "the SDK's transport holds no session id");
      const post = async (body: string): Promise<{ status: number; body: ErrorResponse }> => {
        const r = await fetch(s.url, {
          method: "POST",
          headers: {
            "Content-Type": "application/json",
            Accept: "application/json, text/event-stream",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": s.transport.protocolVersion ?? "2025-06-18",
          },
          body,
        });
        const text = await r.text();
        let parsed: ErrorResponse;
        try {
          parsed = JSON.parse(text) as ErrorResponse;
        } catch {
          assert.fail(`${r.status} answered ${JSON.stringify(text)}: not JSON`);
        }
        return { status: r.status, body: parsed };
      };
      for (const tc of malformed) {
        const r = await post(tc.line);
        assert.equal(r.status, 400, `${tc.note}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.jsonrpc, "2.0", tc.note);
        assert.equal(r.body.error?.code, tc.code, `${tc.note}: ${JSON.stringify(r.body)}`);
      }
      const { tools } = await s.client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ["drop_table", "list_services", "restart_service"]);
      assert.deepEqual(readOpsLog(log), []);
    } finally {
      await s.close();
    }
  });
});
