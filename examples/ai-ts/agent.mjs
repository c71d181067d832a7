// A Vercel AI SDK agent with three tools, which one line puts behind
// gated: list_services (a read) runs at once; restart_service and
// drop_table run only when gated approves the call's proposal.
//
//   node agent.mjs --nats-url nats://127.0.0.1:4222 [--device 7]
//
// The model is the AI SDK's own mock, scripted to call each tool once, so
// that the example runs with no key; a provider's model in its place is
// gated the same way.
import { parseArgs } from "node:util";

import { connect } from "@nats-io/transport-node";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { Client } from "@gated/client";
import { gateTools } from "@gated/client/ai";
import { GatedTools } from "@gated/client/integrations";

const { values: flags } = parseArgs({
  options: {
    "nats-url": { type: "string", default: process.env.GATED_NATS_URL ?? "nats://127.0.0.1:4222" },
    device: { type: "string", default: String(Date.now() % 1_000_000) },
  },
});
const device = Number(flags.device);

// The tools are simulated: they only say what they would do.
const tools = {
  list_services: tool({
    description: "List the services of a device",
    inputSchema: z.object({ device: z.number() }),
    execute: async ({ device }) => `nginx, postgres on device ${device}`,
  }),
  restart_service: tool({
    description: "Restart a service on a device",
    inputSchema: z.object({ device: z.number(), service: z.string() }),
    execute: async ({ device, service }) => `restarted ${service} on device ${device}`,
  }),
  drop_table: tool({
    description: "Drop a database table",
    inputSchema: z.object({ table: z.string() }),
    execute: async ({ table }) => `dropped ${table}`,
  }),
};

// The model's script: one tool call per step, then an answer.
const script = [
  ["list_services", { device }],
  ["restart_service", { device, service: "nginx" }],
  ["drop_table", { table: "sessions" }],
];
const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
let step = 0;
const model = new MockLanguageModelV3({
  doGenerate: async () => {
    const next = script[step++];
    if (!next) {
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop" }, usage, warnings: [] };
    }
    const [toolName, input] = next;
    return {
      content: [{ type: "tool-call", toolCallId: `call-${step}`, toolName, input: JSON.stringify(input) }],
      finishReason: { unified: "tool-calls" },
      usage,
      warnings: [],
    };
  },
});

const nc = await connect({ servers: flags["nats-url"] });
try {
  const gated = new GatedTools(
    new Client(nc),
    { tenant: "acme", agent: "ai-ops-agent", session: `s-${process.pid}`, operator: { id: "alice", roles: ["sre"] } },
    { catalogFile: new URL("catalog.yaml", import.meta.url).pathname, framework: "the Vercel AI SDK" },
  );
  const result = await generateText({
    model,
    tools: gateTools(gated, tools), // the one line
    prompt: "nginx on this device is wedged; also clear the sessions table",
    stopWhen: stepCountIs(script.length + 1),
  });
  for (const part of result.steps.flatMap((s) => s.content)) {
    if (part.type === "tool-result") {
      console.log(`ran      ${part.toolName}: ${part.output}`);
    } else if (part.type === "tool-error") {
      // A ToolRefusedError: the model read the same sentence.
      console.log(`refused  ${part.toolName}: ${part.error.message}`);
    }
  }
} finally {
  await nc.close();
}
