// The tool gate: put gated in front of an agent runtime's tools. It mirrors
// the Go ToolGate (bus/fleet/toolgate.go).

import { randomBytes } from "node:crypto";

import {
  AwaitingOperatorError,
  FoldedKeysError,
  GatedError,
  InvalidArgumentsError,
  InvalidConfigError,
  InvalidToolSpecError,
  NotApprovedError,
  VerdictError,
  checkVerdict,
} from "./errors.js";
import { defaultWaitMs, type CallOptions, type GrantCallOptions, type GrantUse } from "./client.js";
import { decodeGrant, GrantError, GrantUseError, type GrantClaims, type GrantExpectation, type OutcomeReport, type OutcomeStatus } from "./grant.js";
import { findFoldedKeys } from "./fold.js";
import { describe as typeOf, goMap, isPlainObject, JSONValueError, parseJSON } from "./json.js";
import type { BlastRadius, Flags, Operator, Proposal, ProposalClass, Verdict } from "./types.js";
import { encodeProposal, schemaVersion, validAction, validTenant } from "./wire.js";

/**
 * What a ToolGate needs to reach gated; Client implements it. propose must
 * resolve only for an approval. verifyGrant and useGrant are needed unless
 * the gate accepts approvals without grants (allowUngrantedApprovals);
 * reportOutcome is used when present.
 */
export interface Proposer {
  propose(p: Proposal, opts?: CallOptions): Promise<Verdict>;
  /** Waits for the verdict that replaces a held one, resolving only for an approval; needed with awaitOperator. */
  awaitDecision?(held: Verdict, opts?: CallOptions): Promise<Verdict>;
  /** Verifies an approval's grant against what is about to run (Client.verifyGrant). */
  verifyGrant?(token: string, expect: GrantExpectation, opts?: GrantCallOptions): Promise<GrantClaims>;
  /** Takes a grant's single use from gated (Client.useGrant). */
  useGrant?(token: string, by: string, opts?: CallOptions): Promise<GrantUse>;
  /** Reports what became of a granted action (Client.reportOutcome). */
  reportOutcome?(r: OutcomeReport, opts?: CallOptions): Promise<void>;
}

/** Who proposes through a ToolGate. */
export interface Identity {
  /** The tenant token, [a-z0-9_-]{1,64}. Required. */
  tenant: string;
  /** The proposing agent (requested_by.agent); gated keeps it from reviewing its own proposals. Required. */
  agent: string;
  /** The agent's session (requested_by.session). */
  session?: string;
  /** The human on whose behalf the agent acts. */
  operator?: Operator;
  /** A persona to ask for unless a Change names its own; the policy's routes outrank it. */
  reviewer?: string;
}

/** One call of a mutating tool: what gated reviews. */
export interface Change {
  /** The proposal id, an idempotency key; default a new id per call. */
  id?: string;
  /** What the call acts on, e.g. {host: "web-7", service: "nginx", tags: ["production"]}. */
  target?: Record<string, unknown>;
  /** Why the agent wants to act (at most 8 KiB). */
  reason?: string;
  /** single_device, cluster or tenant_wide. Required by gated for write and destructive tools. */
  blast_radius?: BlastRadius;
  incident_id?: string;
  /** What the agent knows that a reviewer should too (at most 64 KiB). */
  context_summary?: string;
  /** The proposal's flags; the default policy refuses skip_review and force_approve outright. */
  flags?: Flags;
  /** A persona for this call, over Identity.reviewer. */
  reviewer?: string;
  /**
   * Flow labels the proposal adds to its action's (docs/POLICIES.md#flows):
   * what the call reads (private, secret, pii), untrusted for untrusted
   * output, egress for a call that communicates outside. A read with
   * labels is proposed, so that its labels join the agent's flow state
   * when its grant is used; a read without is not.
   */
  labels?: string[];
  /**
   * The exact arguments the tool runs with: the proposal carries them, the
   * policy and the reviewer read them, and the approval's grant binds
   * them. Set them with authorize, and then run the tool with exactly
   * these, as JSON: a copy parsed from JSON.stringify of them taken before
   * authorize, never an object that can change while gated reviews. A JSON
   * object; a guarded tool's are the call's own, set by the gate, and its
   * describe must leave them out.
   */
  arguments?: Record<string, unknown>;
}

