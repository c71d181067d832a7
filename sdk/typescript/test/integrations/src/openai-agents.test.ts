// OpenAI Agents JS, driven by a fake model (the SDK's Model interface)
// calling function tools that @gated/client/openai-agents puts behind a
// real gated serve: gated's decision is the tool's needsApproval, and a
// held call's interruption is resolved by the operator's signed decision.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, Runner, setTracingDisabled, tool, ToolCallError, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";

import { NoVerdictError, TransportError } from "@gated/client";
import { decideApprovals, gateAgentTools } from "@gated/client/openai-agents";
import { GatedTools } from "@gated/client/integrations";

import { startGated } from "../../gated.mjs";
import { freshDevice, startWorld, type World } from "./common.js";

setTracingDisabled(true);

let w: World;

before(async () => {
  w = await startWorld("openai-agents");
});

after(async () => {
  await w?.stop();
});

/** A model that calls one tool, then answers "done"; requests holds every request it got. */
class FakeModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(
    private readonly toolName: string,
    private readonly input: unknown,
  ) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    if (this.requests.length === 1) {
      return {
        usage: new Usage(),
        output: [{ type: "function_call", callId: `call-${this.toolName}`, name: this.toolName, arguments: JSON.stringify(this.input), status: "completed" }],
      };
    }
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not streamed");
  }
  /** What the model was told of its tool call, in its last request. */
  toolOutput(): string {
    const last = this.requests.at(-1);
    const input = Array.isArray(last?.input) ? last.input : [];
    const out = input.find((i) => (i as { type?: string }).type === "function_call_result");
    assert.ok(out, `no tool output in the model's last request: ${JSON.stringify(last?.input)}`);
    return JSON.stringify(out);
  }
}

function opsTools(ran: { tool: string; input: unknown }[]) {
  return [
    tool({
      name: "restart_service",
      description: "Restart a service on a device",
      parameters: z.object({ device: z.number(), service: z.string() }),
      execute: async (input) => {
        ran.push({ tool: "restart_service", input });
        return `restarted ${input.service} on ${input.device}`;
      },
    }),
    tool({
      name: "drop_table",
      description: "Drop a database table",
      parameters: z.object({ table: z.string() }),
      execute: async (input) => {
        ran.push({ tool: "drop_table", input });
        return "dropped";
      },
    }),
    tool({
      name: "delete_dns_record",
      description: "Delete a DNS record",
      parameters: z.object({ zone: z.string(), record: z.string() }),
      execute: async (input) => {
        ran.push({ tool: "delete_dns_record", input });
        return "deleted";
      },
    }),
  ];
}

function agent(model: Model, tools: GatedTools, ran: { tool: string; input: unknown }[]) {
  return new Agent({ name: "ops", instructions: "Keep the fleet running.", model, tools: gateAgentTools(tools, opsTools(ran)) });
}

const runner = new Runner();

test("approved: the tool runs once with the reviewed arguments, through its grant, and its outcome is reported", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const device = freshDevice();
  const model = new FakeModel("restart_service", { device, service: "nginx" });
  const before = w.reports.length;
  const r = await runner.run(agent(model, w.tools(), ran), "nginx is wedged");
  assert.equal(r.finalOutput, "done");
  assert.deepEqual(r.interruptions ?? [], []);
  assert.deepEqual(ran, [{ tool: "restart_service", input: { device, service: "nginx" } }]);
  const last = w.seen.at(-1)!;
  assert.equal(last.p.action, "host_restart_service");
  assert.deepEqual(last.p.arguments, { device, service: "nginx" });
  assert.equal((await w.client.verdict("acme", last.p.id)).outcome, "approved");
  assert.deepEqual(
    w.reports.slice(before).map((o) => [o.proposal_id, o.status]),
    [
      [last.p.id, "started"],
      [last.p.id, "succeeded"],
    ],
  );
  assert.match(model.toolOutput(), /restarted nginx/);
});

