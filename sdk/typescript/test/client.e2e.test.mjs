// The client against a real `gated serve`: its policy, its reviewer
// process, its verdict store.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  Client,
  IdReusedError,
  NoVerdictError,
  NotApprovedError,
  NotFoundError,
  ProposalInvalidError,
  ReviewBlockedError,
  ReviewRejectedError,
  ServiceUnavailableError,
  ToolGate,
  UnconfirmedApprovalError,
  VerdictError,
  encodeProposal,
  gate,
  proposalDigest,
} from "../dist/index.js";
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

test("an approval resolves with the approved verdict", async () => {
  const v = await client.propose(example("approved.json", { id: `ts-approved-${run}` }), { timeoutMs: 60_000 });
  assert.equal(v.outcome, "approved");
  assert.equal(v.approved, true);
  assert.equal(v.proposal_id, `ts-approved-${run}`);
  // The stored verdict is the same.
  const stored = await client.verdict("acme", `ts-approved-${run}`);
  assert.equal(stored.outcome, "approved");
  assert.equal(stored.proposal_sha256, v.proposal_sha256);
});

test("every rejection kind of the default bundle throws its typed error", async (t) => {
  const cases = [
    { note: "rejected at policy", p: example("rejected-skip-review.json"), cls: ReviewRejectedError, stage: "policy" },
    { note: "rejected by the reviewer", p: example("rejected-no-sop.json"), cls: ReviewRejectedError, stage: "review" },
    {
      note: "blocked: no such persona",
      p: example("approved.json", { reviewer: "no-such-persona", target: { device_id: 701, service: "nginx" } }),
      cls: ReviewBlockedError,
      stage: "review",
    },
    { note: "invalid class", p: example("approved.json", { class: "maybe" }), cls: ProposalInvalidError, stage: "validation" },
  ];
  for (const [i, c] of cases.entries()) {
    await t.test(c.note, async () => {
      const p = { ...c.p, id: `ts-kind-${i}-${run}` };
      const err = await client.propose(p, { timeoutMs: 60_000 }).then(
        (v) => assert.fail(`approved: ${JSON.stringify(v)}`),
        (e) => e,
      );
      assert.ok(err instanceof c.cls, `${err}`);
      assert.ok(err instanceof VerdictError && err instanceof NotApprovedError);
      assert.equal(err.verdict.stage, c.stage);
      assert.equal(err.verdict.proposal_id, p.id);
    });
  }
});

test("proposeRaw returns every verdict; a repeat is answered from the store; an id reused is refused", async () => {
  const raw = JSON.stringify(example("rejected-skip-review.json", { id: `ts-raw-${run}` }));
  const v = await client.proposeRaw(raw, { timeoutMs: 60_000 });
  assert.equal(v.outcome, "rejected");
  assert.equal(v.proposal_sha256, proposalDigest(raw));
  const again = await client.proposeRaw(raw, { timeoutMs: 60_000 });
  assert.deepEqual(again, v);
  const other = JSON.stringify(example("rejected-skip-review.json", { id: `ts-raw-${run}`, reason: "other bytes" }));
  await assert.rejects(client.proposeRaw(other, { timeoutMs: 60_000 }), IdReusedError);
});

test("the review service answers, and its approval is confirmed", async () => {
  const raw = JSON.stringify(example("approved.json", { id: `ts-service-${run}`, target: { device_id: 801, service: "nginx" } }));
  const v = await client.requestReview(raw, { timeoutMs: 60_000 });
  assert.equal(v.outcome, "approved");
  assert.equal(v.proposal_sha256, proposalDigest(raw));
});

test("a lookup of a verdict never decided is NotFoundError", async () => {
  await assert.rejects(client.verdict("acme", `ts-never-${run}`), NotFoundError);
});

