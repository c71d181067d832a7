import { GatedError } from "./errors.js";
import { type CallOptions, type GrantCallOptions, type GrantUse } from "./client.js";
import { type GrantClaims, type GrantExpectation, type OutcomeReport, type OutcomeStatus } from "./grant.js";
import type { BlastRadius, Flags, Operator, Proposal, ProposalClass, Verdict } from "./types.js";
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
export declare class AbortedError extends GatedError {
    readonly code: string;
}
/** Throws InvalidToolSpecError unless spec is usable. */
export declare function validateToolSpec<A>(spec: ToolSpec<A>): void;
/** A fresh proposal id: a millisecond timestamp in base 36 (ids sort by time) and 64 random bits. */
export declare function newProposalId(): string;
/**
 * Puts gated in front of an agent runtime's tools: read tools run at once;
 * write and destructive tools run only after gated approves a proposal
 * describing the call.
 */
export declare class ToolGate {
    private readonly proposer;
    private readonly id;
    private readonly timeoutMs;
    private readonly newId;
    private readonly observe;
    private readonly awaitOperator;
    private readonly operatorTimeoutMs;
    private readonly allowUngranted;
    private readonly by;
    private readonly onReportError;
    /** Throws InvalidConfigError for an unusable identity or option. */
    constructor(proposer: Proposer, identity: Identity, opts?: ToolGateOptions);
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
    guard<A, R>(spec: ToolSpec<A>, fn: (args: A, ctx: {
        signal?: AbortSignal;
    }) => R | Promise<R>): GuardedTool<A, R>;
    /**
     * Reports what became of a call that authorize let run, on its
     * verdict's grant: started before the tool runs, then succeeded or failed
     * (with the error's text). A guarded tool does this itself. Throws
     * GrantError when the verdict has no grant, TransportError when the
     * report is not acknowledged.
     */
    reportOutcome(v: Verdict, status: OutcomeStatus, error?: string, opts?: CallOptions): Promise<void>;
    private report;
    /**
     * Tells gated this gate refused p's grant (status refused), which gated
     * audits as the executor's refusal. The refusal stands whether or not
     * the report gets through.
     */
    private reportRefusal;
    /** Reports the end of a call that ran: a failure to report must not hide the tool's result or error. */
    private reportAfter;
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
    authorize(action: string, cls: ProposalClass, change: Change, opts?: CallOptions): Promise<Verdict | null>;
    private authorizeCall;
    private proposal;
}
/**
 * Wraps fn so that it runs only when gated allows it (ToolGate.guard): a
 * read tool at once, a write or destructive tool only on approval.
 */
export declare function gate<A, R>(toolGate: ToolGate, spec: ToolSpec<A>, fn: (args: A, ctx: {
    signal?: AbortSignal;
}) => R | Promise<R>): GuardedTool<A, R>;
