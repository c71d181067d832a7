// The tool gate and grants: a write tool runs only after the approval's
// grant verifies against the proposal just sent and its single use is
// taken; outcomes are reported around the run. The Proposer here answers
// as told and may lie, as one from another runtime could; its grants are
// signed with a test key and checked by this package's own verifier
// (end-to-end tests run against a real gated: grants.e2e.test.mjs).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  GrantError,
  GrantUseError,
  InvalidConfigError,
  NotApprovedError,
  ToolGate,
  TransportError,
  decodeGrantKeySet,
  encodeOutcome,
  encodeProposal,
  gate,
  grantWire,
  verifyGrant,
} from "../dist/index.js";
import { b64, keyEntry, sha256, signToken, testKey } from "./grantkeys.mjs";

const identity = { tenant: "acme", agent: "agent-1", session: "s-1" };
const restartSpec = {
  action: "host_restart_service",
  class: "write",
  describe: ({ host }) => ({ target: { host, port: 8080.0 }, reason: "wedged", blast_radius: "single_device" }),
};

const gatedKey = testKey("A");
const otherKey = testKey("forger");
const nowS = () => Math.floor(Date.now() / 1000);
const keys = decodeGrantKeySet({ keys: [keyEntry(gatedKey, nowS() - 3600, 300)] });

/** The grant gated would sign for p; change alters its claims. */
function grantFor(p, { change = {}, key = gatedKey } = {}) {
  const { bytes } = encodeProposal(p);
  const iat = nowS() - 1;
  const claims = {
    v: 1,
    gid: b64(Buffer.from(sha256(p.id + JSON.stringify(change)), "hex").subarray(0, 16)),
    iss: "gated",
    tenant: p.tenant,
    proposal_id: p.id,
    proposal_sha256: sha256(bytes),
    action: p.action,
    // gated digests the RFC 8785 form of the target: {"host":"web-1","port":8080}.
    target_sha256: sha256(`{"host":${JSON.stringify(p.target.host)},"port":8080}`),
    policy_revision: "rev-1",
    reviewers: [{ plugin: "sop", plugin_version: "0.1.0", persona: "reviewer", model: "" }],
    iat,
    exp: iat + 300,
    ...change,
  };
  return signToken({ alg: "EdDSA", typ: "gated-grant+jwt", kid: key.kid }, claims, key);
}

/**
 * A Proposer that approves every proposal with a grant (grant(p) may
 * change it), verifies grants with this package's verifier, keeps each
 * grant's single use as gated does, and records every step in order.
 */
function granter({ grant = (p) => grantFor(p), useRefusal, reportFails = [] } = {}) {
  const steps = [];
  const used = new Set();
  return {
    steps,
    async propose(p) {
      steps.push("propose");
      const v = { v: 1, proposal_id: p.id, tenant: p.tenant, action: p.action, kind: "action", outcome: "approved", approved: true, stage: "review", reason: "ok" };
      const g = grant(p);
      if (g !== undefined) v.grant = g;
      return v;
    },
    async verifyGrant(token, expect) {
      steps.push("verify");
      return verifyGrant(token, keys, Date.now() / 1000, expect);
    },
    async useGrant(token, by) {
      steps.push(`use by ${by}`);
      if (useRefusal) throw new GrantUseError(useRefusal);
      if (used.has(token)) throw new GrantUseError("already used");
      used.add(token);
      return { gid: "", claims: null };
    },
    async reportOutcome(r) {
      steps.push(`report ${r.status}${r.error ? `: ${r.error}` : ""}`);
      assert.equal(r.tenant, "acme");
      if (reportFails.includes(r.status)) throw new TransportError(`no ack for ${r.status}`);
    },
  };
}

test("an approval without a grant does not run the tool", async () => {
  const pr = granter({ grant: () => undefined });
  let runs = 0;
  const err = await gate(new ToolGate(pr, identity), restartSpec, () => ++runs)({ host: "web-1" }).then(
    () => assert.fail(`the tool ran ${runs} time(s) on an approval without a grant`),
    (e) => e,
  );
  assert.ok(err instanceof GrantError && err instanceof NotApprovedError, `${err}`);
  assert.equal(err.member, "grant");
  assert.equal(runs, 0);
  // The refusal is the gate's own: gated hears of it.
  assert.deepEqual(pr.steps, ["propose", `report refused: ${err.message}`]);
});

test("an approval's grant is verified and used before the tool runs, and its outcome reported around it", async () => {
  const pr = granter();
  const restart = gate(new ToolGate(pr, identity), restartSpec, ({ host }) => {
    pr.steps.push(`run ${host}`);
    return `restarted ${host}`;
  });
  assert.equal(await restart({ host: "web-1" }), "restarted web-1");
  assert.deepEqual(pr.steps, ["propose", "verify", "use by agent-1/s-1", "report started", "run web-1", "report succeeded"]);
});