/**
 * Declares a tool: its action token, its class, and how a call's arguments
 * become the Change to review. A write or destructive tool takes one JSON
 * object as its arguments (what a model's tool call is).
 */
export interface ToolSpec<A> {
  /** The tool's name on the wire, [A-Za-z0-9_-]{1,128}. */
  action: string;
  /** read, write or destructive. A read tool runs without a proposal: never let a model choose it. */
  class: ProposalClass;
  /**
   * Turns a call's arguments into the Change to review: what the call
   * touches (target), why, how far it reaches. Required for write and
   * destructive tools. It gets a copy of the arguments as the proposal
   * carries them, and leaves the Change's arguments out: the gate puts
   * the call's own there.
   */
  describe?: (args: A) => Change;
  /**
   * Flow labels of the tool's calls (docs/POLICIES.md#flows). A read tool
   * with labels is proposed, with describe, so that its labels join the
   * agent's flow state when its grant is used.
   */
  labels?: string[];
}

/** Options of a ToolGate. */
export interface ToolGateOptions {
  /** How long a guarded call waits for its verdict when it names no timeoutMs. Default 90 000. */
  reviewTimeoutMs?: number;
  /** Makes the id of a call whose Change names none; every id must be new. */
  newId?: () => string;
  /** Called with every proposal sent and its verdict, approvals included, before the tool runs (or not). */
  observe?: (p: Proposal, v: Verdict) => void;
  /**
   * A call whose proposal the policy holds for an operator throws
   * AwaitingOperatorError (not approved) unless this is true: then it waits,
   * with the proposer's awaitDecision, for the operator's decision or the
   * hold's deadline, and runs only on an approval. Default false.
   */
  awaitOperator?: boolean;
  /** How long a call waits for an operator when awaitOperator is set. Default: the hold's deadline and a minute more. */
  operatorTimeoutMs?: number;
  /**
   * Accepts an approval that carries no grant, as a gated older than grants
   * sends. Default false: gated signs every approval, so one without a
   * grant is refused (GrantError, member grant) and the tool does not run.
   * An approval that carries a grant is verified and used either way.
   */
  allowUngrantedApprovals?: boolean;
  /** Who takes a grant's use, as gated records it. Default the identity's agent, and "/" and its session when it has one. */
  by?: string;
  /**
   * Called when the succeeded or failed outcome of a call that ran cannot be
   * reported; the call still resolves with the tool's result or throws its
   * error. Default: ignored.
   */
  onReportError?: (err: Error, report: OutcomeReport) => void;
}

/** A guarded tool: resolves with the tool's result, or throws without running it. */
export type GuardedTool<A, R> = (args: A, opts?: CallOptions) => Promise<R>;

/** The approval came, but the caller aborted before the tool could run. The tool did not run. */
export class AbortedError extends GatedError {
  override readonly code: string = "aborted";
}

/** Throws InvalidToolSpecError unless spec is usable. */
export function validateToolSpec<A>(spec: ToolSpec<A>): void {
  if (!validAction(spec?.action)) {
    throw new InvalidToolSpecError(`invalid tool spec: action ${JSON.stringify(spec?.action)} must match [A-Za-z0-9_-]{1,128}`);
  }
  switch (spec.class) {
    case "read":
      if (spec.labels?.length && typeof spec.describe !== "function") {
        throw new InvalidToolSpecError(`invalid tool spec: read tool ${spec.action} has labels and needs describe to say what a call reads`);
      }
      return;
    case "write":
    case "destructive":
      if (typeof spec.describe !== "function") {
        throw new InvalidToolSpecError(`invalid tool spec: ${spec.class} tool ${spec.action} needs describe to say what a call changes`);
      }
      return;
    default:
      throw new InvalidToolSpecError(`invalid tool spec: tool ${spec.action} has class ${JSON.stringify(spec.class)}; want read, write or destructive`);
  }
}

/** A fresh proposal id: a millisecond timestamp in base 36 (ids sort by time) and 64 random bits. */
export function newProposalId(): string {
  return Date.now().toString(36) + "-" + randomBytes(8).toString("hex");
}

/**
 * Puts gated in front of an agent runtime's tools: read tools run at once;
 * write and destructive tools run only after gated approves a proposal
 * describing the call.
 */
