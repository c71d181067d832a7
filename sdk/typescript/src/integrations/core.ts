// The core every framework integration stands on: a tool call of an agent
// framework, mapped through the catalog, becomes a proposal; the tool runs
// through the ToolGate (grant verified and used, outcome reported) with
// exactly the arguments gated reviewed; a refusal or a hold comes back as a
// typed error the framework turns into what its agent reads or a pause.

import { readFileSync } from "node:fs";

import {
  AwaitingOperatorError,
  GatedError,
  InvalidArgumentsError,
  InvalidConfigError,
  NotApprovedError,
  VerdictError,
} from "../errors.js";
import type { CallOptions } from "../client.js";
import { newProposalId, ToolGate, type Change, type Identity, type Proposer, type ToolGateOptions } from "../gate.js";
import { goMap, JSONValueError } from "../json.js";
import type { Verdict } from "../types.js";
import { ArgumentsError, decodeCatalog, mappingOf, readCall, type Catalog, type ToolMapping } from "./catalog.js";

/** What an agent reads when gated did not let its call run. */
export interface Refusal {
  /** "refused", or "held" while an operator decides. */
  gated: "refused" | "held";
  tool: string;
  action: string;
  /** The verdict's outcome (rejected, blocked, error, timeout, invalid), or bad_arguments, grant_refused. */
  outcome: string;
  stage?: string;
  reason: string;
  /** The proposal, as tenant.id, when one was made. */
  proposal?: string;
  /** The rule that refused or held it, when the verdict names one. */
  rule?: string;
}

/**
 * gated did not let the call run: a refusal, or bad arguments. The tool
 * did not run. `refusal` is what the agent should read; the message says
 * the same in a sentence. `cause` is the client's error.
 */
export class ToolRefusedError extends GatedError {
  override readonly code: string = "tool_refused";
  readonly refusal: Refusal;
  constructor(refusal: Refusal, options?: { cause?: unknown }) {
    super(refusalText(refusal), options);
    this.refusal = refusal;
  }
}

/**
 * The call is held for an operator: it has not run and may not run until
 * the operator approves. `verdict` is the held verdict; wait for the
 * decision with GatedTools.decide(callKey).
 */
export class ToolHeldError extends ToolRefusedError {
  override readonly code: string = "tool_held";
  readonly verdict: Verdict;
  readonly callKey: string | undefined;
  constructor(refusal: Refusal, verdict: Verdict, callKey: string | undefined, options?: { cause?: unknown }) {
    super(refusal, options);
    this.verdict = verdict;
    this.callKey = callKey;
  }
}

function refusalText(r: Refusal): string {
  const stage = r.stage ? ` at stage ${r.stage}` : "";
  const where = r.proposal ? ` (verdict ${r.proposal})` : "";
  if (r.gated === "held") {
    return `gated holds ${r.tool} for an operator: ${r.reason}${where}. The call was not made; it runs only once an operator approves.`;
  }
  return `gated did not approve ${r.tool}: ${r.outcome}${stage}: ${r.reason}${where}. The call was not made.`;
}

/** Options of GatedTools: the ToolGate's, and the catalog. */
export interface GatedToolsOptions extends ToolGateOptions {
  /** The catalog: decoded, its YAML or JSON text (catalogText), or a file (catalogFile). Default: none. */
  catalog?: Catalog;
  catalogText?: string;
  catalogFile?: string;
  /** The framework's name, in a proposal's default reason and its context_summary. */
  framework?: string;
}

/** How a call is told apart from others: the framework's tool call id, and the caller's signal and wait. */
export interface RunOptions extends CallOptions {
  /** The framework's id of the tool call; a call held and decided is run under its proposal again by it. */
  callKey?: string;
  /** The proposal's id when the call is not known by its callKey yet; default a new id. Every call must have its own. */
  proposalId?: string;
}

/** An approval sent back by the probe, so that a check never takes a grant's use. */
class Probed extends Error {
  constructor(readonly verdict: Verdict) {
    super("probed");
  }
}

interface Pending {
  id: string;
  tool: ToolMapping;
  held?: Verdict;
}

/**
 * An agent's tools behind gated. Each call of a tool is mapped through the
 * catalog: a read tool runs at once; a write or destructive tool runs once,
 * only when gated approves the proposal of that call, through the approval's
 * grant (verified, used once), with the arguments the proposal carried, and
 * its outcome is reported. The framework integrations (./ai.js,
 * ./openai-agents.js, ./langgraph.js) call run, check and decide.
 */
export class GatedTools {
  readonly catalog: Catalog;
  private readonly proposer: Proposer;
  private readonly identity: Identity;
  private readonly gate: ToolGate;
  private readonly probe: ToolGate;
  private readonly newId: () => string;
  private readonly framework: string;
  private readonly pending = new Map<string, Pending>();
  private readonly operatorTimeoutMs: number | undefined;

