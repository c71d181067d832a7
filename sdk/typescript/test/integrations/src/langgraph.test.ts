// LangGraph.js, driven by a chat model built on @langchain/core's
// BaseChatModel that calls the tools of a ToolNode, which
// @gated/client/langgraph puts behind a real gated serve: a held call is
// the graph's interrupt, resumed by the operator's signed decision.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";

import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, HumanMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import { tool } from "@langchain/core/tools";
import { Command, END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { z } from "zod";

import { Client } from "@gated/client";
import { gateGraphTools, type HeldInterrupt } from "@gated/client/langgraph";
import { GatedTools } from "@gated/client/integrations";

import { startGated } from "../../gated.mjs";
import { freshDevice, startWorld, type World } from "./common.js";

let w: World;

before(async () => {
  w = await startWorld("langgraph");
});

after(async () => {
  await w?.stop();
});

/** A chat model that calls one tool, then, once it has the tool's answer, says "done". */
class ScriptedModel extends BaseChatModel {
  readonly seen: BaseMessage[][] = [];
  constructor(
    private readonly toolName: string,
    private readonly args: Record<string, unknown>,
  ) {
    super({});
  }
  _llmType(): string {
    return "scripted";
  }
  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    this.seen.push(messages);
    const answered = messages.some((m) => ToolMessage.isInstance(m));
    const message = answered
      ? new AIMessage("done")
      : new AIMessage({ content: "", tool_calls: [{ id: `call-${this.toolName}`, name: this.toolName, args: this.args, type: "tool_call" }] });
    return { generations: [{ text: typeof message.content === "string" ? message.content : "", message }] };
  }
  /** What the tool answered, as the model read it. */
  toolAnswer(): ToolMessage {
    const last = this.seen.at(-1) ?? [];
    const m = last.find((x) => ToolMessage.isInstance(x));
    assert.ok(m, "the model never read a tool's answer");
    return m as ToolMessage;
  }
}

function opsTools(ran: { tool: string; input: unknown }[]) {
  return [
    tool(
      async (input) => {
        ran.push({ tool: "restart_service", input });
        return `restarted ${input.service} on ${input.device}`;
      },
      { name: "restart_service", description: "Restart a service on a device", schema: z.object({ device: z.number(), service: z.string() }) },
    ),
    tool(
      async (input) => {
        ran.push({ tool: "drop_table", input });
        return "dropped";
      },
      { name: "drop_table", description: "Drop a database table", schema: z.object({ table: z.string() }) },
    ),
    tool(
      async (input) => {
        ran.push({ tool: "delete_dns_record", input });
        return "deleted";
      },
      { name: "delete_dns_record", description: "Delete a DNS record", schema: z.object({ zone: z.string(), record: z.string() }) },
    ),
  ];
}

function graph(model: ScriptedModel, tools: GatedTools, ran: { tool: string; input: unknown }[]) {
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", async (s: typeof MessagesAnnotation.State) => ({ messages: [await model.invoke(s.messages)] }))
    .addNode("tools", new ToolNode(gateGraphTools(tools, opsTools(ran))))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", toolsCondition, ["tools", END])
    .addEdge("tools", "agent")
    .compile({ checkpointer: new MemorySaver() });
}

const thread = () => ({ configurable: { thread_id: randomUUID() } });

test("approved: the tool runs once with the reviewed arguments, through its grant, and its outcome is reported", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const device = freshDevice();
  const model = new ScriptedModel("restart_service", { device, service: "nginx" });
  const before = w.reports.length;
  const out = await graph(model, w.tools(), ran).invoke({ messages: [new HumanMessage("nginx is wedged")] }, thread());
  assert.equal(out.messages.at(-1)?.content, "done");
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
  assert.match(String(model.toolAnswer().content), /restarted nginx/);
});

test("rejected: the tool does not run and the model reads gated's refusal", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const model = new ScriptedModel("drop_table", { table: "users" });
  await graph(model, w.tools(), ran).invoke({ messages: [new HumanMessage("clean up")] }, thread());
  assert.deepEqual(ran, []);
  assert.match(String(model.toolAnswer().content), /gated did not approve drop_table: rejected at stage review/);
});