export class ToolGate {
  private readonly proposer: Proposer;
  private readonly id: Identity;
  private readonly timeoutMs: number;
  private readonly newId: () => string;
  private readonly observe: ((p: Proposal, v: Verdict) => void) | undefined;
  private readonly awaitOperator: boolean;
  private readonly operatorTimeoutMs: number | undefined;
  private readonly allowUngranted: boolean;
  private readonly by: string;
  private readonly onReportError: ((err: Error, report: OutcomeReport) => void) | undefined;

  /** Throws InvalidConfigError for an unusable identity or option. */
  constructor(proposer: Proposer, identity: Identity, opts: ToolGateOptions = {}) {
    if (!proposer || typeof proposer.propose !== "function") {
      throw new InvalidConfigError("invalid fleet client configuration: a ToolGate needs a Proposer such as a Client");
    }
    const id = identity ?? ({} as Identity);
    if (!validTenant(id.tenant)) {
      throw new InvalidConfigError(`invalid fleet client configuration: identity tenant ${JSON.stringify(id.tenant)} must match [a-z0-9_-]{1,64}`);
    }
    if (typeof id.agent !== "string" || id.agent.trim() === "") {
      throw new InvalidConfigError("invalid fleet client configuration: identity needs an agent name");
    }
    if (id.operator && (typeof id.operator.id !== "string" || id.operator.id.trim() === "")) {
      throw new InvalidConfigError("invalid fleet client configuration: identity operator needs an id");
    }
    if (id.reviewer !== undefined && id.reviewer !== "" && !validTenant(id.reviewer)) {
      throw new InvalidConfigError(
        `invalid fleet client configuration: identity reviewer ${JSON.stringify(id.reviewer)} must be a persona name matching [a-z0-9_-]{1,64}`,
      );
    }
    const t = opts.reviewTimeoutMs ?? defaultWaitMs;
    if (!(t > 0) || !Number.isFinite(t)) {
      throw new InvalidConfigError(`invalid fleet client configuration: review timeout ${t} ms must be positive`);
    }
    if (opts.awaitOperator && typeof proposer.awaitDecision !== "function") {
      throw new InvalidConfigError("invalid fleet client configuration: awaitOperator needs a Proposer with awaitDecision, such as a Client");
    }
    const ot = opts.operatorTimeoutMs;
    if (ot !== undefined && (!(ot > 0) || !Number.isFinite(ot))) {
      throw new InvalidConfigError(`invalid fleet client configuration: operator timeout ${ot} ms must be positive`);
    }
    this.allowUngranted = opts.allowUngrantedApprovals === true;
    if (!this.allowUngranted && (typeof proposer.verifyGrant !== "function" || typeof proposer.useGrant !== "function")) {
      throw new InvalidConfigError(
        "invalid fleet client configuration: a ToolGate needs a Proposer that verifies and uses grants (verifyGrant, useGrant), such as a Client, unless allowUngrantedApprovals is set",
      );
    }
    if (opts.by !== undefined && (typeof opts.by !== "string" || opts.by.trim() === "")) {
      throw new InvalidConfigError("invalid fleet client configuration: by must name who uses grants");
    }
    this.by = opts.by ?? (id.session ? `${id.agent}/${id.session}` : id.agent);
    this.onReportError = opts.onReportError;
    this.proposer = proposer;
    this.awaitOperator = opts.awaitOperator === true;
    this.operatorTimeoutMs = ot;
    this.id = {
      ...id,
      operator: id.operator ? { ...id.operator, roles: id.operator.roles ? [...id.operator.roles] : undefined } : undefined,
    };
    this.timeoutMs = t;
    this.newId = opts.newId ?? newProposalId;
    this.observe = opts.observe;
  }