  /** Throws InvalidConfigError for an unusable identity or option, CatalogError for an unusable catalog. */
  constructor(proposer: Proposer, identity: Identity, opts: GatedToolsOptions = {}) {
    const sources = [opts.catalog, opts.catalogText, opts.catalogFile].filter((s) => s !== undefined);
    if (sources.length > 1) {
      throw new InvalidConfigError("invalid fleet client configuration: give one of catalog, catalogText and catalogFile");
    }
    if (opts.catalogFile !== undefined) {
      this.catalog = decodeCatalog(readFileSync(opts.catalogFile));
    } else if (opts.catalogText !== undefined) {
      this.catalog = decodeCatalog(opts.catalogText);
    } else {
      this.catalog = opts.catalog ?? {};
    }
    const { catalog: _c, catalogText: _t, catalogFile: _f, framework, ...gateOpts } = opts;
    this.newId = gateOpts.newId ?? newProposalId;
    this.gate = new ToolGate(proposer, identity, { ...gateOpts, newId: this.newId });
    this.probe = new ToolGate(
      {
        propose: async (p, o) => {
          throw new Probed(await proposer.propose(p, o));
        },
      },
      identity,
      { reviewTimeoutMs: gateOpts.reviewTimeoutMs, allowUngrantedApprovals: true, newId: this.newId },
    );
    this.proposer = proposer;
    this.identity = identity;
    this.framework = framework ?? "an agent framework";
    this.operatorTimeoutMs = gateOpts.operatorTimeoutMs;
  }

  /** How the calls of tool become proposals. */
  mapping(tool: string): ToolMapping {
    return mappingOf(tool, this.catalog);
  }

  /**
   * Runs exec with the call's arguments when gated allows it: a read tool
   * at once, a write or destructive tool only on approval of the call's
   * proposal, with a copy of exactly the arguments it carried (the reason
   * argument taken out). Throws ToolHeldError for a call held for an
   * operator (unless the gate waits for operators, awaitOperator),
   * ToolRefusedError for any other refusal; the client's NoVerdictError,
   * TransportError and the like when gated cannot be asked or does not
   * answer in time. In each case exec did not run.
   */
  async run<R>(tool: string, args: unknown, exec: (reviewed: Record<string, unknown>) => R | Promise<R>, opts: RunOptions = {}): Promise<R> {
    const m = this.mapping(tool);
    const { change, reviewed } = this.read(m, args);
    if (m.class === "read" && m.labels.length === 0) {
      return await exec(reviewed);
    }
    const key = opts.callKey;
    const known = key === undefined ? undefined : this.pending.get(key);
    change.id = known?.id ?? opts.proposalId ?? this.newId();
    const guarded = this.gate.guard({ action: m.action, class: m.class, describe: () => change, labels: m.labels }, (a: Record<string, unknown>) => exec(a));
    try {
      const r = await guarded(reviewed, { signal: opts.signal, timeoutMs: opts.timeoutMs });
      this.forget(key);
      return r;
    } catch (err) {
      const refused = this.refusal(m, err, key, change.id);
      if (refused instanceof ToolHeldError) {
        this.remember(key, { id: change.id, tool: m, held: refused.verdict });
      } else if (refused instanceof ToolRefusedError) {
        this.forget(key);
      }
      throw refused;
    }
  }

  /**
   * Proposes the call without running it or using its grant, for
   * frameworks that ask first whether a call needs approval: resolves
   * "approved" (run it with run and the same callKey: the stored approval
   * answers) or "held" (wait with decide(callKey)). Throws ToolRefusedError
   * for a refusal, the client's errors when gated cannot be asked.
   */
  async check(tool: string, args: unknown, callKey: string, opts: CallOptions = {}): Promise<"approved" | "held"> {
    const m = this.mapping(tool);
    const { change, reviewed } = this.read(m, args);
    if (m.class === "read" && m.labels.length === 0) {
      return "approved";
    }
    change.id = this.newId();
    this.remember(callKey, { id: change.id, tool: m });
    try {
      await this.probe.authorize(m.action, m.class, { ...change, arguments: reviewed }, opts);
    } catch (err) {
      if (err instanceof Probed) {
        return "approved";
      }
      const refused = this.refusal(m, err, callKey, change.id);
      if (refused instanceof ToolHeldError) {
        this.remember(callKey, { id: change.id, tool: m, held: refused.verdict });
        return "held";
      }
      if (!(refused instanceof ToolRefusedError)) {
        this.forget(callKey);
      }
      // A refusal stays under the call's key: run then reads the same
      // verdict again rather than proposing the call anew.
      throw refused;
    }
    throw new NotApprovedError(`gated: the check of ${tool} ended without a verdict`);
  }

  /** The held verdict of the call of callKey, while an operator decides it; undefined for a call not held. */
  held(callKey: string): Verdict | undefined {
    return this.pending.get(callKey)?.held;
  }

