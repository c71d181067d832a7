// An agent with two tools, one read and one write, in front of which
// gated stands: the read runs at once, the write only when gated approves
// a proposal describing it.
//
//   node agent.mjs --nats-url nats://127.0.0.1:4222 [--tenant acme] [--device 7]
import { parseArgs } from "node:util";

import { connect } from "@nats-io/transport-node";
import { Client, ToolGate, VerdictError, gate } from "@gated/client";

const { values: flags } = parseArgs({
  options: {
    "nats-url": { type: "string", default: process.env.GATED_NATS_URL ?? "nats://127.0.0.1:4222" },
    tenant: { type: "string", default: "acme" },
    agent: { type: "string", default: "ts-ops-agent" },
    device: { type: "string", default: String(Date.now() % 1_000_000) },
    "timeout-ms": { type: "string", default: "90000" },
  },
});

// The tools themselves are simulated: they only say what they would do.
async function listServices(device) {
  return [`nginx on device ${device}`, `postgres on device ${device}`];
}
async function restartService({ device, service }) {
  return `restarted ${service} on device ${device}`;
}

const nc = await connect({ servers: flags["nats-url"] });
try {
  const gated = new ToolGate(new Client(nc), {
    tenant: flags.tenant,
    agent: flags.agent,
    session: `s-${process.pid}`,
    operator: { id: "alice", roles: ["sre"] },
  });

  // A read tool: it runs without a proposal. Its class is the runtime's
  // claim, made here in code, never by a model.
  const list = gate(gated, { action: "host_list_services", class: "read" }, listServices);

  // A write tool: each call becomes a proposal, and the tool runs only on
  // an approval that gated's stored verdict confirms.
  const restart = gate(
    gated,
    {
      action: "host_restart_service",
      class: "write",
      describe: ({ device, service }) => ({
        target: { device_id: Number(device), service, tags: ["production"] },
        reason: `${service} stopped answering health checks`,
        blast_radius: "single_device",
      }),
    },
    restartService,
  );

  const device = flags.device;
  const timeoutMs = Number(flags["timeout-ms"]);
  console.log(`read   host_list_services    ran, no proposal: ${(await list(device)).join(", ")}`);
  // The second restart of the same device comes moments after the first:
  // the default policy's target cooldown refuses it.
  for (let i = 0; i < 2; i++) {
    try {
      const out = await restart({ device, service: "nginx" }, { timeoutMs });
      console.log(`write  host_restart_service  approved: ${out}`);
    } catch (err) {
      if (!(err instanceof VerdictError)) {
        throw err; // no verdict, a forged one, or NATS failed: nothing ran
      }
      const v = err.verdict;
      const why = v.policy?.denies?.map((d) => d.rule).join(", ") || v.reason;
      console.log(`write  host_restart_service  ${v.outcome} at ${v.stage}, not run: ${why}`);
    }
  }
} finally {
  await nc.close();
}
