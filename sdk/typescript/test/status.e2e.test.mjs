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