test("a grant that does not hold never runs the tool and is never used", async (t) => {
  const cases = [
    { note: "another target", member: "target_sha256", grant: (p) => grantFor(p, { change: { target_sha256: sha256('{"host":"web-2","port":8080}') } }) },
    { note: "other proposal bytes", member: "proposal_sha256", grant: (p) => grantFor({ ...p, reason: "something else" }) },
    { note: "another tenant", member: "tenant", grant: (p) => grantFor({ ...p, tenant: "globex" }) },
    { note: "another proposal id", member: "proposal_id", grant: (p) => grantFor({ ...p, id: "other-id" }) },
    { note: "another action", member: "action", grant: (p) => grantFor(p, { change: { action: "kill_process" } }) },
    { note: "signed by another key", member: "signature", grant: (p) => grantFor(p, { key: { ...otherKey, kid: gatedKey.kid } }) },
    { note: "an unknown key", member: "kid", grant: (p) => grantFor(p, { key: otherKey }) },
    { note: "expired", member: "exp", grant: (p) => grantFor(p, { change: { iat: nowS() - 400, exp: nowS() - 100 } }) },
    { note: "beyond the key's max_ttl", member: "max_ttl", grant: (p) => grantFor(p, { change: { exp: nowS() + 3600 } }) },
    { note: "not a grant", member: "format", grant: () => "approved" },
  ];
  for (const c of cases) {
    await t.test(c.note, async () => {
      const pr = granter({ grant: c.grant });
      let runs = 0;
      const err = await gate(new ToolGate(pr, identity), restartSpec, () => ++runs)({ host: "web-1" }).then(
        () => assert.fail("the tool ran"),
        (e) => e,
      );
      assert.ok(err instanceof GrantError, `${err?.stack ?? err}`);
      assert.equal(err.member, c.member, err.message);
      assert.equal(runs, 0);
      // Never used, but reported to gated as the gate's own refusal.
      assert.deepEqual(pr.steps, ["propose", "verify", `report refused: ${err.message}`]);
    });
  }
});

test("a grant gated refuses to let be used never runs the tool", async () => {
  const pr = granter({ useRefusal: "already used at 2026-11-25T10:00:00Z by agent-2" });
  let runs = 0;
  await assert.rejects(gate(new ToolGate(pr, identity), restartSpec, () => ++runs)({ host: "web-1" }), (err) => {
    assert.ok(err instanceof GrantUseError && err instanceof NotApprovedError, `${err}`);
    assert.match(err.message, /already used at 2026-11-25T10:00:00Z by agent-2/);
    return true;
  });
  assert.equal(runs, 0);
  assert.deepEqual(pr.steps, ["propose", "verify", "use by agent-1/s-1"]);
});

test("a tool that fails is reported failed with its error, and the caller gets the error", async () => {
  const pr = granter();
  const boom = new Error("nginx: unit not found");
  const restart = gate(new ToolGate(pr, identity, { by: "ops-agent" }), restartSpec, () => {
    throw boom;
  });
  await assert.rejects(restart({ host: "web-1" }), (err) => err === boom);
  assert.deepEqual(pr.steps, ["propose", "verify", "use by ops-agent", "report started", "report failed: nginx: unit not found"]);
});

test("a started outcome that cannot be reported stops the call before the tool runs", async () => {
  const pr = granter({ reportFails: ["started"] });
  let runs = 0;
  await assert.rejects(gate(new ToolGate(pr, identity), restartSpec, () => ++runs)({ host: "web-1" }), TransportError);
  assert.equal(runs, 0);
});

test("an outcome after the run that cannot be reported keeps the tool's result and is handed to onReportError", async () => {
  const pr = granter({ reportFails: ["succeeded"] });
  const seen = [];
  const restart = gate(new ToolGate(pr, identity, { onReportError: (err, r) => seen.push(`${r.status}: ${err.message}`) }), restartSpec, () => "ok");
  assert.equal(await restart({ host: "web-1" }), "ok");
  assert.deepEqual(seen, ["succeeded: no ack for succeeded"]);
});

test("a gate that cannot verify grants is refused, unless it accepts approvals without them", async () => {
  const plain = { propose: granter().propose };
  assert.throws(() => new ToolGate(plain, identity), InvalidConfigError);
  // Allowed to accept approvals without grants, it still never runs on a grant it cannot check.
  let runs = 0;
  const tg = new ToolGate(plain, identity, { allowUngrantedApprovals: true });
  await assert.rejects(gate(tg, restartSpec, () => ++runs)({ host: "web-1" }), (err) => err instanceof GrantError && err.member === "grant");
  assert.equal(runs, 0);
  assert.throws(() => new ToolGate(granter(), identity, { by: " " }), InvalidConfigError);
});

test("authorize takes the grant's use once, and reportOutcome reports on it", async () => {
  const pr = granter();
  const tg = new ToolGate(pr, identity);
  const v = await tg.authorize("host_restart_service", "write", restartSpec.describe({ host: "web-3" }));
  assert.equal(typeof v.grant, "string");
  await tg.reportOutcome(v, "started");
  assert.deepEqual(pr.steps, ["propose", "verify", "use by agent-1/s-1", "report started"]);
  await assert.rejects(tg.reportOutcome({ ...v, grant: undefined }, "started"), GrantError);
});

test("an outcome's error is cut to 4096 bytes at a character boundary", () => {
  const long = "é".repeat(3000); // 6000 bytes
  const o = JSON.parse(encodeOutcome({ gid: "g", tenant: "acme", proposal_id: "p", status: "failed", error: long, at: "2026-11-25T10:00:00Z" }));
  assert.ok(Buffer.byteLength(o.error) <= grantWire.maxOutcomeErrorBytes, `${Buffer.byteLength(o.error)} bytes`);
  assert.ok(o.error.length >= 2047 && /^é+$/.test(o.error), "cut inside a character");
  assert.deepEqual(Object.keys(o), ["v", "gid", "tenant", "proposal_id", "status", "error", "at"]);
});
