// The tool gate and grants: a write tool runs only after the approval's
// grant verifies against the proposal just sent and gated takes its single
// use; outcomes are reported around the run.
import assert from "node:assert/strict";
import { test } from "node:test";

import { NotApprovedError, ToolGate, gate } from "../dist/index.js";

const identity = { tenant: "acme", agent: "agent-1", session: "s-1" };
const restartSpec = {
  action: "host_restart_service",
  class: "write",
  describe: (host) => ({ target: { host }, reason: "wedged", blast_radius: "single_device" }),
};

test("an approval without a grant does not run the tool", async () => {
  const pr = {
    async propose(p) {
      return { v: 1, proposal_id: p.id, tenant: p.tenant, action: p.action, kind: "action", outcome: "approved", approved: true, stage: "review", reason: "ok" };
    },
  };
  let runs = 0;
  const err = await gate(new ToolGate(pr, identity), restartSpec, () => ++runs)("web-1").then(
    () => assert.fail(`the tool ran ${runs} time(s) on an approval without a grant`),
    (e) => e,
  );
  assert.ok(err instanceof NotApprovedError, `${err}`);
  assert.match(err.message, /grant/);
  assert.equal(runs, 0);
});