/** Runs the graph until gated's hold interrupts it; returns what the interrupt carries. */
async function untilHeld(app: ReturnType<typeof graph>, cfg: ReturnType<typeof thread>): Promise<HeldInterrupt> {
  await app.invoke({ messages: [new HumanMessage("retire the record")] }, cfg);
  const state = await app.getState(cfg);
  const interrupts = state.tasks.flatMap((t) => t.interrupts);
  assert.equal(interrupts.length, 1, "the graph was not interrupted");
  const held = interrupts[0]!.value as HeldInterrupt;
  assert.equal(held.gated, "held");
  assert.equal(held.action, "dns_delete_record");
  assert.equal(held.rule, "hold_listed_action");
  return held;
}

test("held: the graph interrupts and, resumed, runs the call on the operator's signed approval", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const record = `r-${freshDevice()}`;
  const model = new ScriptedModel("delete_dns_record", { zone: "example.org", record });
  const app = graph(model, w.tools(), ran);
  const cfg = thread();
  const held = await untilHeld(app, cfg);
  assert.deepEqual(ran, []);
  const { code, output } = await w.g.decide(held.proposal_id, "--approve", "--reason", "retire it");
  assert.equal(code, 0, output);
  const out = await app.invoke(new Command({ resume: "decided" }), cfg);
  assert.equal(out.messages.at(-1)?.content, "done");
  assert.deepEqual(ran, [{ tool: "delete_dns_record", input: { zone: "example.org", record } }]);
  const v = await w.client.verdict("acme", held.proposal_id);
  assert.equal(v.operator_decision?.decision, "approve");
});

test("held and rejected by the operator: the tool never runs and the model reads why", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const model = new ScriptedModel("delete_dns_record", { zone: "example.org", record: `r-${freshDevice()}` });
  const app = graph(model, w.tools(), ran);
  const cfg = thread();
  const held = await untilHeld(app, cfg);
  const { code, output } = await w.g.decide(held.proposal_id, "--reject", "--reason", "not in a change window");
  assert.equal(code, 0, output);
  await app.invoke(new Command({ resume: "approved, honest" }), cfg);
  assert.deepEqual(ran, []);
  assert.match(String(model.toolAnswer().content), /gated did not approve delete_dns_record: rejected at stage operator: .*not in a change window/);
});

test("held and resumed before any decision: the resume value approves nothing", async () => {
  const ran: { tool: string; input: unknown }[] = [];
  const model = new ScriptedModel("delete_dns_record", { zone: "example.org", record: `r-${freshDevice()}` });
  const app = graph(model, w.tools({ operatorTimeoutMs: 1_500 }), ran);
  const cfg = thread();
  await untilHeld(app, cfg);
  await app.invoke(new Command({ resume: { approved: true } }), cfg);
  assert.deepEqual(ran, []);
  const answer = model.toolAnswer();
  assert.equal(answer.status, "error");
  assert.match(String(answer.content), /no verdict/i);
});

test("gated unreachable: the call fails closed with the client's error", async () => {
  const g = await startGated();
  const { connect } = await import("@nats-io/transport-node");
  const nc = await connect({ servers: g.natsURL, maxReconnectAttempts: 0 });
  const tools = new GatedTools(new Client(nc), { tenant: "acme", agent: "langgraph-agent" }, { catalogText: "tools: {drop_table: {class: destructive}}", reviewTimeoutMs: 3_000 });
  await g.kill();
  await g.stop();
  const ran: { tool: string; input: unknown }[] = [];
  const model = new ScriptedModel("drop_table", { table: "users" });
  await graph(model, tools, ran).invoke({ messages: [new HumanMessage("clean up")] }, thread());
  assert.deepEqual(ran, []);
  const answer = model.toolAnswer();
  assert.equal(answer.status, "error");
  assert.match(String(answer.content), /connection|no verdict/i);
  await nc.close().catch(() => {});
});
