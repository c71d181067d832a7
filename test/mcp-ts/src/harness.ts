// The parts the tests put together, all real: a gated serve (embedded
// NATS, the default bundle, the bundled SOP reviewer as a plugin
// process), the example MCP server examples/mcp-ops, and gated mcp
// between it and the TypeScript SDK's client.
//
// The binaries are $GATED_BIN and $MCP_OPS_BIN (make test-mcp-ts sets
// both to the ones make build made), or built once per test process with
// go build.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Progress } from "@modelcontextprotocol/sdk/types.js";

/** The repository's root directory. */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

/**
 * The policy data given to serve and to gated mcp alike: the policy's
 * tool catalog backs list_services' read claim, tenant locked may never
 * drop anything, and tenant held's restarts wait two seconds for an
 * operator nobody is, then time out.
 */
export const policyData = `gated:
  tools:
    list_services: {class: read}
  config:
    denied_actions:
      locked: ["drop_*"]
    operator_holds:
      actions:
        held: ["host_restart_*"]
      deadline: 2s
`;

/**
 * gated mcp's catalog: restart_service is proposed as
 * host_restart_service, which the default bundle's SOP-001 covers (the
 * SOP reviewer approves it), with the host and service as its target.
 */
export const catalog = `tools:
  restart_service:
    action: host_restart_service
    target:
      host: /host
      service: /service
`;