  /**
   * Waits for the operator's decision on the held call of callKey, trusting
   * only gated's stored verdict: resolves with the approval (then run the
   * call with run and the same callKey), throws ToolRefusedError for a
   * rejection or the hold's deadline passing, NoVerdictError when the wait
   * ends first.
   */
  async decide(callKey: string, opts: CallOptions = {}): Promise<Verdict> {
    const p = this.pending.get(callKey);
    if (!p?.held) {
      throw new InvalidConfigError(`invalid fleet client configuration: no call ${JSON.stringify(callKey)} is held`);
    }
    if (typeof this.proposer.awaitDecision !== "function") {
      throw new InvalidConfigError("invalid fleet client configuration: deciding held calls needs a Proposer with awaitDecision, such as a Client");
    }
    try {
      return await this.proposer.awaitDecision(p.held, { signal: opts.signal, timeoutMs: opts.timeoutMs ?? this.operatorTimeoutMs });
    } catch (err) {
      if (err instanceof VerdictError) {
        this.forget(callKey);
        throw this.refusal(p.tool, err, callKey, p.id);
      }
      throw err;
    }
  }

  private remember(key: string | undefined, p: Pending): void {
    if (key !== undefined) {
      this.pending.set(key, p);
    }
  }

  private forget(key: string | undefined): void {
    if (key !== undefined) {
      this.pending.delete(key);
    }
  }

  /**
   * The call's arguments, read once: encoded as the proposal carries them
   * and parsed back, so the target, the proposal and the tool all see that
   * one copy, never the framework's object.
   */
  private read(m: ToolMapping, args: unknown): { change: Change; reviewed: Record<string, unknown> } {
    let call;
    try {
      call = readCall(m, args);
    } catch (err) {
      throw this.refusal(m, err, undefined, undefined);
    }
    let text: string;
    try {
      text = goMap(call.arguments, "arguments");
    } catch (err) {
      const path = err instanceof JSONValueError ? err.path : "arguments";
      const bad = new InvalidArgumentsError(path, `invalid arguments of ${m.tool}: ${(err as Error).message}`, { cause: err });
      throw this.refusal(m, bad, undefined, undefined);
    }
    const reviewed = JSON.parse(text) as Record<string, unknown>;
    const mapped = readCall(m, reviewed);
    const change: Change = {
      target: mapped.target,
      reason: call.reason || `${this.identity.agent} called the tool ${m.tool} through ${this.framework}`,
      blast_radius: m.blastRadius,
      context_summary: `tool ${m.tool} of ${this.framework}; class ${m.class} (${m.classFrom === "catalog" ? "from the catalog" : "the default for a tool the catalog does not name"})`,
    };
    if (m.reviewer) {
      change.reviewer = m.reviewer;
    }
    if (m.labels.length > 0) {
      change.labels = [...m.labels];
    }
    return { change, reviewed };
  }

  /** The typed error of a call gated did not let run; errors of reaching gated come back as they are. */
  private refusal(m: ToolMapping, err: unknown, key: string | undefined, id: string | undefined): unknown {
    const proposal = id ? `${this.identity.tenant}.${id}` : undefined;
    if (err instanceof AwaitingOperatorError) {
      const v = err.verdict;
      const r: Refusal = {
        gated: "held",
        tool: m.tool,
        action: m.action,
        outcome: v.outcome,
        stage: v.stage,
        reason: v.awaiting_operator?.reason || v.reason || "held for an operator",
        proposal,
        rule: v.awaiting_operator?.rule,
      };
      return new ToolHeldError(clean(r), v, key, { cause: err });
    }
    if (err instanceof VerdictError) {
      const v = err.verdict;
      const r: Refusal = {
        gated: "refused",
        tool: m.tool,
        action: m.action,
        outcome: v.outcome,
        stage: v.stage,
        reason: v.reason ?? "",
        proposal,
        rule: v.policy?.denies?.[0]?.rule,
      };
      return new ToolRefusedError(clean(r), { cause: err });
    }
    if (err instanceof NotApprovedError) {
      // A grant that does not hold or was used, an approval of another proposal.
      return new ToolRefusedError(clean({ gated: "refused", tool: m.tool, action: m.action, outcome: err.code, reason: err.message, proposal }), {
        cause: err,
      });
    }
    if (err instanceof ArgumentsError || err instanceof InvalidArgumentsError) {
      return new ToolRefusedError(clean({ gated: "refused", tool: m.tool, action: m.action, outcome: "bad_arguments", reason: err.message }), {
        cause: err,
      });
    }
    return err;
  }
}

function clean(r: Refusal): Refusal {
  for (const k of Object.keys(r) as (keyof Refusal)[]) {
    if (r[k] === undefined || r[k] === "") {
      delete r[k];
    }
  }
  return r;
}
