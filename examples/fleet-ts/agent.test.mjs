// Runs the example as its README says, against a real gated serve.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";

import { startGated } from "../../sdk/typescript/test/gated.mjs";

test("the agent reads at once and writes only on approval", { timeout: 120_000 }, async () => {
  const g = await startGated();
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["agent.mjs", "--nats-url", g.natsURL, "--device", "7"], {
      cwd: new URL(".", import.meta.url),
    });
    process.stdout.write(stdout.replace(/^/gm, "# "));
    const lines = stdout.trim().split("\n");
    assert.equal(lines.length, 3, stdout);
    assert.match(lines[0], /^read   host_list_services    ran, no proposal: nginx on device 7, postgres on device 7$/);
    assert.match(lines[1], /^write  host_restart_service  approved: restarted nginx on device 7$/);
    assert.match(lines[2], /^write  host_restart_service  rejected at policy, not run: target_cooldown$/);
  } finally {
    await g.stop();
  }
});