const scratch = mkdtempSync(join(tmpdir(), "gated-mcp-ts-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));

/** A fresh directory under the run's scratch directory. */
export function tempDir(): string {
  return mkdtempSync(join(scratch, "t-"));
}

const built = new Map<string, string>();

/** $env, or pkg built with go build once per process. */
function binary(env: string, pkg: string, name: string): string {
  const given = process.env[env];
  if (given) {
    return given;
  }
  let bin = built.get(pkg);
  if (!bin) {
    bin = join(scratch, name);
    execFileSync("go", ["build", "-o", bin, pkg], { cwd: repoRoot, stdio: "inherit" });
    built.set(pkg, bin);
  }
  return bin;
}

/** The gated binary. */
export function gatedBinary(): string {
  return binary("GATED_BIN", "./cmd/gated", "gated");
}

/** The example MCP server's binary. */
export function opsBinary(): string {
  return binary("MCP_OPS_BIN", "./examples/mcp-ops", "mcp-ops");
}

/** Ports freePort has returned in this process. */
const handedOut = new Set<number>();

/** A TCP port free on the loopback interface a moment ago. */
function anyFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A TCP port free on the loopback interface a moment ago, and not returned
 * before in this process: picked one after the other, the ports of NATS and
 * of gated's HTTP listener would otherwise be the same whenever the kernel
 * hands the first one out again.
 */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 1000; i++) {
    const port = await anyFreePort();
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error("no loopback port that was not handed out before");
}

/** The environment without GATED_* variables, so only flags configure gated. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("GATED_")) {
      env[k] = v;
    }
  }
  return env;
}

/** A child process whose output is kept for a failure's message. */
class Proc {
  readonly child: ChildProcess;
  private out = "";
  private readonly exited: Promise<void>;

  constructor(bin: string, args: string[]) {
    this.child = spawn(bin, args, { env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
    this.child.stdout?.on("data", (d: Buffer) => (this.out += d.toString()));
    this.child.stderr?.on("data", (d: Buffer) => (this.out += d.toString()));
    this.exited = new Promise((resolve) => this.child.on("exit", () => resolve()));
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  logs(): string {
    return this.out;
  }

  async kill(): Promise<void> {
    if (this.running) {
      this.child.kill("SIGKILL");
      await this.exited;
    }
  }
}

/** Polls url until it answers anything (readyStatus: that status), for a minute. */
async function waitHTTP(url: string, proc: Proc, readyStatus?: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (!proc.running) {
      throw new Error(`${url}: the process exited before it answered:\n${proc.logs()}`);
    }
    try {
      const r = await fetch(url);
      await r.arrayBuffer();
      if (readyStatus === undefined || r.status === readyStatus) {
        return;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      throw new Error(`nothing answers at ${url} after 60s:\n${proc.logs()}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What the tests share: one gated serve and the files both gated commands read. */
export interface Harness {
  natsURL: string;
  dataFile: string;
  catalogFile: string;
  /** The arguments of gated mcp for tenant, with extra flags. */
  mcpArgs(tenant: string, ...extra: string[]): string[];
  stop(): Promise<void>;
}

/** Starts gated serve on free ports with the tests' policy data. */
export async function startHarness(): Promise<Harness> {
  const dir = tempDir();
  const dataFile = join(dir, "mcp-data.yaml");
  writeFileSync(dataFile, policyData);
  const catalogFile = join(dir, "mcp-catalog.yaml");
  writeFileSync(catalogFile, catalog);
  const natsPort = await freePort();
  const httpPort = await freePort();
  const serve = new Proc(gatedBinary(), [
    "serve",
    "--data-dir", join(dir, "data"),
    "--nats-listen", `127.0.0.1:${natsPort}`,
    "--http", `127.0.0.1:${httpPort}`,
    "--policy-data", dataFile,
    "--log-level", "error",
  ]);
  const natsURL = `nats://127.0.0.1:${natsPort}`;
  const h: Harness = {
    natsURL,
    dataFile,
    catalogFile,
    mcpArgs: (tenant, ...extra) => [
      "mcp",
      "--nats-url", natsURL,
      "--tenant", tenant,
      "--agent", "ops-agent",
      "--policy-data", dataFile,
      "--catalog", catalogFile,
      "--log-level", "error",
      ...extra,
    ],
    stop: () => serve.kill(),
  };
  try {
    await waitHTTP(`http://127.0.0.1:${httpPort}/readyz`, serve, 200);
  } catch (err) {
    await serve.kill();
    throw err;
  }
  return h;
}

/** An MCP client session of the TypeScript SDK with gated mcp, and how to end it. */
export interface Session {
  client: Client;
  /** Ends the session and every process it started. */
  close(): Promise<void>;
}

function newClient(): Client {
  return new Client({ name: "gated-ts-test-agent", version: "1.0.0" });
}

/**
 * Connects the SDK's client over stdio: StdioClientTransport launches
 * gated mcp, which launches mcp-ops (logging to log) after --.
 */
export async function connectStdio(h: Harness, tenant: string, log: string, ...extra: string[]): Promise<Session> {
  const transport = new StdioClientTransport({
    command: gatedBinary(),
    args: [...h.mcpArgs(tenant, ...extra), "--", opsBinary(), "--log", log],
    stderr: "inherit",
  });
  const client = newClient();
  await client.connect(transport);
  return { client, close: () => client.close() };
}

/**
 * Connects the SDK's client over streamable HTTP: mcp-ops serves HTTP
 * (logging to log), gated mcp --listen fronts it with --upstream, and
 * StreamableHTTPClientTransport talks to gated mcp.
 */
export async function connectHTTP(h: Harness, tenant: string, log: string, ...extra: string[]): Promise<Session & { url: URL; transport: StreamableHTTPClientTransport }> {
  const opsAddr = `127.0.0.1:${await freePort()}`;
  const ops = new Proc(opsBinary(), ["--http", opsAddr, "--log", log]);
  const listen = `127.0.0.1:${await freePort()}`;
  let gated: Proc | undefined;
  try {
    await waitHTTP(`http://${opsAddr}/mcp`, ops);
    gated = new Proc(gatedBinary(), [...h.mcpArgs(tenant, ...extra), "--listen", listen, "--upstream", `http://${opsAddr}/mcp`]);
    await waitHTTP(`http://${listen}/mcp`, gated);
    const url = new URL(`http://${listen}/mcp`);
    const transport = new StreamableHTTPClientTransport(url);
    const client = newClient();
    await client.connect(transport);
    const g = gated;
    return {
      client,
      url,
      transport,
      close: async () => {
        await client.close();
        await g.kill();
        await ops.kill();
      },
    };
  } catch (err) {
    await gated?.kill();
    await ops.kill();
    throw err;
  }
}

/** One line of mcp-ops' --log file: a call the server executed. */
export interface OpsCall {
  tool: string;
  arguments: Record<string, unknown>;
}

/** The calls the example server executed, from its --log file. */
export function readOpsLog(path: string): OpsCall[] {
  let data: string;
  try {
    data = readFileSync(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") {
      return [];
    }
    throw err;
  }
  return data
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as OpsCall);
}

/** A tool result as the tests read it. */
export interface ToolResult {
  isError?: boolean;
  content?: unknown;
  _meta?: Record<string, unknown>;
}

/** The text of a tool result's text contents. */
export function resultText(res: ToolResult): string {
  if (!Array.isArray(res.content)) {
    return "";
  }
  return res.content
    .filter((c): c is { type: "text"; text: string } => typeof c === "object" && c !== null && (c as { type?: unknown }).type === "text")
    .map((c) => c.text)
    .join("");
}

/** The verdict gated mcp put in a result's _meta, if any. */
export interface VerdictMeta {
  tenant: string;
  proposal_id: string;
  outcome: string;
  stage: string;
  reason: string;
  /** "locally" on a read the gateway's own evaluation approved (docs/MCP.md, "Every call on the record"). */
  decided?: string;
  /** "pending" on such a read: its audit record is written after the answer. */
  audit?: string;
}

/** The verdict in a result's _meta["gated/verdict"], or undefined. */
export function verdictOf(res: ToolResult): VerdictMeta | undefined {
  return res._meta?.["gated/verdict"] as VerdictMeta | undefined;
}

/** Collects progress notifications for one call. */
export class ProgressLog {
  readonly messages: string[] = [];
  readonly onprogress = (p: Progress): void => {
    this.messages.push(p.message ?? "");
  };
}

/** The compiled TypeScript MCP server of upstream.ts. */
export const upstreamScript = fileURLToPath(new URL("./upstream.js", import.meta.url));

/**
 * Connects the SDK's client over stdio to gated mcp in front of
 * upstream.ts (logging to log), with the catalog in catalogFile instead
 * of the harness's.
 */
export async function connectUpstream(h: Harness, tenant: string, catalogFile: string, log: string): Promise<Session> {
  const args = h.mcpArgs(tenant);
  args[args.indexOf("--catalog") + 1] = catalogFile;
  const transport = new StdioClientTransport({
    command: gatedBinary(),
    args: [...args, "--", process.execPath, upstreamScript, "--log", log],
    stderr: "inherit",
  });
  const client = newClient();
  await client.connect(transport);
  return { client, close: () => client.close() };
}

/** One event of the audit stream, as gated audit query --json prints it. */
export interface AuditEvent {
  event: string;
  data?: Record<string, unknown>;
}

/**
 * The proposal gated decided for tenant's proposal id, as its policy read
 * it (the policy.decided event's input.proposal in the audit stream), read
 * with gated audit query.
 */
export function decidedProposal(h: Harness, tenant: string, id: string): Record<string, unknown> {
  const out = execFileSync(gatedBinary(), ["audit", "query", "--json", "--tenant", tenant, "--limit", "0", "--nats-url", h.natsURL], { env: cleanEnv(), encoding: "utf8" });
  for (const line of out.split("\n")) {
    if (line === "") {
      continue;
    }
    // One event a line: {"seq", "stored", "subject", "record": {"event", "data", ...}}.
    const e = (JSON.parse(line) as { record?: AuditEvent }).record;
    const input = e?.data?.["input"] as { proposal?: Record<string, unknown> } | undefined;
    if (e?.event === "policy.decided" && input?.proposal?.["id"] === id) {
      return input.proposal;
    }
  }
  throw new Error(`no policy.decided event of ${tenant}.${id} in the audit stream:\n${out}`);
}