  /**
   * Wraps fn, a tool of the given spec, so that it runs only when gated
   * allows it: a read tool at once, a write or destructive tool once and
   * only on approval of a proposal built from the identity and
   * spec.describe(args), after the approval's grant verifies against that
   * proposal and gated takes its single use; it then reports the outcome
   * (started before fn runs, succeeded or failed after).
   *
   * A write or destructive call's arguments must be a JSON object. They
   * are encoded once, when the call is made, and the proposal carries them
   * whole (its arguments); describe and fn each get their own copy parsed
   * from exactly those bytes, never the caller's object, so fn acts on what
   * gated reviewed even if the caller changes its object while the review
   * is pending, and on no member the proposal did not show. The copy holds
   * what JSON holds: a member whose value is undefined is left out of it.
   *
   * Otherwise the guarded tool throws without running fn: an
   * InvalidArgumentsError for arguments that are not a JSON object, hold a
   * value JSON cannot write, or two member names equal under case folding
   * (nothing is proposed), a GrantError or GrantUseError
   * for a grant that is missing, does not hold or is used already, a
   * VerdictError for a verdict that is not an approval (an
   * AwaitingOperatorError for one held for an operator, unless the gate
   * was built with awaitOperator),
   * NoVerdictError when the review outlives the wait, InvalidToolSpecError,
   * or a transport error. fn gets the caller's abort signal.
   */
  guard<A, R>(spec: ToolSpec<A>, fn: (args: A, ctx: { signal?: AbortSignal }) => R | Promise<R>): GuardedTool<A, R> {
    let invalid: Error | undefined;
    try {
      validateToolSpec(spec);
      if (typeof fn !== "function") {
        throw new InvalidToolSpecError(`invalid tool spec: tool ${spec.action} has no function`);
      }
    } catch (err) {
      invalid = err as Error;
    }
    return async (args: A, opts?: CallOptions): Promise<R> => {
      if (invalid) {
        throw invalid;
      }
      if (spec.class === "read" && !spec.labels?.length) {
        return await fn(args, { signal: opts?.signal });
      }
      // The arguments are read once, here: what is proposed, described
      // and run is parsed from these bytes, whatever becomes of args.
      const text = encodeArguments(spec.action, args);
      const change = spec.describe!(JSON.parse(text) as A);
      if (change?.arguments !== undefined) {
        throw new InvalidToolSpecError(`invalid tool spec: describe of ${spec.action} sets arguments; the gate proposes the call's own`);
      }
      const { claims } = await this.authorizeCall(spec.action, spec.class, change, opts, text);
      const reviewed = JSON.parse(text) as A;
      if (!claims) {
        return await fn(reviewed, { signal: opts?.signal });
      }
      // The grant is used: say so before the tool runs. A report that
      // cannot be made stops the call here, before anything happened.
      await this.report(claims, "started", undefined, opts);
      let result: R;
      try {
        result = await fn(reviewed, { signal: opts?.signal });
      } catch (err) {
        await this.reportAfter(claims, "failed", errorText(err), opts);
        throw err;
      }
      await this.reportAfter(claims, "succeeded", undefined, opts);
      return result;
    };
  }

  /**
   * Reports what became of a call that authorize let run, on its
   * verdict's grant: started before the tool runs, then succeeded or failed
   * (with the error's text). A guarded tool does this itself. Throws
   * GrantError when the verdict has no grant, TransportError when the
   * report is not acknowledged.
   */
  async reportOutcome(v: Verdict, status: OutcomeStatus, error?: string, opts?: CallOptions): Promise<void> {
    if (typeof v?.grant !== "string" || v.grant === "") {
      throw new GrantError("grant", "grant: the verdict carries no grant to report an outcome on");
    }
    await this.report(decodeGrant(v.grant).claims, status, error, opts);
  }

  private async report(c: GrantClaims, status: OutcomeStatus, error: string | undefined, opts: CallOptions | undefined): Promise<void> {
    if (typeof this.proposer.reportOutcome !== "function") {
      return;
    }
    await this.proposer.reportOutcome(
      { gid: c.gid, tenant: c.tenant, proposal_id: c.proposal_id, status, error },
      { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs },
    );
  }

  /**
   * Tells gated this gate refused p's grant (status refused), which gated
   * audits as the executor's refusal. The refusal stands whether or not
   * the report gets through.
   */
  private async reportRefusal(p: Proposal, refusal: GrantError, opts: CallOptions | undefined): Promise<void> {
    if (typeof this.proposer.reportOutcome !== "function") {
      return;
    }
    try {
      await this.proposer.reportOutcome(
        { gid: "", tenant: p.tenant, proposal_id: p.id, status: "refused", error: refusal.message },
        { timeoutMs: opts?.timeoutMs ?? this.timeoutMs },
      );
    } catch {
      // Nothing runs either way.
    }
  }

