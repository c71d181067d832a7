// The client installs like any npm package: packed with npm pack and
// installed from the tarball into a fresh project, then a later install of
// other packages (tsx, TypeScript) leaves it whole. Nothing warns (no
// EBADENGINE on this Node, no install script to approve), the package
// compiles under tsc as docs/CLIENTS.md says, and a TypeScript program run
// by tsx proposes through a real gated.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { lstatSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { startGated } from "./gated.mjs";

const run = promisify(execFile);
const sdk = fileURLToPath(new URL("..", import.meta.url));

let g;
let dir;

before(async () => {
  g = await startGated();
  dir = mkdtempSync(join(tmpdir(), "gated-client-install-"));
});

after(async () => {
  await g?.stop();
  if (dir) {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** Runs npm in the project; resolves with what it printed. */
async function npm(...args) {
  const { stdout, stderr } = await run("npm", [...args, "--no-audit", "--no-fund"], { cwd: dir, maxBuffer: 1 << 24 });
  return stdout + stderr;
}

const program = `import { connect } from "@nats-io/transport-node";
import { Client, VerdictError, type Verdict } from "@gated/client";

const nc = await connect({ servers: process.argv[2] });
try {
  const v: Verdict = await new Client(nc).propose({
    id: "install-read-1",
    tenant: "acme",
    action: "host_list_services",
    class: "read",
    target: { device_id: 7 },
    reason: "looking at what runs on web-7",
    requested_by: { agent: "ops-agent", session: "s-42" },
  }, { timeoutMs: 30_000 });
  console.log("outcome", v.outcome, v.stage);
} catch (err) {
  console.log("refused", err instanceof VerdictError ? err.verdict.outcome : String(err));
} finally {
  await nc.close();
}
`;

const tsconfig = {
  compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2022"], types: ["node"], strict: true, noEmit: true },
  include: ["*.ts"],
};

test("installed from its tarball, then beside tsx and TypeScript, it compiles and proposes through gated", async () => {
  await run("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: sdk });
  const tgz = readdirSync(dir).find((f) => f.endsWith(".tgz"));
  assert.ok(tgz, "npm pack wrote no tarball");
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true, type: "module" }));
  const first = await npm("install", `./${tgz}`);
  assert.doesNotMatch(first, /EBADENGINE|install-scripts|WARN/i, first);
  const later = await npm("install", "-D", "tsx@4.23.15", "typescript@5.9.3", "@types/node@20.19.43");
  // tsx's esbuild has an install script of its own to approve; nothing here may be about this package.
  assert.doesNotMatch(later, /EBADENGINE|@gated\/client|@nats-io|yaml@/i, later);
  assert.ok(!lstatSync(join(dir, "node_modules/@gated/client")).isSymbolicLink(), "the client became a link");
  for (const dep of ["@nats-io/transport-node", "@nats-io/jetstream", "yaml"]) {
    assert.ok(lstatSync(join(dir, "node_modules", dep)).isDirectory(), `${dep} is missing`);
  }
  writeFileSync(join(dir, "use.ts"), program);
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(tsconfig));
  await run(join(dir, "node_modules/.bin/tsc"), ["-p", "tsconfig.json"], { cwd: dir });
  const { stdout } = await run(join(dir, "node_modules/.bin/tsx"), ["use.ts", g.natsURL], { cwd: dir });
  assert.equal(stdout.trim(), "outcome approved policy");
});
