// A LangGraph.js agent (a model node and a ToolNode) with three tools,
// which one line puts behind gated: list_services (a read) runs at once;
// restart_service and drop_table run only when gated approves the call's
// proposal. A call gated holds for an operator interrupts the graph; once
// the operator has decided (gated operator decide, or the console), resume
// it with Command({ resume }) and the call runs only if gated's stored
// verdict is an approval.
//
//   node agent.mjs --nats-url nats://127.0.0.1:4222 [--device 7]
//
// The model is scripted (a BaseChatModel of @langchain/core) to call each
// tool once, so that the example runs with no key; a provider's chat model
// in its place is gated the same way.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { Command, END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { connect } from "@nats-io/transport-node";
import { z } from "zod";
import { Client } from "@gated/client";
import { GatedTools } from "@gated/client/integrations";
import { gateGraphTools } from "@gated/client/langgraph";

const { values: flags } = parseArgs({
  options: {
    "nats-url": { type: "string", default: process.env.GATED_NATS_URL ?? "nats://127.0.0.1:4222" },
    device: { type: "string", default: String(Date.now() % 1_000_000) },
  },
});
const device = Number(flags.device);

// The tools are simulated: they only say what they would do.
const tools = [
  tool(async ({ device }) => `nginx, postgres on device ${device}`, {
    name: "list_services",
    description: "List the services of a device",
    schema: z.object({ device: z.number() }),
  }),
  tool(async ({ device, service }) => `restarted ${service} on device ${device}`, {
    name: "restart_service",
    description: "Restart a service on a device",
    schema: z.object({ device: z.number(), service: z.string() }),
  }),
  tool(async ({ table }) => `dropped ${table}`, {
    name: "drop_table",
    description: "Drop a database table",
    schema: z.object({ table: z.string() }),
  }),
];

/** The model's script: one tool call per turn, then an answer. It prints what each call came to, as it reads it. */
class ScriptedModel extends BaseChatModel {
  script = [
    ["list_services", { device }],
    ["restart_service", { device, service: "nginx" }],
    ["drop_table", { table: "sessions" }],
  ];
  turn = 0;
  _llmType() {
    return "scripted";
  }
  async _generate(messages) {
    const answer = messages.at(-1);
    if (ToolMessage.isInstance(answer)) {
      console.log(`${answer.name.padEnd(16)} ${answer.content}`);
    }
    const next = this.script[this.turn++];
    const message = next
      ? new AIMessage({ content: "", tool_calls: [{ id: `call-${this.turn}`, name: next[0], args: next[1], type: "tool_call" }] })
      : new AIMessage("done");
    return { generations: [{ text: "", message }] };
  }
}

const nc = await connect({ servers: flags["nats-url"] });
try {
  const gated = new GatedTools(
    new Client(nc),
    { tenant: "acme", agent: "langgraph-ops-agent", session: `s-${process.pid}`, operator: { id: "alice", roles: ["sre"] } },
    { catalogFile: new URL("catalog.yaml", import.meta.url).pathname, framework: "LangGraph.js" },
  );
  const model = new ScriptedModel({});
  const app = new StateGraph(MessagesAnnotation)
    .addNode("agent", async (s) => ({ messages: [await model.invoke(s.messages)] }))
    .addNode("tools", new ToolNode(gateGraphTools(gated, tools))) // the one line
    .addEdge(START, "agent")
    .addConditionalEdges("agent", toolsCondition, ["tools", END])
    .addEdge("tools", "agent")
    .compile({ checkpointer: new MemorySaver() });
  const config = { configurable: { thread_id: randomUUID() } };
  await app.invoke({ messages: [new HumanMessage("nginx on this device is wedged; also clear the sessions table")] }, config);
  for (;;) {
    const held = (await app.getState(config)).tasks.flatMap((t) => t.interrupts);
    if (held.length === 0) {
      break;
    }
    for (const { value } of held) {
      console.log(`held             ${value.tool}: proposal ${value.tenant}.${value.proposal_id} waits for an operator (${value.reason})`);
    }
    // Resuming waits for the operator's decision as gated stores it; the resume value decides nothing.
    await app.invoke(new Command({ resume: "operator asked" }), config);
  }
} finally {
  await nc.close();
}
