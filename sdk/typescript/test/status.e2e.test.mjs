// A proposal's status through a real `gated serve`, its policy and its
// reviewer process: every stage, in order, before the verdict.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BadProposalError, Client, StatusError } from "../dist/index.js";
import { example, natsConnect, startGated } from "./gated.mjs";

let g;
let nc;
let client;
const run = Date.now().toString(36);

before(async () => {
  g = await startGated();
  nc = await natsConnect(g.natsURL);
  client = new Client(nc);
});

after(async () => {
  await nc?.close();
  await g?.stop();
});

test("onStatus sees every stage of a reviewed proposal before the verdict", async () => {
  const p = example("approved.json", { id: `ts-status-${run}`, target: { device_id: 801, service: "nginx" } });
  const seen = [];
  const v = await client.propose(p, {
    timeoutMs: 60_000,
    onStatus: (st) => {
      assert.ok(!(st instanceof StatusError), `${st}`);
      seen.push(st);
    },
  });
  assert.equal(v.outcome, "approved");
  assert.deepEqual(
    seen.map((s) => s.stage),
    ["received", "policy_decided", "review_started", "decided"],
  );
  assert.equal(seen[2].reviewer, v.reviews[0].persona);
  assert.ok(seen[2].deadline);
  assert.equal(seen[3].verdict.outcome, "approved");
  assert.equal(seen[3].verdict.audit_seq, v.audit_seq);
});

test("watch is an async iterator of the stages, and goes on after a malformed event", async () => {
  const p = example("approved.json", { id: `ts-watch-${run}`, target: { device_id: 802, service: "nginx" } });
  const watch = await client.watch("acme", p.id);
  nc.publish(`gated.status.acme.${p.id}`, "not json");
  const verdict = client.propose(p, { timeoutMs: 60_000 });
  const stages = [];
  const errors = [];
  for (;;) {
    let r;
    try {
      r = await watch.next();
    } catch (err) {
      assert.ok(err instanceof StatusError, `${err}`);
      errors.push(err.field);
      continue;
    }
    assert.equal(r.done, false);
    stages.push(r.value.stage);
    if (r.value.stage === "decided") {
      break;
    }
  }
  await watch.close();
  assert.deepEqual(errors, [""]);
  assert.deepEqual(stages, ["received", "policy_decided", "review_started", "decided"]);
  assert.equal((await verdict).outcome, "approved");
  assert.deepEqual(await watch.next(), { value: undefined, done: true });
});

test("watch refuses tokens that are not a tenant and an id", async () => {
  await assert.rejects(client.watch(">", "p1"), BadProposalError);
  await assert.rejects(client.watch("acme", "p.1"), BadProposalError);
});

/** gated_status_events_total on gated's /metrics: the statuses sent. */
async function statusEventsTotal() {
  const text = await (await fetch(`${g.httpURL}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("gated_status_events_total "));
  assert.ok(line, "no gated_status_events_total on /metrics");
  return Number(line.split(" ")[1]);
}

test("a proposal nobody follows sends no status; onStatus sets Gated-Status and gets every stage", async () => {
  const listener = await natsConnect(g.natsURL);
  const headers = {};
  listener.subscribe("gated.proposals.acme.>", {
    callback: (err, m) => {
      if (!err) {
        headers[JSON.parse(new TextDecoder().decode(m.data)).id] = m.headers?.get("Gated-Status") ?? "";
      }
    },
  });
  await listener.flush();
  try {
    const before = await statusEventsTotal();
    const quiet = example("approved.json", { id: `ts-quiet-${run}`, target: { device_id: 803, service: "nginx" } });
    assert.equal((await client.propose(quiet, { timeoutMs: 60_000 })).outcome, "approved");
    assert.equal(await statusEventsTotal(), before);
    const loud = example("approved.json", { id: `ts-loud-${run}`, target: { device_id: 804, service: "nginx" } });
    const seen = [];
    await client.propose(loud, { timeoutMs: 60_000, onStatus: (st) => seen.push(st.stage) });
    assert.deepEqual(seen, ["received", "policy_decided", "review_started", "decided"]);
    assert.equal(await statusEventsTotal(), before + 4);
    await listener.flush();
    assert.deepEqual(headers, { [quiet.id]: "", [loud.id]: "1" });
  } finally {
    await listener.close();
  }
});

test("watch asks gated on gated.watch.<tenant>.<id> before it resolves", async () => {
  const listener = await natsConnect(g.natsURL);
  const asks = [];
  listener.subscribe("gated.watch.>", { callback: (err, m) => !err && asks.push([m.subject, Boolean(m.reply)]) });
  await listener.flush();
  try {
    const watch = await client.watch("acme", `ts-asked-${run}`);
    await listener.flush();
    assert.deepEqual(asks, [[`gated.watch.acme.ts-asked-${run}`, true]]);
    await watch.close();
  } finally {
    await listener.close();
  }
});
