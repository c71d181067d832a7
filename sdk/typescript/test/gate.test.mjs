// The tool gate's own checks, with a Proposer that answers as told (it may
// lie, as a Proposer from another runtime could): a tool runs only on an
// approval of exactly its proposal.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AbortedError,
  InvalidConfigError,
  InvalidToolSpecError,
  NoVerdictError,
  NotApprovedError,
  ReviewBlockedError,
  ReviewFailedError,
  ReviewRejectedError,
  ReviewTimeoutError,
  ProposalInvalidError,
  ToolGate,
  VerdictError,
  checkVerdict,
  encodeProposal,
  gate,
} from "../dist/index.js";

/** Answers every proposal with a verdict of one outcome (tamper may change it), or throws err. */
function proposer({ outcome = "approved", tamper, err } = {}) {
  const sent = [];
  return {
    sent,
    async propose(p, opts) {
      sent.push({ p, opts });
      if (err) throw err;
      const v = { v: 1, proposal_id: p.id, tenant: p.tenant, action: p.action, kind: "action", outcome, approved: outcome === "approved", stage: "review", reason: `told ${outcome}` };
      tamper?.(v);
      return v;
    },
  };
}

// These verdicts carry no grant: the gate's checks of the verdict are
// tested here, its checks of a grant in grant-gate.test.mjs.
const ungranted = { allowUngrantedApprovals: true };
const identity = { tenant: "acme", agent: "agent-1", session: "s-1", operator: { id: "alice", roles: ["sre"] }, reviewer: "reviewer" };
const restartSpec = {
  action: "host_restart_service",
  class: "write",
  describe: (host) => ({ target: { host }, reason: "wedged", blast_radius: "single_device" }),
};

test("a tool runs only on an approval of exactly its proposal", async (t) => {
  const cases = [
    { note: "approved", outcome: "approved", runs: 1 },
    { note: "rejected", outcome: "rejected", cls: ReviewRejectedError },
    { note: "blocked", outcome: "blocked", cls: ReviewBlockedError },
    { note: "error", outcome: "error", cls: ReviewFailedError },
    { note: "timeout", outcome: "timeout", cls: ReviewTimeoutError },
    { note: "invalid", outcome: "invalid", cls: ProposalInvalidError },
    { note: "unknown outcome", outcome: "maybe", cls: VerdictError },
    { note: "approved false", outcome: "approved", tamper: (v) => (v.approved = false), cls: VerdictError },
    { note: "approval of another id", outcome: "approved", tamper: (v) => (v.proposal_id = "other"), cls: NotApprovedError },
    { note: "approval of another tenant", outcome: "approved", tamper: (v) => (v.tenant = "globex"), cls: NotApprovedError },
    { note: "approval of another action", outcome: "approved", tamper: (v) => (v.action = "kill_process"), cls: NotApprovedError },
    { note: "no verdict", err: new NoVerdictError("no verdict before the deadline"), cls: NoVerdictError },
  ];
  for (const c of cases) {
    await t.test(c.note, async () => {
      const pr = proposer(c);
      let runs = 0;
      const seen = [];
      const tg = new ToolGate(pr, identity, { ...ungranted, observe: (p, v) => seen.push(v.outcome) });
      const restart = gate(tg, restartSpec, () => ++runs);
      if (c.cls) {
        await assert.rejects(restart("web-1"), c.cls);
        assert.equal(runs, 0, "the tool ran");
      } else {
        assert.equal(await restart("web-1"), 1);
      }
      assert.equal(pr.sent.length, 1);
      if (!c.err) assert.equal(seen.length, 1, "the observer saw the verdict");
    });
  }
});

test("a read tool runs without a proposal", async () => {
  const pr = proposer({ outcome: "rejected" });
  const list = gate(new ToolGate(pr, identity, ungranted), { action: "host_list_services", class: "read" }, (host) => `listed ${host}`);
  assert.equal(await list("web-1"), "listed web-1");
  assert.equal(pr.sent.length, 0);
});

test("the proposal carries the identity and the change, and encodes", async () => {
  const pr = proposer();
  const tg = new ToolGate(pr, identity, { ...ungranted, newId: () => "fixed-id", reviewTimeoutMs: 1234 });
  await gate(tg, restartSpec, () => "ok")("web-9");
  const { p, opts } = pr.sent[0];
  assert.equal(opts.timeoutMs, 1234);
  assert.deepEqual(
    encodeProposal(p).text,
    '{"v":1,"id":"fixed-id","tenant":"acme","kind":"action","action":"host_restart_service","class":"write","target":{"host":"web-9"},"reason":"wedged","blast_radius":"single_device","operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":"agent-1","session":"s-1"},"flags":{"skip_review":false,"force_approve":false,"force_approve_no_sop":false,"user_confirmed":false},"reviewer":"reviewer"}',
  );
  // A change's own id and reviewer win.
  await tg.authorize("host_restart_service", "write", { id: "mine", reviewer: "dba", blast_radius: "single_device" });
  assert.equal(pr.sent[1].p.id, "mine");
  assert.equal(pr.sent[1].p.reviewer, "dba");
});

test("unusable specs and identities never run a tool", async (t) => {
  const pr = proposer();
  const tg = new ToolGate(pr, identity, ungranted);
  const specs = [
    { note: "action with a dot", spec: { action: "a.b", class: "write", describe: () => ({}) } },
    { note: "unknown class", spec: { action: "a", class: "maybe", describe: () => ({}) } },
    { note: "write without describe", spec: { action: "a", class: "write" } },
  ];
  for (const c of specs) {
    await t.test(c.note, async () => {
      let runs = 0;
      await assert.rejects(gate(tg, c.spec, () => ++runs)("x"), InvalidToolSpecError);
      assert.equal(runs, 0);
    });
  }
  await assert.rejects(gate(undefined, restartSpec, () => 1)("x"), InvalidToolSpecError);
  for (const bad of [{ ...identity, tenant: "Acme" }, { ...identity, agent: " " }, { ...identity, operator: { id: "" } }, { ...identity, reviewer: "a.b" }]) {
    assert.throws(() => new ToolGate(pr, bad, ungranted), InvalidConfigError);
  }
  assert.throws(() => new ToolGate(pr, identity, { ...ungranted, reviewTimeoutMs: 0 }), InvalidConfigError);
  assert.equal(pr.sent.length, 0);
});

test("an approval that comes after the caller aborted does not run the tool", async () => {
  const ac = new AbortController();
  const pr = proposer({ tamper: () => ac.abort() });
  let runs = 0;
  await assert.rejects(gate(new ToolGate(pr, identity, ungranted), restartSpec, () => ++runs)("web-1", { signal: ac.signal }), AbortedError);
  assert.equal(runs, 0);
});

test("checkVerdict approves only outcome approved with approved true", () => {
  assert.throws(() => checkVerdict(null), NotApprovedError);
  assert.throws(() => checkVerdict({ tenant: "acme", proposal_id: "p", outcome: "approved", approved: false }), VerdictError);
  assert.throws(() => checkVerdict({ tenant: "acme", proposal_id: "p", outcome: "rejected", approved: true }), ReviewRejectedError);
  assert.doesNotThrow(() => checkVerdict({ tenant: "acme", proposal_id: "p", outcome: "approved", approved: true }));
});
