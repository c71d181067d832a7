// The tool gate's own checks, with a Proposer that answers as told (it may
// lie, as a Proposer from another runtime could): a tool runs only on an
// approval of exactly its proposal.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AbortedError,
  FoldedKeysError,
  InvalidArgumentsError,
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
  describe: ({ host }) => ({ target: { host }, reason: "wedged", blast_radius: "single_device" }),
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
        await assert.rejects(restart({ host: "web-1" }), c.cls);
        assert.equal(runs, 0, "the tool ran");
      } else {
        assert.equal(await restart({ host: "web-1" }), 1);
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

test("a read tool with flow labels is proposed, carrying them, and runs only on approval", async () => {
  const spec = { action: "read_secret", class: "read", labels: ["secret"], describe: ({ name }) => ({ target: { name }, labels: ["secret"] }) };
  const rejected = proposer({ outcome: "rejected" });
  let ran = 0;
  const read = gate(new ToolGate(rejected, identity, ungranted), spec, () => ++ran);
  await assert.rejects(read({ name: "db" }), NotApprovedError);
  assert.equal(ran, 0, "a refused labelled read ran");
  assert.deepEqual(rejected.sent[0].p.labels, ["secret"]);
  assert.ok(encodeProposal(rejected.sent[0].p).text.endsWith(',"labels":["secret"]}'));
  const approved = proposer();
  assert.equal(await gate(new ToolGate(approved, identity, ungranted), spec, () => "read")({ name: "db" }), "read");
  assert.equal(approved.sent.length, 1);
  const undescribed = gate(new ToolGate(approved, identity, ungranted), { action: "read_secret", class: "read", labels: ["secret"] }, () => 1);
  await assert.rejects(undescribed({ name: "db" }), InvalidToolSpecError);
});

test("the proposal carries the identity and the change, and encodes", async () => {
  const pr = proposer();
  const tg = new ToolGate(pr, identity, { ...ungranted, newId: () => "fixed-id", reviewTimeoutMs: 1234 });
  await gate(tg, restartSpec, () => "ok")({ host: "web-9" });
  const { p, opts } = pr.sent[0];
  assert.equal(opts.timeoutMs, 1234);
  assert.deepEqual(
    encodeProposal(p).text,
    '{"v":1,"id":"fixed-id","tenant":"acme","kind":"action","action":"host_restart_service","class":"write","target":{"host":"web-9"},"arguments":{"host":"web-9"},"reason":"wedged","blast_radius":"single_device","operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":"agent-1","session":"s-1"},"flags":{"skip_review":false,"force_approve":false,"force_approve_no_sop":false,"user_confirmed":false},"reviewer":"reviewer"}',
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
  await assert.rejects(gate(undefined, restartSpec, () => 1)({ host: "x" }), InvalidToolSpecError);
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
  await assert.rejects(gate(new ToolGate(pr, identity, ungranted), restartSpec, () => ++runs)({ host: "web-1" }, { signal: ac.signal }), AbortedError);
  assert.equal(runs, 0);
});

test("checkVerdict approves only outcome approved with approved true", () => {
  assert.throws(() => checkVerdict(null), NotApprovedError);
  assert.throws(() => checkVerdict({ tenant: "acme", proposal_id: "p", outcome: "approved", approved: false }), VerdictError);
  assert.throws(() => checkVerdict({ tenant: "acme", proposal_id: "p", outcome: "rejected", approved: true }), ReviewRejectedError);
  assert.doesNotThrow(() => checkVerdict({ tenant: "acme", proposal_id: "p", outcome: "approved", approved: true }));
});

test("the tool runs with the arguments gated reviewed, not the caller's object changed while the review is pending", async () => {
  const args = { host: "web-7", opts: { service: "nginx", grace_s: 10 } };
  // The caller's object changes while gated reviews: another task of the
  // agent, or the agent reusing its arguments for the next call.
  const pr = proposer({ tamper: () => { args.opts.service = "sshd"; args.extra = "rm -rf /"; } });
  const tg = new ToolGate(pr, identity, ungranted);
  const spec = {
    action: "host_restart_service",
    class: "write",
    describe: ({ host }) => ({ target: { host }, reason: "wedged", blast_radius: "single_device" }),
  };
  let ran;
  await gate(tg, spec, (a) => { ran = structuredClone(a); return "ok"; })(args);
  const reviewed = { host: "web-7", opts: { service: "nginx", grace_s: 10 } };
  assert.deepEqual(ran, reviewed, "the tool ran with what was proposed");
  assert.deepEqual(pr.sent[0].p.arguments, reviewed, "the proposal carries every argument");
});

test("arguments that are not a JSON object, or that readers could disagree on, are never proposed or run", async (t) => {
  const cycle = { host: "web-1" };
  cycle.self = { back: cycle };
  const cases = [
    { note: "a string", args: "web-1", path: "arguments" },
    { note: "an array", args: ["web-1"], path: "arguments" },
    { note: "null", args: null, path: "arguments" },
    { note: "undefined", args: undefined, path: "arguments" },
    { note: "a Date", args: new Date(0), path: "arguments" },
    { note: "a Map", args: new Map([["host", "web-1"]]), path: "arguments" },
    { note: "a class instance", args: new (class Args { host = "web-1"; })(), path: "arguments" },
    { note: "a bigint", args: { host: "web-1", n: 10n }, path: "arguments.n" },
    { note: "a function", args: { host: "web-1", cb: () => 1 }, path: "arguments.cb" },
    { note: "a symbol", args: { host: "web-1", s: Symbol("x") }, path: "arguments.s" },
    { note: "NaN", args: { host: "web-1", n: NaN }, path: "arguments.n" },
    { note: "an infinity", args: { opts: { n: -Infinity } }, path: "arguments.opts.n" },
    { note: "undefined in an array", args: { hosts: ["a", undefined] }, path: "arguments.hosts[1]" },
    { note: "a hole in an array", args: { hosts: ["a", , "c"] }, path: "arguments.hosts[1]" },
    { note: "a nested Date", args: { at: new Date(0) }, path: "arguments.at" },
    { note: "a cycle", args: cycle, path: "arguments.self.back" },
    { note: "names equal under case folding", args: { host: "web-1", "ho\u017ft": "db-1" }, path: "arguments", keys: ["host", "ho\u017ft"] },
    { note: "Kelvin sign, deep", args: { ops: [{ x: 1 }, { key: 1, "\u212aey": 2 }] }, path: "arguments.ops.1", keys: ["key", "\u212aey"] },
  ];
  for (const c of cases) {
    await t.test(c.note, async () => {
      const pr = proposer();
      let runs = 0;
      const restart = gate(new ToolGate(pr, identity, ungranted), { ...restartSpec, describe: () => ({ blast_radius: "single_device" }) }, () => ++runs);
      const err = await restart(c.args).then(assert.fail, (e) => e);
      assert.ok(err instanceof InvalidArgumentsError && err instanceof InvalidToolSpecError, `${err?.stack ?? err}`);
      assert.equal(err.path, c.path, err.message);
      if (c.keys) {
        assert.ok(err.cause instanceof FoldedKeysError, `${err.cause}`);
        assert.deepEqual([err.cause.key, err.cause.other], c.keys);
        assert.match(err.message, /differ only by case/);
      }
      assert.equal(runs, 0, "the tool ran");
      assert.equal(pr.sent.length, 0, "proposed");
    });
  }
});

test("describe and the tool each get their own copy, and nobody can change the proposal's arguments", async () => {
  let reads = 0;
  const args = {
    host: "web-7",
    // A getter that answers differently each time it is read.
    get service() {
      return ++reads === 1 ? "nginx" : "sshd";
    },
  };
  const pr = proposer({ tamper: () => {} });
  const inner = pr.propose.bind(pr);
  pr.propose = async (p, opts) => {
    assert.ok(Object.isFrozen(p.arguments), "the proposal's arguments can be changed");
    assert.throws(() => { p.arguments = { host: "db-1" }; }, TypeError);
    return inner(p, opts);
  };
  let described;
  let ran;
  const spec = {
    ...restartSpec,
    describe: (a) => {
      described = a;
      a.host = "db-1"; // describe's copy is its own
      return { target: { host: a.host }, blast_radius: "single_device" };
    },
  };
  await gate(new ToolGate(pr, identity, ungranted), spec, (a) => { ran = a; return "ok"; })(args);
  assert.equal(reads, 1, "a getter read more than once");
  assert.deepEqual(pr.sent[0].p.arguments, { host: "web-7", service: "nginx" });
  assert.deepEqual(ran, { host: "web-7", service: "nginx" });
  assert.notEqual(ran, described);
  assert.ok(!Object.isFrozen(ran), "the tool's copy is frozen");
});

test("a describe that sets the arguments is refused", async () => {
  const pr = proposer();
  let runs = 0;
  const spec = { ...restartSpec, describe: ({ host }) => ({ target: { host }, arguments: { host: "db-1" }, blast_radius: "single_device" }) };
  await assert.rejects(gate(new ToolGate(pr, identity, ungranted), spec, () => ++runs)({ host: "web-1" }), InvalidToolSpecError);
  assert.equal(runs, 0);
  assert.equal(pr.sent.length, 0);
});

test("authorize proposes a change's arguments as they were when it was called", async () => {
  const pr = proposer({ tamper: () => { args.opts.grace_s = 0; } });
  const args = { host: "web-3", opts: { grace_s: 10 } };
  const tg = new ToolGate(pr, identity, ungranted);
  await tg.authorize("host_restart_service", "write", { target: { host: "web-3" }, arguments: args, blast_radius: "single_device" });
  assert.deepEqual(pr.sent[0].p.arguments, { host: "web-3", opts: { grace_s: 10 } });
  await assert.rejects(
    tg.authorize("host_restart_service", "write", { arguments: { Host: "a", host: "b" }, blast_radius: "single_device" }),
    (err) => err instanceof InvalidArgumentsError && err.cause instanceof FoldedKeysError && err.cause.key === "Host",
  );
  assert.equal(pr.sent.length, 1);
});
