// docs/CLIENTS.md's first TypeScript proposal, run as it is written, right
// after the README's demo against a fresh gated: it must be approved.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { gatedBinary, repoRoot, startGated } from "./gated.mjs";

const run = promisify(execFile);

/** The first ts block under ### First proposal of the TypeScript section. */
function firstExample() {
  const doc = readFileSync(join(repoRoot, "docs/CLIENTS.md"), "utf8");
  const section = doc.split("\n## TypeScript\n")[1].split("\n## ")[0];
  const m = /^### First proposal\n[\s\S]*?^```ts\n([\s\S]*?)^```$/m.exec(section);
  assert.ok(m, "docs/CLIENTS.md has no ts block under ## TypeScript, ### First proposal");
  return m[1];
}

test("the first proposal of CLIENTS.md is approved after the README's demo", async () => {
  const defaultURL = "nats://127.0.0.1:4222";
  const code = firstExample();
  assert.equal(code.split(defaultURL).length, 2, code);
  const g = await startGated();
  try {
    await run(gatedBinary(), ["propose", "-f", "examples/proposals/approved.json", "--nats-url", g.natsURL], { cwd: repoRoot });
    // Evaluated as a module in the package's directory, where
    // "@gated/client" names this package and its dependencies resolve.
    const pkg = fileURLToPath(new URL("..", import.meta.url));
    const { stdout } = await run(process.execPath, ["--input-type=module", "--eval", code.replace(defaultURL, g.natsURL)], { cwd: pkg });
    assert.equal(stdout, "approved by reviewer\n");
  } finally {
    await g.stop();
  }
});
