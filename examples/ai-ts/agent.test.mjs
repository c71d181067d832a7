// Runs the example as its README says, against a real gated serve.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";

import { startGated } from "../../sdk/typescript/test/gated.mjs";

test("the read runs, the restart runs on approval, the drop is refused", { timeout: 120_000 }, async () => {
  const g = await startGated();
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["agent.mjs", "--nats-url", g.natsURL, "--device", "7"], {
      cwd: new URL(".", import.meta.url),
    });
    process.stdout.write(stdout.replace(/^/gm, "# "));
    const lines = stdout.trim().split("\n");
    assert.equal(lines.length, 3, stdout);
    assert.equal(lines[0], "ran      list_services: nginx, postgres on device 7");
    assert.equal(lines[1], "ran      restart_service: restarted nginx on device 7");
    assert.match(lines[2], /^refused  drop_table: gated did not approve drop_table: rejected at stage review: .*No SOP covers drop_table/);
  } finally {
    await g.stop();
  }
});
