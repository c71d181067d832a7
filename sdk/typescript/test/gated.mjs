// Starts a real `gated serve` (embedded NATS) for the end-to-end tests.
// The binary is $GATED_BIN, or built once per test process from the
// repository with `go build`.
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { connect } from "@nats-io/transport-node";

/** The repository's root directory. */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

let built;

/** The gated binary: $GATED_BIN, or one built from the repository. */
export function gatedBinary() {
  if (process.env.GATED_BIN) {
    return process.env.GATED_BIN;
  }
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "gated-ts-bin-"));
    built = join(dir, "gated");
    execFileSync("go", ["build", "-o", built, "./cmd/gated"], { cwd: repoRoot, stdio: "inherit" });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

/** Ports freePort has returned in this process. */
const handedOut = new Set();

function anyFreePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A loopback port free a moment ago and not returned before in this
 * process: picked one after the other, the ports of NATS and of gated's
 * HTTP listener would otherwise be the same whenever the kernel hands the
 * first one out again.
 */
async function freePort() {
  for (let i = 0; i < 1000; i++) {
    const port = await anyFreePort();
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error("no loopback port that was not handed out before");
}

const unlimited = "{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}";

/**
 * The arguments of a budgets file that lifts every limit, unless the test
 * names its own: these tests send far more proposals from one agent than
 * the built-in budgets allow, and test other things than budgets.
 */
function unlimitedBudgets(dir, extra) {
  if (extra.some((a) => String(a).startsWith("--budgets"))) {
    return [];
  }
  const path = join(dir, "budgets.yaml");
  writeFileSync(path, `defaults:\n  tenant: ${unlimited}\n  agent: ${unlimited}\n`);
  return ["--budgets", path];
}

/**
 * Starts `gated serve` on free ports with a fresh data directory and the
 * example personas, and waits until /readyz answers 200. Returns
 * {natsURL, stop(), kill(), logs()}.
 */
export async function startGated(...extra) {
  const bin = gatedBinary();
  const dataDir = mkdtempSync(join(tmpdir(), "gated-ts-data-"));
  const natsPort = await freePort();
  const httpPort = await freePort();
  const args = [
    "serve",
    "--data-dir", dataDir,
    "--nats-listen", `127.0.0.1:${natsPort}`,
    "--http", `127.0.0.1:${httpPort}`,
    "--personas", join(repoRoot, "examples/personas"),
    "--log-format", "json",
    ...unlimitedBudgets(dataDir, extra),
    ...extra,
  ];
  const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  let logs = "";
  proc.stdout.on("data", (d) => (logs += d));
  proc.stderr.on("data", (d) => (logs += d));
  const exited = new Promise((resolve) => proc.on("exit", resolve));
  const g = {
    natsURL: `nats://127.0.0.1:${natsPort}`,
    httpURL: `http://127.0.0.1:${httpPort}`,
    logs: () => logs,
    /** Kills gated at once, as a crash would, and waits for its exit. */
    async kill() {
      proc.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGKILL");
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (proc.exitCode !== null) {
      await g.stop();
      throw new Error(`gated exited before it was ready:\n${logs}`);
    }
    try {
      const r = await fetch(`http://127.0.0.1:${httpPort}/readyz`);
      if (r.status === 200) {
        return g;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await g.stop();
      throw new Error(`gated not ready after 60s:\n${logs}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Connects to a gated's NATS server. */
export function natsConnect(url, opts = {}) {
  return connect({ servers: url, ...opts });
}

/** A policy file a tenant adds: cache flushes are held for an operator for three seconds only. */
const holdPolicy = `package gated

hold contains {"rule": "hold_cache_flush", "why": "a cache flush empties every edge", "deadline": "3s"} if {
\tstartswith(input.proposal.action, "dns_flush_")
}
`;

/**
 * Starts gated holding acme's dns_* actions for an operator (the default
 * bundle's hold_listed_action, for an hour) and dns_flush_* ones for three
 * seconds, with one operator, alice, for acme, whose seed `gated operator
 * keygen` makes. Returns what startGated returns, and decide(id, ...flags),
 * which signs and sends alice's decision with `gated operator decide` and
 * resolves with {code, output}.
 */
export async function startHoldGated() {
  const bin = gatedBinary();
  const dir = mkdtempSync(join(tmpdir(), "gated-ts-holds-"));
  const seed = join(dir, "alice.seed");
  const out = execFileSync(bin, ["operator", "keygen", "--out", seed, "--id", "alice", "--tenant", "acme"], { encoding: "utf8" });
  const operators = join(dir, "operators.yaml");
  writeFileSync(operators, out.slice(out.indexOf("operators:")));
  const data = join(dir, "holds.yaml");
  writeFileSync(data, 'gated:\n  config:\n    operator_holds:\n      actions: {acme: ["dns_*"]}\n');
  mkdirSync(join(dir, "policies"));
  writeFileSync(join(dir, "policies", "holds_mine.rego"), holdPolicy);
  const g = await startGated("--operators", operators, "--policy-data", data, "--policies", join(dir, "policies"));
  const stop = g.stop;
  g.stop = async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  };
  g.decide = (id, ...flags) =>
    new Promise((resolve) => {
      execFile(
        bin,
        ["operator", "decide", "acme", id, "--operator", "alice", "--seed-file", seed, "--nats-url", g.natsURL, ...flags],
        { timeout: 60_000 },
        (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, output: stdout + stderr }),
      );
    });
  return g;
}

/** A write to a DNS zone, which acme's policy holds for an operator. */
export function dnsProposal(id, action = "dns_delete_record") {
  return {
    id,
    tenant: "acme",
    kind: "action",
    action,
    class: "write",
    blast_radius: "single_device",
    target: { zone: "example.org", record: id },
    reason: "retire a record",
    requested_by: { agent: "dns-bot", session: "s-1" },
  };
}

/** The example proposal examples/proposals/<name>, with changes merged over its top level. */
export function example(name, changes = {}) {
  const p = JSON.parse(readFileSync(`${repoRoot}/examples/proposals/${name}`, "utf8"));
  return { ...p, ...changes };
}
