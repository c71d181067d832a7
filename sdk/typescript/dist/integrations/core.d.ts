import { GatedError } from "../errors.js";
import type { CallOptions } from "../client.js";
import { type Identity, type Proposer, type ToolGateOptions } from "../gate.js";
import type { Verdict } from "../types.js";
import { type Catalog, type ToolMapping } from "./catalog.js";
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
export declare class ToolRefusedError extends GatedError {
    readonly code: string;
    readonly refusal: Refusal;
    constructor(refusal: Refusal, options?: {
        cause?: unknown;
    });
}
/**
 * The call is held for an operator: it has not run and may not run until
 * the operator approves. `verdict` is the held verdict; wait for the
 * decision with GatedTools.decide(callKey).
 */
export declare class ToolHeldError extends ToolRefusedError {
    readonly code: string;
    readonly verdict: Verdict;
    readonly callKey: string | undefined;
    constructor(refusal: Refusal, verdict: Verdict, callKey: string | undefined, options?: {
        cause?: unknown;
    });
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
/**
 * An agent's tools behind gated. Each call of a tool is mapped through the
 * catalog: a read tool runs at once; a write or destructive tool runs once,
 * only when gated approves the proposal of that call, through the approval's
 * grant (verified, used once), with the arguments the proposal carried, and
 * its outcome is reported. The framework integrations (./ai.js,
 * ./openai-agents.js, ./langgraph.js) call run, check and decide.
 */
export declare class GatedTools {
    readonly catalog: Catalog;
    private readonly proposer;
    private readonly identity;
    private readonly gate;
    private readonly probe;
    private readonly newId;
    private readonly framework;
    private readonly pending;
    private readonly operatorTimeoutMs;
    /** Throws InvalidConfigError for an unusable identity or option, CatalogError for an unusable catalog. */
    constructor(proposer: Proposer, identity: Identity, opts?: GatedToolsOptions);
    /** How the calls of tool become proposals. */
    mapping(tool: string): ToolMapping;
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
    run<R>(tool: string, args: unknown, exec: (reviewed: Record<string, unknown>) => R | Promise<R>, opts?: RunOptions): Promise<R>;
    /**
     * Proposes the call without running it or using its grant, for
     * frameworks that ask first whether a call needs approval: resolves
     * "approved" (run it with run and the same callKey: the stored approval
     * answers) or "held" (wait with decide(callKey)). Throws ToolRefusedError
     * for a refusal, the client's errors when gated cannot be asked.
     */
    check(tool: string, args: unknown, callKey: string, opts?: CallOptions): Promise<"approved" | "held">;
    /** The held verdict of the call of callKey, while an operator decides it; undefined for a call not held. */
    held(callKey: string): Verdict | undefined;
    /**
     * Waits for the operator's decision on the held call of callKey, trusting
     * only gated's stored verdict: resolves with the approval (then run the
     * call with run and the same callKey), throws ToolRefusedError for a
     * rejection or the hold's deadline passing, NoVerdictError when the wait
     * ends first.
     */
    decide(callKey: string, opts?: CallOptions): Promise<Verdict>;
    private remember;
    private forget;
    /**
     * The call's arguments, read once: encoded as the proposal carries them
     * and parsed back, so the target, the proposal and the tool all see that
     * one copy, never the framework's object.
     */
    private read;
    /** The typed error of a call gated did not let run; errors of reaching gated come back as they are. */
    private refusal;
}
