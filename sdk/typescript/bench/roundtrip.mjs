// The policy-path round trip of the TypeScript client: N sequential
// proposals (c=1) that the policy decides without a reviewer, each timed
// from propose() to its trusted answer (an approval is confirmed with the
// stored verdict, as in production). Prints one JSON line:
//   {"lang":"typescript","n":..,"p50_ms":..,"p99_ms":..,"per_sec":..}
//
// Environment: GATED_NATS_URL (default nats://127.0.0.1:4222), TENANT
// (default acme), N (default 1000), KIND read (approved at policy, the
// default) or denied (asks to skip review: rejected at policy).
import { connect } from "@nats-io/transport-node";

import { Client, VerdictError } from "../dist/index.js";

const url = process.env.GATED_NATS_URL || "nats://127.0.0.1:4222";
const tenant = process.env.TENANT || "acme";
const n = Number(process.env.N || 1000);
const kind = process.env.KIND || "read";
if (!Number.isInteger(n) || n < 1 || !["read", "denied"].includes(kind)) {
  console.error("bench/roundtrip: N must be a positive integer and KIND read or denied");
  process.exit(2);
}

const run = `tsbench-${Date.now().toString(36)}-${process.pid}`;
function proposal(i) {
  const base = {
    id: `${run}-${i}`,
    tenant,
    requested_by: { agent: "bench-ts", session: run },
    operator: { id: "bench", roles: ["sre"] },
    reason: "benchmark",
  };
  return kind === "read"
    ? { ...base, action: "host_list_services", class: "read", target: { device_id: i } }
    : { ...base, action: "host_restart_service", class: "write", blast_radius: "single_device", target: { device_id: i, service: "nginx" }, flags: { skip_review: true } };
}

async function once(client, i) {
  try {
    await client.propose(proposal(i), { timeoutMs: 30_000 });
  } catch (err) {
    if (!(err instanceof VerdictError)) {
      throw err; // no verdict, or an untrustworthy one: not a measurement
    }
  }
}

// noAsyncTraces: nats.js then skips capturing a stack trace per request
// (two per proposal), as a fleet tuned for speed would.
const nc = await connect({ servers: url, noAsyncTraces: true });
try {
  const client = new Client(nc);
  const warm = Math.min(50, Math.ceil(n / 10));
  for (let i = 0; i < warm; i++) {
    await once(client, -1 - i);
  }
  const lat = new Float64Array(n);
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await once(client, i);
    lat[i] = Number(process.hrtime.bigint() - t0) / 1e6;
  }
  const total = Number(process.hrtime.bigint() - start) / 1e9;
  lat.sort();
  const q = (p) => lat[Math.min(n - 1, Math.ceil(p * n) - 1)];
  const r3 = (x) => Math.round(x * 1000) / 1000;
  console.log(JSON.stringify({ lang: "typescript", n, p50_ms: r3(q(0.5)), p99_ms: r3(q(0.99)), per_sec: r3(n / total) }));
} finally {
  await nc.close();
}
