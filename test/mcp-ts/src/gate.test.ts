// gated mcp under the TypeScript MCP SDK's client, over stdio and over
// streamable HTTP, in front of the example server examples/mcp-ops, with
// a real gated serve deciding: approved calls reach the server; rejected,
// denied and held-then-timed-out ones never do; mcp-ops' own --log file
// proves which calls reached it.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  ProgressLog,
  connectHTTP,
  connectStdio,
  readOpsLog,
  resultText,
  startHarness,
  tempDir,
  verdictOf,
  type Harness,
  type Session,
  type ToolResult,
} from "./harness.js";

let h: Harness;

before(async () => {
  h = await startHarness();
});

after(async () => {
  await h?.stop();
});

type Connect = (h: Harness, tenant: string, log: string, ...extra: string[]) => Promise<Session>;

const transports: { note: string; connect: Connect; host: string }[] = [
  // Each transport restarts services of its own host: parallel_operation
  // denies a second restart of one target within ten minutes.
  { note: "stdio (StdioClientTransport launches gated mcp -- mcp-ops)", connect: connectStdio, host: "web-1" },
  { note: "streamable HTTP (gated mcp --listen, --upstream mcp-ops --http)", connect: connectHTTP, host: "web-2" },
];

/** Opens a session for tenant with a fresh call log, runs fn, and closes it. */
async function withSession(connect: Connect, tenant: string, fn: (s: Session, log: string) => Promise<void>, ...extra: string[]): Promise<void> {
  const log = join(tempDir(), "calls.jsonl");
  const s = await connect(h, tenant, log, ...extra);
  try {
    await fn(s, log);
  } finally {
    await s.close();
  }
}

async function toolNames(s: Session): Promise<string[]> {
  const res = await s.client.listTools();
  return res.tools.map((t) => t.name).sort();
}

async function call(s: Session, name: string, args: Record<string, unknown>, progress?: ProgressLog): Promise<ToolResult> {
  const opts = progress ? { onprogress: progress.onprogress, timeout: 120_000 } : { timeout: 120_000 };
  return (await s.client.callTool({ name, arguments: args }, undefined, opts)) as ToolResult;
}

for (const tr of transports) {
  describe(tr.note, () => {
    const host = tr.host;

    test("acme: a read passes, an approved restart reaches the server, a rejected drop does not", async () => {
      await withSession(tr.connect, "acme", async (s, log) => {
        assert.deepEqual(await toolNames(s), ["drop_table", "list_services", "restart_service"]);

        const read = await call(s, "list_services", { host: "web-1" });
        assert.notEqual(read.isError, true, resultText(read));
        assert.match(resultText(read), /nginx/);
        const local = verdictOf(read);
        assert.equal(local?.decided, "locally", "the read was proposed");
        assert.equal(local?.outcome, "approved");
        assert.equal(local?.stage, "policy");
        assert.equal(local?.audit, "pending");
        assert.match(local?.proposal_id ?? "", /^mcp-/);

        const progress = new ProgressLog();
        const restart = await call(s, "restart_service", { host, service: "nginx", _reason: "nginx leaks memory" }, progress);
        assert.notEqual(restart.isError, true, `restart_service was not approved: ${resultText(restart)}`);
        assert.equal(resultText(restart), `restarted nginx on ${host}`);
        const approved = verdictOf(restart);
        assert.equal(approved?.outcome, "approved");
        assert.equal(approved?.tenant, "acme");
        assert.ok(
          progress.messages.some((m) => m.includes("review started by")),
          `progress notifications ${JSON.stringify(progress.messages)} do not say the review started`,
        );
        assert.ok(progress.messages.some((m) => m.includes(`proposed to gated as acme.${approved?.proposal_id}`)), JSON.stringify(progress.messages));

        const drop = await call(s, "drop_table", { database: "orders", table: `customers-${host}`, _reason: "cleanup" });
        assert.equal(drop.isError, true, `drop_table was not refused: ${resultText(drop)}`);
        const rejected = verdictOf(drop);
        assert.equal(rejected?.outcome, "rejected");
        assert.equal(rejected?.stage, "review");
        const text = resultText(drop);
        assert.ok(text.includes(`acme.${rejected?.proposal_id}`), `refusal ${JSON.stringify(text)} does not name the verdict`);
        assert.ok(rejected?.reason && text.includes(rejected.reason), `refusal ${JSON.stringify(text)} does not carry the reason`);

        const calls = readOpsLog(log);
        assert.deepEqual(
          calls.map((c) => c.tool),
          ["list_services", "restart_service"],
        );
        assert.deepEqual(calls[1]?.arguments, { host, service: "nginx" }, "the reason argument reached the server");
      });
    });

    test("locked: the denied tool is missing from tools/list, and calling it reaches nothing", async () => {
      await withSession(tr.connect, "locked", async (s, log) => {
        assert.deepEqual(await toolNames(s), ["list_services", "restart_service"]);
        await assert.rejects(call(s, "drop_table", { database: "a", table: host }), /drop_table/);
        assert.deepEqual(readOpsLog(log), []);
      });
    });

    test("locked, --list-denied mark: the denied tool is listed as denied, and its call refused at policy", async () => {
      await withSession(
        tr.connect,
        "locked",
        async (s, log) => {
          const { tools } = await s.client.listTools();
          const drop = tools.find((t) => t.name === "drop_table");
          assert.match(drop?.description ?? "", /denied by gated's policy/);
          const res = await call(s, "drop_table", { database: "a", table: host });
          assert.equal(res.isError, true, resultText(res));
          assert.equal(verdictOf(res)?.outcome, "rejected");
          assert.equal(verdictOf(res)?.stage, "policy");
          assert.match(resultText(res), /denied_action/);
          assert.deepEqual(readOpsLog(log), []);
        },
        "--list-denied",
        "mark",
      );
    });

    test("held: a restart whose operator hold times out never reaches the server", async () => {
      await withSession(tr.connect, "held", async (s, log) => {
        const progress = new ProgressLog();
        const res = await call(s, "restart_service", { host, service: "app" }, progress);
        assert.equal(res.isError, true, `a held restart nobody decided was forwarded: ${resultText(res)}`);
        assert.equal(verdictOf(res)?.outcome, "timeout");
        assert.ok(
          progress.messages.some((m) => m.includes("awaiting an operator")),
          `progress notifications ${JSON.stringify(progress.messages)} do not say the call awaits an operator`,
        );
        assert.deepEqual(readOpsLog(log), []);
      });
    });
  });
}
