// What a real TypeScript MCP server receives through gated mcp: every
// member it gets, and so every member it acts on, is in the arguments of
// the proposal gated decided, and a call whose member names are equal
// under case folding never reaches it. The server (upstream.ts) is the
// MCP SDK's low-level Server reading request.params.arguments as given;
// its catalog entry names only the host as the target, and the tool acts
// on the service too. The server's own --log file proves what reached it,
// and gated's audit stream what gated decided.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import {
  connectUpstream,
  decidedProposal,
  readOpsLog,
  resultText,
  startHarness,
  tempDir,
  verdictOf,
  type Harness,
  type Session,
  type ToolResult,
} from "./harness.js";

/** The catalog: the target is the host alone; the service is an argument the target does not name. */
const catalog = `tools:
  restart_service:
    action: host_restart_service
    target:
      host: /host
`;

/** One line of upstream.ts' --log file. */
interface UpstreamCall {
  tool: string;
  arguments: Record<string, unknown>;
  acted: { host: unknown; service: unknown };
}

let h: Harness;
let catalogFile: string;

before(async () => {
  h = await startHarness();
  catalogFile = join(tempDir(), "catalog.yaml");
  writeFileSync(catalogFile, catalog);
});

after(async () => {
  await h?.stop();
});

async function withUpstream(fn: (s: Session, log: string) => Promise<void>): Promise<void> {
  const log = join(tempDir(), "upstream.jsonl");
  const s = await connectUpstream(h, "acme", catalogFile, log);
  try {
    await fn(s, log);
  } finally {
    await s.close();
  }
}

function calls(log: string): UpstreamCall[] {
  return readOpsLog(log) as unknown as UpstreamCall[];
}

async function call(s: Session, args: Record<string, unknown>): Promise<ToolResult> {
  return (await s.client.callTool({ name: "restart_service", arguments: args }, undefined, { timeout: 120_000 })) as ToolResult;
}

test("every member the server receives and acts on is in the proposal gated decided", async () => {
  await withUpstream(async (s, log) => {
    const res = await call(s, { host: "web-31", service: "nginx", _reason: "nginx leaks memory" });
    assert.notEqual(res.isError, true, `restart_service was not approved: ${resultText(res)}`);
    const v = verdictOf(res);
    assert.ok(v, "the result carries no verdict");
    const got = calls(log);
    assert.equal(got.length, 1, `the server ran ${got.length} calls`);
    const ran = got[0]!;
    const p = decidedProposal(h, "acme", v.proposal_id);
    assert.deepEqual(p["target"], { host: "web-31" }, "the catalog's target");
    // The key line: what the server received, member for member, is what
    // gated decided on, not only what the target names.
    assert.deepEqual(
      p["arguments"],
      ran.arguments,
      `the server received ${JSON.stringify(ran.arguments)} and acted on service ${JSON.stringify(ran.acted.service)}; the proposal gated decided was ${JSON.stringify(p)}`,
    );
    assert.deepEqual(ran.acted, { host: "web-31", service: "nginx" });
  });
});

test("a call whose member names are equal under case folding never reaches the server", async () => {
  await withUpstream(async (s, log) => {
    // host is what a reviewer sees; hoſt (U+017F) is what a server that
    // reads names without case acts on, as upstream.ts does.
    const res = await call(s, { host: "web-32", "ho\u017ft": "db-9", service: "nginx", _reason: "nginx leaks memory" });
    const got = calls(log);
    assert.deepEqual(got, [], `the server acted on ${JSON.stringify(got[0]?.acted)}; gated's verdict: ${JSON.stringify(verdictOf(res))}`);
    assert.equal(res.isError, true, resultText(res));
    assert.match(resultText(res), /gated refused the call of restart_service/);
    assert.match(resultText(res), /differ only by case/);
  });
});
