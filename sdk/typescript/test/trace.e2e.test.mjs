// W3C trace context on the proposals the client publishes, against a real
// `gated serve`: a call's traceparent, or the propagator hook's, goes in
// the proposal's headers; without either there is none.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";

import { Client, InvalidConfigError, traceHeaders, validTraceparent } from "../dist/index.js";
import { natsConnect, repoRoot, startGated } from "./gated.mjs";

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const wellFormed = /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/;

function approvable(id, device) {
  const p = JSON.parse(readFileSync(`${repoRoot}/examples/proposals/approved.json`, "utf8"));
  return { ...p, id, target: { device_id: device, service: "nginx", tags: ["production"] } };
}

let g;
let nc;
const run = Date.now().toString(36);

before(async () => {
  g = await startGated();
  nc = await natsConnect(g.natsURL);
});

after(async () => {
  await nc?.close();
  await g?.stop();
});

// published proposes p with client and opts and returns the headers of the
// message as it went out.
async function published(client, p, opts = {}) {
  const sub = nc.subscribe(`gated.proposals.acme.${p.action}`);
  await nc.flush();
  const seen = (async () => {
    for await (const m of sub) {
      if (m.headers?.get("Nats-Msg-Id") === `acme.${p.id}`) {
        return m.headers;
      }
    }
    return undefined;
  })();
  const v = await client.propose(p, { timeoutMs: 60_000, ...opts });
  assert.equal(v.outcome, "approved");
  const h = await seen.finally(() => sub.unsubscribe());
  sub.unsubscribe();
  return h;
}

test("a call's trace context goes with the proposal", async () => {
  const h = await published(new Client(nc), approvable(`ts-traced-${run}`, 9401), { trace: { traceparent, tracestate: "vendor=1" } });
  assert.equal(h.get("traceparent"), traceparent);
  assert.equal(h.get("tracestate"), "vendor=1");
});

test("the propagator hook's trace context goes with the proposal", async () => {
  const client = new Client(nc, { propagator: (c) => { c.traceparent = traceparent; } });
  const h = await published(client, approvable(`ts-hooked-${run}`, 9402));
  assert.match(h.get("traceparent"), wellFormed);
  assert.equal(h.get("traceparent"), traceparent);
});

test("without a trace context the proposal carries none", async () => {
  const h = await published(new Client(nc), approvable(`ts-untraced-${run}`, 9403));
  assert.equal(h.has("traceparent"), false);
  assert.equal(h.has("tracestate"), false);
});

test("a malformed traceparent of a call is refused before anything is published", async () => {
  const client = new Client(nc);
  await assert.rejects(
    client.propose(approvable(`ts-badtrace-${run}`, 9404), { trace: { traceparent: "00-zz-00-01" } }),
    (err) => err instanceof InvalidConfigError && /traceparent/.test(err.message),
  );
});

test("traceHeaders and validTraceparent", () => {
  const cases = [
    { note: "valid", tp: traceparent, valid: true },
    { note: "all-zero trace id", tp: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", valid: false },
    { note: "all-zero span id", tp: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", valid: false },
    { note: "version ff", tp: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", valid: false },
    { note: "upper case", tp: traceparent.toUpperCase(), valid: false },
    { note: "short", tp: "00-4bf9-00f0-01", valid: false },
  ];
  for (const c of cases) {
    assert.equal(validTraceparent(c.tp), c.valid, c.note);
  }
  // A hook that gives a malformed traceparent, or throws, adds nothing.
  assert.deepEqual(traceHeaders(undefined, (c) => { c.traceparent = "garbage"; }), {});
  assert.deepEqual(traceHeaders(undefined, () => { throw new Error("boom"); }), {});
  assert.deepEqual(traceHeaders(undefined, undefined), {});
  // A tracestate with a line break is dropped, the traceparent kept.
  assert.deepEqual(traceHeaders({ traceparent, tracestate: "a=1\r\nx: y" }, undefined), { traceparent });
});
