// An OpenAI Agents JS agent with three function tools, which one line
// puts behind gated: list_services (a read) runs at once; restart_service
// and drop_table run only when gated approves the call's proposal, and a
// call gated holds for an operator stops the run until the operator
// decides (decideApprovals), then the run resumes.
//
//   node agent.mjs --nats-url nats://127.0.0.1:4222 [--device 7]
//
// The model is scripted (the SDK's Model interface) to call each tool once,
// so that the example runs with no key; an OpenAI model in its place is
// gated the same way.
import { parseArgs } from "node:util";

import { connect } from "@nats-io/transport-node";
import { Agent, Runner, setTracingDisabled, tool, Usage } from "@openai/agents";
import { z } from "zod";
import { Client } from "@gated/client";
import { GatedTools } from "@gated/client/integrations";
import { decideApprovals, gateAgentTools } from "@gated/client/openai-agents";

const { values: flags } = parseArgs({
  options: {
    "nats-url": { type: "string", default: process.env.GATED_NATS_URL ?? "nats://127.0.0.1:4222" },
    device: { type: "string", default: String(Date.now() % 1_000_000) },
  },
});
const device = Number(flags.device);
setTracingDisabled(true);

// The tools are simulated: they only say what they would do.
const tools = [
  tool({
    name: "list_services",
    description: "List the services of a device",
    parameters: z.object({ device: z.number() }),
    execute: async ({ device }) => `nginx, postgres on device ${device}`,
  }),
  tool({
    name: "restart_service",
    description: "Restart a service on a device",
    parameters: z.object({ device: z.number(), service: z.string() }),
    execute: async ({ device, service }) => `restarted ${service} on device ${device}`,
  }),
  tool({
    name: "drop_table",
    description: "Drop a database table",
    parameters: z.object({ table: z.string() }),
    execute: async ({ table }) => `dropped ${table}`,
  }),
];

// The model's script: one tool call per turn, then an answer. It prints
// what each tool call came to, as the model reads it.
const script = [
  ["list_services", { device }],
  ["restart_service", { device, service: "nginx" }],
  ["drop_table", { table: "sessions" }],
];
const model = {
  turn: 0,
  async getResponse(request) {
    const input = Array.isArray(request.input) ? request.input : [];
    const answer = input.filter((i) => i.type === "function_call_result").at(-1);
    if (answer) {
      console.log(`${answer.name.padEnd(16)} ${answer.output.text ?? JSON.stringify(answer.output)}`);
    }
    const next = script[this.turn++];
    if (!next) {
      return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
    }
    const [name, args] = next;
    return { usage: new Usage(), output: [{ type: "function_call", callId: `call-${this.turn}`, name, arguments: JSON.stringify(args), status: "completed" }] };
  },
  async *getStreamedResponse() {
    throw new Error("not streamed");
  },
};

const nc = await connect({ servers: flags["nats-url"] });
try {
  const gated = new GatedTools(
    new Client(nc),
    { tenant: "acme", agent: "agents-ops-agent", session: `s-${process.pid}`, operator: { id: "alice", roles: ["sre"] } },
    { catalogFile: new URL("catalog.yaml", import.meta.url).pathname, framework: "OpenAI Agents JS" },
  );
  const agent = new Agent({ name: "ops", instructions: "Keep the fleet running.", model, tools: gateAgentTools(gated, tools) }); // the one line
  const runner = new Runner();
  let result = await runner.run(agent, "nginx on this device is wedged; also clear the sessions table");
  // A call gated holds for an operator stops the run: wait for the
  // operator's decision (gated operator decide, or the console), then resume.
  while (result.interruptions?.length) {
    await decideApprovals(gated, result);
    result = await runner.run(agent, result.state);
  }
} finally {
  await nc.close();
}
