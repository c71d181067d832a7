// The Vercel AI SDK, driven by its own mock model (ai/test's
// MockLanguageModelV3) calling tools that @gated/client/ai puts behind a
// real gated serve: approved, rejected, held and decided by a signed
// operator decision, and gated unreachable.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { generateText, stepCountIs, tool, type ModelMessage } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { NoVerdictError, TransportError } from "@gated/client";
import { gateTools } from "@gated/client/ai";
import { ToolHeldError, ToolRefusedError } from "@gated/client/integrations";

import { startGated } from "../../gated.mjs";
import { freshDevice, startWorld, type World } from "./common.js";

let w: World;

before(async () => {
  w = await startWorld("vercel-ai");
});

after(async () => {
  await w?.stop();
});

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/**
 * A model that calls one tool with the given input, then answers with
 * text; prompts holds what it was sent each time.
 */
function model(toolName: string, input: unknown, prompts: ModelMessage[][]) {
  let step = 0;
  return new MockLanguageModelV3({
    doGenerate: async (opts) => {
      prompts.push(opts.prompt as ModelMessage[]);
      if (step++ === 0) {
        return {
          content: [{ type: "tool-call", toolCallId: `call-${toolName}`, toolName, input: JSON.stringify(input) }],
          finishReason: { unified: "tool-calls", raw: undefined },
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

/** The agent's tools; ran records each call that reached a tool. */
function opsTools(ran: { tool: string; input: unknown }[]) {
  return {
    restart_service: tool({
      description: "Restart a service on a device",
      inputSchema: z.object({ device: z.number(), service: z.string() }),
      execute: async (input) => {
        ran.push({ tool: "restart_service", input });
        return `restarted ${input.service} on ${input.device}`;
      },
    }),
    list_services: tool({
      description: "List a device's services",
      inputSchema: z.object({ device: z.number() }),
      execute: async (input) => {
        ran.push({ tool: "list_services", input });
        return ["nginx", "postgres"];
      },
    }),
    drop_table: tool({
      description: "Drop a database table",
      inputSchema: z.object({ table: z.string() }),
      execute: async (input) => {
        ran.push({ tool: "drop_table", input });
        return "dropped";
      },
    }),
    delete_dns_record: tool({
      description: "Delete a DNS record",
      inputSchema: z.object({ zone: z.string(), record: z.string() }),
      execute: async (input) => {
        ran.push({ tool: "delete_dns_record", input });
        return "deleted";
      },
    }),
  };
}

/** The text of what the model was told about its tool call in its second request. */
function toolReply(prompts: ModelMessage[][]): string {
  const second = prompts[1];
  assert.ok(second, "the model was not asked again after its tool call");
  const msg = second.find((m) => m.role === "tool");
  assert.ok(msg, "no tool message in the model's second request");
  return JSON.stringify(msg.content);
}

test("approved: the tool runs once with the reviewed input, through its grant, and its outcome is reported", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const prompts: ModelMessage[][] = [];
  const device = freshDevice();
  const before = w.reports.length;
  const r = await generateText({
    model: model("restart_service", { device, service: "nginx" }, prompts),
    tools: gateTools(w.tools(), opsTools(ran)),
    prompt: "nginx is wedged",
    stopWhen: stepCountIs(3),
  });
  assert.equal(r.text, "done");
  assert.deepEqual(ran, [{ tool: "restart_service", input: { device, service: "nginx" } }]);
  const last = w.seen.at(-1)!;
  assert.equal(last.p.action, "host_restart_service");
  assert.deepEqual(last.p.target, { device_id: device, service: "nginx", tags: ["production"] });
  assert.deepEqual(last.p.arguments, { device, service: "nginx" });
  assert.equal(last.v.outcome, "approved");
  const stored = await w.client.verdict("acme", last.p.id);
  assert.equal(stored.outcome, "approved");
  assert.deepEqual(
    w.reports.slice(before).map((o) => [o.proposal_id, o.status]),
    [
      [last.p.id, "started"],
      [last.p.id, "succeeded"],
    ],
  );
  assert.match(toolReply(prompts), /restarted nginx/);
});

test("a read runs at once, without a proposal", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const n = w.seen.length;
  await generateText({ model: model("list_services", { device: 7 }, []), tools: gateTools(w.tools(), opsTools(ran)), prompt: "what runs on 7?", stopWhen: stepCountIs(3) });
  assert.deepEqual(ran, [{ tool: "list_services", input: { device: 7 } }]);
  assert.equal(w.seen.length, n);
});

test("rejected: the tool does not run and the model reads gated's refusal", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const prompts: ModelMessage[][] = [];
  const r = await generateText({
    model: model("drop_table", { table: "users" }, prompts),
    tools: gateTools(w.tools(), opsTools(ran)),
    prompt: "clean up",
    stopWhen: stepCountIs(3),
  });
  assert.deepEqual(ran, []);
  const errors = r.steps.flatMap((s) => s.content).filter((c) => c.type === "tool-error");
  assert.equal(errors.length, 1);
  const err = errors[0]!.error;
  assert.ok(err instanceof ToolRefusedError && !(err instanceof ToolHeldError), `${err}`);
  assert.equal(err.refusal.outcome, "rejected");
  assert.equal(err.refusal.action, "drop_table");
  assert.match(toolReply(prompts), /gated did not approve drop_table: rejected/);
});

test("held: the call waits for the operator's signed approval, then runs", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const record = `r-${freshDevice()}`;
  const since = w.seen.length;
  const run = generateText({
    model: model("delete_dns_record", { zone: "example.org", record }, []),
    tools: gateTools(w.tools({ awaitOperator: true, operatorTimeoutMs: 60_000 }), opsTools(ran)),
    prompt: "retire the record",
    stopWhen: stepCountIs(3),
  });
  const id = await w.heldProposal("dns_delete_record", since);
  assert.deepEqual(ran, []);
  const { code, output } = await w.g.decide(id, "--approve", "--reason", "retire it");
  assert.equal(code, 0, output);
  const r = await run;
  assert.equal(r.text, "done");
  assert.deepEqual(ran, [{ tool: "delete_dns_record", input: { zone: "example.org", record } }]);
  const v = await w.client.verdict("acme", id);
  assert.equal(v.stage, "operator");
  assert.equal(v.operator_decision?.decision, "approve");
});

test("held and rejected by the operator: the tool never runs", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const prompts: ModelMessage[][] = [];
  const since = w.seen.length;
  const run = generateText({
    model: model("delete_dns_record", { zone: "example.org", record: `r-${freshDevice()}` }, prompts),
    tools: gateTools(w.tools({ awaitOperator: true, operatorTimeoutMs: 60_000 }), opsTools(ran)),
    prompt: "retire the record",
    stopWhen: stepCountIs(3),
  });
  const id = await w.heldProposal("dns_delete_record", since);
  const { code, output } = await w.g.decide(id, "--reject", "--reason", "not in a change window");
  assert.equal(code, 0, output);
  await run;
  assert.deepEqual(ran, []);
  assert.match(toolReply(prompts), /gated did not approve delete_dns_record: rejected at stage operator/);
});

test("held without waiting: the model reads that an operator decides", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const prompts: ModelMessage[][] = [];
  const r = await generateText({
    model: model("delete_dns_record", { zone: "example.org", record: `r-${freshDevice()}` }, prompts),
    tools: gateTools(w.tools(), opsTools(ran)),
    prompt: "retire the record",
    stopWhen: stepCountIs(3),
  });
  assert.deepEqual(ran, []);
  const err = r.steps.flatMap((s) => s.content).find((c) => c.type === "tool-error")?.error;
  assert.ok(err instanceof ToolHeldError, `${err}`);
  assert.match(toolReply(prompts), /gated holds delete_dns_record for an operator/);
});

test("gated unreachable: the call fails closed with the client's error", async () => {
  const g = await startGated();
  const { connect } = await import("@nats-io/transport-node");
  const nc = await connect({ servers: g.natsURL, maxReconnectAttempts: 0 });
  const { Client } = await import("@gated/client");
  const { GatedTools } = await import("@gated/client/integrations");
  const tools = new GatedTools(new Client(nc), { tenant: "acme", agent: "vercel-ai-agent" }, { catalogText: "tools: {drop_table: {class: destructive}}", reviewTimeoutMs: 3_000 });
  await g.kill();
  await g.stop();
  const ran: { tool: string; input: unknown }[] = [];
  const r = await generateText({
    model: model("drop_table", { table: "users" }, []),
    tools: gateTools(tools, opsTools(ran)),
    prompt: "clean up",
    stopWhen: stepCountIs(3),
  });
  assert.deepEqual(ran, []);
  const err = r.steps.flatMap((s) => s.content).find((c) => c.type === "tool-error")?.error;
  assert.ok(err instanceof TransportError || err instanceof NoVerdictError, `${err}`);
  await nc.close().catch(() => {});
});