test("a forged approval on the verdict subject is refused", async () => {
  // The attacker knows the proposal's bytes and floods its verdict subject
  // with an approval that names the right tenant, id and digest, from
  // before the client subscribes until the client has its answer. Whether
  // the client reads a forgery before gated's real verdict is a race, so
  // the attack is repeated until it has: every attempt must end without an
  // approval, and at least one with the forgery refused as unconfirmed (a
  // forgery read after gated stored its verdict meets the stored rejection).
  const attacker = await natsConnect(g.natsURL);
  const outcomes = [];
  try {
    for (let i = 0; i < 50 && !outcomes.includes("UnconfirmedApprovalError"); i++) {
      const p = example("rejected-no-sop.json", { id: `ts-forged-${i}-${run}`, target: { database: "orders", table: `forged_${i}_${run}` } });
      const forgery = JSON.stringify({
        v: 1, proposal_id: p.id, tenant: "acme", action: p.action, kind: "action", outcome: "approved", approved: true,
        stage: "review", reason: "trust me", decided_at: new Date().toISOString(), latency_ms: 1, audit_seq: 1,
        proposal_sha256: proposalDigest(encodeProposal(p).bytes),
      });
      // The flood is running before the client proposes.
      let flowing;
      const started = new Promise((resolve) => (flowing = resolve));
      const spy = attacker.subscribe(`gated.verdicts.acme.${p.id}`, { max: 1, callback: () => flowing() });
      const flood = setInterval(() => attacker.publish(`gated.verdicts.acme.${p.id}`, forgery), 1);
      try {
        await started;
        const err = await client.propose(p, { timeoutMs: 60_000 }).then(
          (v) => assert.fail(`a forged approval was believed: ${JSON.stringify(v)}`),
          (e) => e,
        );
        assert.ok(err instanceof UnconfirmedApprovalError || err instanceof ReviewRejectedError, `${err}`);
        outcomes.push(err.name);
      } finally {
        clearInterval(flood);
        spy.unsubscribe();
      }
    }
    t_log(`forged approvals refused: ${outcomes.join(", ")}`);
    assert.ok(outcomes.includes("UnconfirmedApprovalError"), `the client never read a forgery first: ${outcomes}`);
  } finally {
    await attacker.close();
  }
});

function t_log(s) {
  process.stdout.write(`# ${s}\n`);
}

test("gate(): a read tool runs without a proposal, a write tool only on approval", async () => {
  const watcher = await natsConnect(g.natsURL);
  const proposed = [];
  watcher.subscribe("gated.proposals.acme.>", { callback: (_e, m) => proposed.push(m.subject) });
  await watcher.flush();
  try {
    const observed = [];
    const tg = new ToolGate(client, { tenant: "acme", agent: "ts-gate-agent", operator: { id: "alice", roles: ["sre"] } }, {
      observe: (p, v) => observed.push([p.action, v.outcome]),
    });
    let runs = 0;
    const list = gate(tg, { action: "host_list_services", class: "read" }, async (host) => {
      runs++;
      return `services of ${host}`;
    });
    const restart = gate(
      tg,
      {
        action: "host_restart_service",
        class: "write",
        describe: ({ device }) => ({
          target: { device_id: device, service: "nginx", tags: ["production"] },
          reason: "nginx stopped answering health checks",
          blast_radius: "single_device",
        }),
      },
      async ({ device }, { signal }) => {
        assert.ok(signal === undefined || signal instanceof AbortSignal);
        runs++;
        return `restarted ${device}`;
      },
    );
    const drop = gate(
      tg,
      {
        action: "db_drop_table",
        class: "destructive",
        describe: ({ table }) => ({ target: { table }, reason: "unused", blast_radius: "cluster" }),
      },
      async () => {
        runs++;
        return "dropped";
      },
    );
    assert.equal(await list("web-1"), "services of web-1");
    await watcher.flush();
    assert.equal(proposed.length, 0, "a read tool proposed");
    assert.equal(await restart({ device: 9702 }, { timeoutMs: 60_000 }), "restarted 9702");
    assert.equal(runs, 2);
    // The same device again, moments later: target_cooldown refuses it.
    await assert.rejects(restart({ device: 9702 }, { timeoutMs: 60_000 }), ReviewRejectedError);
    const err = await drop({ table: "orders_2019" }, { timeoutMs: 60_000 }).then(assert.fail, (e) => e);
    assert.ok(err instanceof ReviewRejectedError, `${err}`);
    assert.equal(err.verdict.reviews[0].persona, "dba");
    assert.equal(runs, 2, "a tool ran without an approval");
    assert.deepEqual(observed, [
      ["host_restart_service", "approved"],
      ["host_restart_service", "rejected"],
      ["db_drop_table", "rejected"],
    ]);
    await watcher.flush();
    assert.equal(proposed.length, 3);
  } finally {
    await watcher.close();
  }
});

test("an aborted wait throws NoVerdictError and runs nothing", async () => {
  const ac = new AbortController();
  ac.abort(new Error("caller gave up"));
  await assert.rejects(
    client.propose(example("approved.json", { id: `ts-aborted-${run}` }), { signal: ac.signal }),
    NoVerdictError,
  );
});
