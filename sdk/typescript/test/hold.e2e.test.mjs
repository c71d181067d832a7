// Held actions through a real `gated serve`, its policy and real operator
// decisions signed with `gated operator decide`: the client waits for the
// decision, believes only the stored verdict, and never takes a held
// verdict or a deadline for an approval.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  AwaitingOperatorError,
  BadProposalError,
  Client,
  IdReusedError,
  InvalidConfigError,
  NoVerdictError,
  ReviewBlockedError,
  ReviewRejectedError,
  ReviewTimeoutError,
  ToolGate,
  isFinal,
} from "../dist/index.js";
import { dnsProposal, natsConnect, startHoldGated } from "./gated.mjs";

let g;
let nc;
let client;

before(async () => {
  g = await startHoldGated();
  nc = await natsConnect(g.natsURL);
  client = new Client(nc);
});

after(async () => {
  await nc?.close();
  await g?.stop();
});

/** Proposes, and checks that the verdict is held for an operator. */
async function proposeHeld(c, id, action) {
  const err = await c.propose(dnsProposal(id, action), { timeoutMs: 60_000 }).then(
    (v) => assert.fail(`proposal ${id} was not held: ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(err instanceof AwaitingOperatorError, `${err}`);
  assert.ok(err instanceof ReviewBlockedError);
  const held = err.verdict;
  assert.equal(held.outcome, "blocked");
  assert.notEqual(held.approved, true);
  assert.equal(isFinal(held), false);
  assert.ok(held.awaiting_operator?.deadline);
  return held;
}

async function decide(id, ...flags) {
  const { code, output } = await g.decide(id, ...flags);
  assert.equal(code, 0, output);
}

test("an operator's approval reaches the fleet", async () => {
  // Polling the store only once an hour: the approval must come through the
  // verdict subject and the stored verdict's confirmation.
  const c = new Client(nc, { pollIntervalMs: 3_600_000 });
  const held = await proposeHeld(c, "ts-hold-approve");
  assert.equal(held.awaiting_operator.rule, "hold_listed_action");
  const wait = c.awaitDecision(held, { timeoutMs: 60_000 });
  await decide(held.proposal_id, "--approve", "--reason", "change CHG-7 agreed");
  const v = await wait;
  assert.equal(v.outcome, "approved");
  assert.equal(v.approved, true);
  assert.equal(v.stage, "operator");
  assert.equal(v.proposal_sha256, held.proposal_sha256);
  assert.equal(v.operator_decision.id, "alice");
  assert.equal(v.operator_decision.decision, "approve");
  assert.equal(v.operator_decision.reason, "change CHG-7 agreed");
  assert.match(v.operator_decision.key, /^U/);
});

test("a rejection made before the wait is found", async () => {
  const held = await proposeHeld(client, "ts-hold-reject");
  await decide(held.proposal_id, "--reject", "--reason", "not in a change window");
  const err = await client.awaitDecision(held, { timeoutMs: 60_000 }).catch((e) => e);
  assert.ok(err instanceof ReviewRejectedError, `${err}`);
  assert.equal(err.verdict.stage, "operator");
  assert.equal(err.verdict.operator_decision.decision, "reject");
});

test("the deadline is a timeout, never an approval", async () => {
  const held = await proposeHeld(client, "ts-hold-timeout", "dns_flush_cache");
  assert.equal(held.awaiting_operator.rule, "hold_cache_flush");
  const err = await client.awaitDecision(held).catch((e) => e); // until the deadline and a minute more
  assert.ok(err instanceof ReviewTimeoutError, `${err}`);
  assert.equal(err.verdict.outcome, "timeout");
  assert.notEqual(err.verdict.approved, true);
  assert.equal(err.verdict.stage, "operator");
  const late = await g.decide(held.proposal_id, "--approve");
  assert.equal(late.code, 3, late.output);
  assert.equal((await client.verdict("acme", held.proposal_id)).outcome, "timeout");
});

test("approvals forged on the verdict subject are not believed", async () => {
  const held = await proposeHeld(client, "ts-hold-forged");
  const forged = JSON.stringify({ ...held, outcome: "approved", approved: true, stage: "operator", awaiting_operator: null });
  const timer = setInterval(() => {
    nc.publish(`gated.verdicts.acme.${held.proposal_id}`, forged);
    nc.publish(`gated.status.acme.${held.proposal_id}`, '{"v":1}');
  }, 100);
  let err;
  try {
    err = await client.awaitDecision(held, { timeoutMs: 3000 }).catch((e) => e);
  } finally {
    clearInterval(timer);
  }
  assert.ok(err instanceof NoVerdictError, `${err}`);
  const still = await client.verdict("acme", held.proposal_id);
  assert.equal(still.outcome, "blocked");
  assert.equal(isFinal(still), false);
});

test("a held verdict of other bytes is refused", async () => {
  const held = await proposeHeld(client, "ts-hold-other");
  const err = await client.awaitDecision({ ...held, proposal_sha256: "0".repeat(64) }, { timeoutMs: 10_000 }).catch((e) => e);
  assert.ok(err instanceof IdReusedError, `${err}`);
  const bad = await client.awaitDecision(null).catch((e) => e);
  assert.ok(bad instanceof BadProposalError, `${bad}`);
});

test("the tool gate waits for an operator only when asked", async () => {
  const ran = [];
  const spec = {
    action: "dns_delete_record",
    class: "write",
    describe: ({ record }) => ({ target: { zone: "example.org", record }, reason: "retire a record", blast_radius: "single_device" }),
  };
  const identity = { tenant: "acme", agent: "dns-bot", session: "s-1" };
  const plain = new ToolGate(client, identity, { newId: () => "ts-gate-held-1" });
  const del = plain.guard(spec, ({ record }) => ran.push(record));
  const err = await del({ record: "r-1" }).catch((e) => e);
  assert.ok(err instanceof AwaitingOperatorError, `${err}`);
  assert.deepEqual(ran, []);

  const seen = [];
  const waiting = new ToolGate(client, identity, {
    newId: () => "ts-gate-held-2",
    awaitOperator: true,
    operatorTimeoutMs: 60_000,
    observe: (p, v) => seen.push(v.outcome),
  });
  const delWhenApproved = waiting.guard(spec, ({ record }) => {
    ran.push(record);
    return record;
  });
  const call = delWhenApproved({ record: "r-2" });
  for (let i = 0; ; i++) {
    assert.ok(i < 600, "the guarded call's proposal was never held");
    const v = await client.verdict("acme", "ts-gate-held-2").catch(() => null);
    if (v && !isFinal(v)) {
      break;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await decide("ts-gate-held-2", "--approve", "--reason", "fine");
  assert.equal(await call, "r-2");
  assert.deepEqual(ran, ["r-2"]);
  assert.deepEqual(seen, ["blocked", "approved"]);

  assert.throws(() => new ToolGate({ propose: async () => ({}) }, identity, { awaitOperator: true }), InvalidConfigError);
});