test("rejected: the tool does not run and the model reads gated's refusal", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const model = new FakeModel("drop_table", { table: "users" });
  const r = await runner.run(agent(model, w.tools(), ran), "clean up");
  assert.equal(r.finalOutput, "done");
  assert.deepEqual(ran, []);
  assert.match(model.toolOutput(), /gated did not approve drop_table: rejected at stage review/);
});

test("held: the run stops for approval and resumes on the operator's signed approval", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const record = `r-${freshDevice()}`;
  const model = new FakeModel("delete_dns_record", { zone: "example.org", record });
  const tools = w.tools();
  const a = agent(model, tools, ran);
  const first = await runner.run(a, "retire the record");
  assert.equal(first.interruptions?.length, 1);
  assert.deepEqual(ran, []);
  const held = tools.held("call-delete_dns_record");
  assert.ok(held, "gated does not hold the call");
  assert.equal(held.awaiting_operator?.rule, "hold_listed_action");
  const deciding = decideApprovals(tools, first, { timeoutMs: 60_000 });
  const { code, output } = await w.g.decide(held.proposal_id, "--approve", "--reason", "retire it");
  assert.equal(code, 0, output);
  assert.equal(await deciding, 1);
  const second = await runner.run(a, first.state);
  assert.equal(second.finalOutput, "done");
  assert.deepEqual(ran, [{ tool: "delete_dns_record", input: { zone: "example.org", record } }]);
  const v = await w.client.verdict("acme", held.proposal_id);
  assert.equal(v.stage, "operator");
  assert.equal(v.operator_decision?.decision, "approve");
});

test("held and rejected by the operator: the tool never runs and the model reads why", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const model = new FakeModel("delete_dns_record", { zone: "example.org", record: `r-${freshDevice()}` });
  const tools = w.tools();
  const a = agent(model, tools, ran);
  const first = await runner.run(a, "retire the record");
  const held = tools.held("call-delete_dns_record");
  assert.ok(held, "gated does not hold the call");
  const deciding = decideApprovals(tools, first, { timeoutMs: 60_000 });
  const { code, output } = await w.g.decide(held.proposal_id, "--reject", "--reason", "not in a change window");
  assert.equal(code, 0, output);
  assert.equal(await deciding, 1);
  const second = await runner.run(a, first.state);
  assert.equal(second.finalOutput, "done");
  assert.deepEqual(ran, []);
  assert.match(model.toolOutput(), /gated did not approve delete_dns_record: rejected at stage operator: .*not in a change window/);
});

test("held and approved in the run alone: nothing runs without gated's approval", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const model = new FakeModel("delete_dns_record", { zone: "example.org", record: `r-${freshDevice()}` });
  const tools = w.tools();
  const a = agent(model, tools, ran);
  const first = await runner.run(a, "retire the record");
  assert.equal(first.interruptions?.length, 1);
  first.state.approve(first.interruptions![0]!);
  const second = await runner.run(a, first.state);
  assert.equal(second.finalOutput, "done");
  assert.deepEqual(ran, []);
  assert.match(model.toolOutput(), /gated holds delete_dns_record for an operator/);
});

test("gated unreachable: the run fails closed with the client's error", async () => {
  const g = await startGated();
  const { connect } = await import("@nats-io/transport-node");
  const { Client } = await import("@gated/client");
  const nc = await connect({ servers: g.natsURL, maxReconnectAttempts: 0 });
  const tools = new GatedTools(new Client(nc), { tenant: "acme", agent: "openai-agents-agent" }, { catalogText: "tools: {drop_table: {class: destructive}}", reviewTimeoutMs: 3_000 });
  await g.kill();
  await g.stop();
  const ran: { tool: string; input: unknown }[] = [];
  const err = await runner.run(agent(new FakeModel("drop_table", { table: "users" }), tools, ran), "clean up").then(
    () => assert.fail("the run went on without gated"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ToolCallError, `${err}`);
  assert.ok(err.error instanceof TransportError || err.error instanceof NoVerdictError, `${err.error}`);
  assert.deepEqual(ran, []);
  await nc.close().catch(() => {});
});
