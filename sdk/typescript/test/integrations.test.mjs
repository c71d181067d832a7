// GatedTools, the core of the framework integrations, with a Proposer that
// answers as told: what is proposed for a call through the catalog, that a
// call runs only on an approval of exactly its proposal, with the
// arguments it carried, and that every refusal is typed and runs nothing.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AwaitingOperatorError, NoVerdictError, TransportError } from "../dist/index.js";
import { GatedTools, ToolHeldError, ToolRefusedError } from "../dist/integrations/index.js";

const identity = { tenant: "acme", agent: "agent-1", session: "s-1" };
const catalog = `
tools:
  restart_service:
    action: host_restart_service
    target: {host: /host, service: /service}
    target_fixed: {tags: [production]}
    reviewer: reviewer
  list_services: {class: read}
`;

/** Answers every proposal with a verdict of one outcome, or throws err. */
function proposer({ outcome = "approved", held = false, err, other = false } = {}) {
  const sent = [];
  return {
    sent,
    async propose(p) {
      sent.push(p);
      if (err) throw err;
      const v = { v: 1, proposal_id: other ? "someone-else" : p.id, tenant: p.tenant, action: p.action, outcome, approved: outcome === "approved", stage: "review", reason: `told ${outcome}` };
      if (held) {
        throw new AwaitingOperatorError({ ...v, outcome: "blocked", awaiting_operator: { deadline: "2030-01-01T00:00:00Z", reason: "a person decides", rule: "hold_it" } });
      }
      if (outcome !== "approved") {
        const { verdictError } = await import("../dist/errors.js");
        throw verdictError(v);
      }
      return v;
    },
  };
}

const tools = (pr, opts = {}) => new GatedTools(pr, identity, { catalogText: catalog, allowUngrantedApprovals: true, framework: "a test", ...opts });

test("a call is proposed through the catalog and runs with exactly the arguments proposed", async () => {
  const pr = proposer();
  const ran = [];
  const args = { host: "web-1", service: "nginx", _reason: "wedged", opts: { n: 1 } };
  const call = tools(pr).run("restart_service", args, (a) => ran.push(a));
  args.opts.n = 2; // changed during the review: the proposal and the tool keep what was called
  args.host = "web-2";
  await call;
  assert.equal(pr.sent.length, 1);
  const p = pr.sent[0];
  assert.equal(p.action, "host_restart_service");
  assert.equal(p.class, "write");
  assert.equal(p.reviewer, "reviewer");
  assert.equal(p.reason, "wedged");
  assert.deepEqual(p.target, { host: "web-1", service: "nginx", tags: ["production"] });
  assert.deepEqual(p.arguments, { host: "web-1", service: "nginx", opts: { n: 1 } });
  assert.deepEqual(ran, [{ host: "web-1", service: "nginx", opts: { n: 1 } }]);
});

test("a read runs at once; a tool the catalog does not name is a write", async () => {
  const pr = proposer();
  const t = tools(pr);
  assert.equal(await t.run("list_services", { host: "web-1" }, () => "listed"), "listed");
  assert.equal(pr.sent.length, 0);
  await t.run("db.drop", { table: "t" }, () => "dropped");
  assert.equal(pr.sent[0].action, "db_drop");
  assert.equal(pr.sent[0].class, "write");
  assert.match(pr.sent[0].reason, /agent-1 called the tool db\.drop through a test/);
});

test("every refusal is typed and runs nothing", async (t) => {
  const cases = [
    { note: "rejected", pr: proposer({ outcome: "rejected" }), cls: ToolRefusedError, outcome: "rejected" },
    { note: "error", pr: proposer({ outcome: "error" }), cls: ToolRefusedError, outcome: "error" },
    { note: "held", pr: proposer({ held: true }), cls: ToolHeldError, outcome: "blocked" },
    { note: "an approval of another proposal", pr: proposer({ other: true }), cls: ToolRefusedError, outcome: "not_approved" },
    { note: "folded keys", pr: proposer(), args: { host: "a", service: "b", HOST: "c" }, cls: ToolRefusedError, outcome: "bad_arguments", sent: 0 },
    { note: "a reason that is not a string", pr: proposer(), args: { host: "a", service: "b", _reason: 5 }, cls: ToolRefusedError, outcome: "bad_arguments", sent: 0 },
    { note: "a target that names nothing", pr: proposer(), args: { host: "a" }, cls: ToolRefusedError, outcome: "bad_arguments", sent: 0 },
    { note: "a value JSON cannot hold", pr: proposer(), args: { host: "a", service: "b", n: NaN }, cls: ToolRefusedError, outcome: "bad_arguments", sent: 0 },
    { note: "no verdict", pr: proposer({ err: new NoVerdictError("no verdict") }), cls: NoVerdictError },
    { note: "unreachable", pr: proposer({ err: new TransportError("closed") }), cls: TransportError },
  ];
  for (const c of cases) {
    await t.test(c.note, async () => {
      const ran = [];
      const err = await tools(c.pr)
        .run("restart_service", c.args ?? { host: "web-1", service: "nginx" }, () => ran.push(1), { callKey: "k" })
        .catch((e) => e);
      assert.ok(err instanceof c.cls, `${err}`);
      if (c.outcome) {
        assert.equal(err.refusal.outcome, c.outcome);
        assert.match(err.message, c.cls === ToolHeldError ? /^gated holds restart_service/ : /^gated did not approve restart_service/);
      }
      assert.deepEqual(ran, []);
      assert.equal(c.pr.sent.length, c.sent ?? 1);
    });
  }
});

test("check proposes without running, and the run reads the same proposal", async () => {
  const pr = proposer();
  const t = tools(pr);
  assert.equal(await t.check("restart_service", { host: "web-1", service: "nginx" }, "call-1"), "approved");
  await t.run("restart_service", { host: "web-1", service: "nginx" }, () => 1, { callKey: "call-1" });
  assert.equal(pr.sent.length, 2);
  assert.equal(pr.sent[0].id, pr.sent[1].id);
  const held = tools(proposer({ held: true }));
  assert.equal(await held.check("restart_service", { host: "web-1", service: "nginx" }, "call-2"), "held");
  assert.equal(held.held("call-2")?.awaiting_operator?.rule, "hold_it");
  await assert.rejects(tools(proposer({ outcome: "rejected" })).check("restart_service", { host: "web-1", service: "nginx" }, "call-3"), ToolRefusedError);
});