  /** Reports the end of a call that ran: a failure to report must not hide the tool's result or error. */
  private async reportAfter(c: GrantClaims, status: OutcomeStatus, error: string | undefined, opts: CallOptions | undefined): Promise<void> {
    try {
      // Not the caller's signal: the tool ran, and its outcome is owed even to a caller that gave up.
      await this.report(c, status, error, { timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
    } catch (err) {
      try {
        this.onReportError?.(err as Error, { gid: c.gid, tenant: c.tenant, proposal_id: c.proposal_id, status, error });
      } catch {
        // the observer's own failure changes nothing
      }
    }
  }

  /**
   * Asks gated whether a call of action, of class, may make change, for
   * runtimes that dispatch tools dynamically. Resolves when the call may
   * run: at once with null for class read, else with the approval, whose
   * grant is verified and used by then (report the outcome with
   * reportOutcome). Throws as a guarded tool does.
   *
   * change.arguments, when set, are encoded once, when authorize is
   * called, and the proposal carries them: the runtime must then run the
   * tool with exactly these, as JSON (parse the tool's arguments from the
   * text it serialized and pass that copy both here and to the tool), and
   * with nothing beside them. A guarded tool does this itself.
   */
  async authorize(action: string, cls: ProposalClass, change: Change, opts?: CallOptions): Promise<Verdict | null> {
    const text = change?.arguments === undefined ? undefined : encodeArguments(action, change.arguments);
    return (await this.authorizeCall(action, cls, change, opts, text)).verdict;
  }

  private async authorizeCall(
    action: string,
    cls: ProposalClass,
    change: Change,
    opts: CallOptions | undefined,
    argumentsText: string | undefined,
  ): Promise<{ verdict: Verdict | null; claims: GrantClaims | null }> {
    switch (cls) {
      case "read":
        if (!change?.labels?.length) {
          return { verdict: null, claims: null };
        }
        break;
      case "write":
      case "destructive":
        break;
      default:
        throw new InvalidToolSpecError(`invalid tool spec: tool ${action} has class ${JSON.stringify(cls)}; want read, write or destructive`);
    }
    const p = this.proposal(action, cls, change ?? {}, argumentsText);
    let v: Verdict;
    try {
      try {
        v = await this.proposer.propose(p, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
      } catch (err) {
        if (!(err instanceof AwaitingOperatorError) || !this.awaitOperator) {
          throw err;
        }
        // Held: a person decides. Only the final verdict counts.
        this.observe?.(p, err.verdict);
        v = await this.proposer.awaitDecision!(err.verdict, { signal: opts?.signal, timeoutMs: this.operatorTimeoutMs });
      }
    } catch (err) {
      if (err instanceof VerdictError) {
        this.observe?.(p, err.verdict);
      }
      throw err;
    }
    this.observe?.(p, v);
    // Trust nothing but an approval of exactly this proposal, whatever the Proposer says.
    checkVerdict(v);
    if (v.tenant !== p.tenant || v.proposal_id !== p.id || v.action !== p.action) {
      throw new NotApprovedError(
        `proposal not approved: the approval names ${v.tenant}.${v.proposal_id} (${v.action}), not proposal ${p.tenant}.${p.id} (${p.action})`,
      );
    }
    if (v.grant === undefined || v.grant === "") {
      if (!this.allowUngranted) {
        const missing = new GrantError(
          "grant",
          `grant: the approval of ${p.tenant}.${p.id} carries no grant, and gated signs every approval; ${action} does not run`,
        );
        await this.reportRefusal(p, missing, opts);
        throw missing;
      }
      if (opts?.signal?.aborted) {
        throw new AbortedError(`approved, but the call was aborted before ${action} ran`, { cause: opts.signal.reason });
      }
      return { verdict: v, claims: null };
    }
    if (typeof this.proposer.verifyGrant !== "function" || typeof this.proposer.useGrant !== "function") {
      throw new GrantError("grant", `grant: the approval of ${p.tenant}.${p.id} carries a grant this gate's Proposer cannot verify; ${action} does not run`);
    }
    // The grant must name exactly what is about to run: these bytes, this
    // tenant, id, action and target (as sent, so as gated digested it).
    const { text, bytes } = encodeProposal(p);
    const sent = parseJSON(text) as { [k: string]: unknown };
    const expect: GrantExpectation = {
      tenant: p.tenant,
      proposal_id: p.id,
      action: p.action,
      proposal: bytes,
      target: sent["target"] ?? {},
    };
    let claims: GrantClaims;
    try {
      claims = await this.proposer.verifyGrant(v.grant, expect, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
    } catch (err) {
      if (err instanceof GrantError && !(err instanceof GrantUseError)) {
        await this.reportRefusal(p, err, opts);
      }
      throw err;
    }
    if (opts?.signal?.aborted) {
      throw new AbortedError(`approved, but the call was aborted before ${action} ran`, { cause: opts.signal.reason });
    }
    await this.proposer.useGrant(v.grant, this.by, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
    return { verdict: v, claims };
  }

  private proposal(action: string, cls: ProposalClass, c: Change, argumentsText: string | undefined): Proposal {
    const p: Proposal = {
      v: schemaVersion,
      id: c.id || this.newId(),
      tenant: this.id.tenant,
      kind: "action",
      action,
      class: cls,
      target: c.target,
      reason: c.reason,
      blast_radius: c.blast_radius,
      requested_by: { agent: this.id.agent, session: this.id.session },
      incident_id: c.incident_id,
      context_summary: c.context_summary,
      flags: { ...c.flags },
      reviewer: c.reviewer || this.id.reviewer,
    };
    if (c.labels?.length) {
      p.labels = [...c.labels];
    }
    if (this.id.operator) {
      p.operator = { ...this.id.operator };
    }
    if (argumentsText !== undefined) {
      // Fixed for the proposal's life: the Proposer, the observer and the
      // grant check all read these, and none can change them.
      Object.defineProperty(p, "arguments", { value: frozen(JSON.parse(argumentsText)), enumerable: true, writable: false, configurable: false });
    }
    return p;
  }
}

/**
 * Wraps fn so that it runs only when gated allows it (ToolGate.guard): a
 * read tool at once, a write or destructive tool only on approval.
 */
export function gate<A, R>(
  toolGate: ToolGate,
  spec: ToolSpec<A>,
  fn: (args: A, ctx: { signal?: AbortSignal }) => R | Promise<R>,
): GuardedTool<A, R> {
  if (!(toolGate instanceof ToolGate)) {
    const err = new InvalidToolSpecError(`invalid tool spec: tool ${String(spec?.action)} guarded without a ToolGate`);
    return () => Promise.reject(err);
  }
  return toolGate.guard(spec, fn);
}

/**
 * Encodes a call's arguments once, as the proposal carries them. Throws
 * InvalidArgumentsError for what is not a JSON object, holds what JSON
 * cannot write, or has two member names equal under case folding.
 */
function encodeArguments(action: string, args: unknown): string {
  if (!isPlainObject(args)) {
    throw new InvalidArgumentsError(
      "arguments",
      `invalid arguments: ${action} was called with a ${typeOf(args)}; a write or destructive tool takes a JSON object, which its proposal carries whole`,
    );
  }
  let text: string;
  try {
    text = goMap(args, "arguments");
  } catch (err) {
    const path = err instanceof JSONValueError ? err.path : "arguments";
    throw new InvalidArgumentsError(path, `invalid arguments of ${action}: ${(err as Error).message}`, { cause: err });
  }
  const found = findFoldedKeys(JSON.parse(text));
  if (found) {
    const folded = new FoldedKeysError(`invalid arguments of ${action}`, found);
    throw new InvalidArgumentsError(folded.path, folded.message, { cause: folded });
  }
  return text;
}

/** Freezes v, a value JSON.parse returned, at every depth. */
function frozen<T>(v: T): T {
  if (typeof v === "object" && v !== null) {
    for (const e of Object.values(v)) {
      frozen(e);
    }
    Object.freeze(v);
  }
  return v;
}

/** The text of a tool's error, for a failed outcome. */
function errorText(err: unknown): string {
  if (err instanceof Error) {
    return err.message || err.name;
  }
  try {
    return String(err);
  } catch {
    return "unprintable error";
  }
}
