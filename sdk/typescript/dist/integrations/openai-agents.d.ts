import type { CallOptions } from "../client.js";
import { type GatedTools } from "./core.js";
/** What the gate reads of an Agents SDK function tool. */
export interface FunctionToolLike {
    type: "function";
    name: string;
    invoke: (runContext: never, input: string, details?: {
        toolCall?: {
            callId?: string;
        };
        signal?: AbortSignal;
    }) => Promise<unknown>;
    needsApproval: (runContext: never, input: never, callId?: string) => Promise<boolean>;
}
/** What the gate reads of a run's interruption (a RunToolApprovalItem). */
export interface ApprovalItemLike {
    rawItem?: unknown;
}
/** What the gate reads of a run result, or of its state: the interruptions, and approve and reject. */
export interface InterruptedRunLike<I extends ApprovalItemLike> {
    interruptions?: I[];
    state: {
        approve(item: I): void;
        reject(item: I, options?: {
            message?: string;
        }): void;
    };
}
/**
 * Returns the tools with every function tool behind gated; other tools
 * (hosted, computer, shell) are returned as they are. A call is proposed
 * when the Agents SDK asks whether it needs approval: an approval lets it
 * run, once, through its grant, with the arguments the proposal carried; a
 * refusal lets the SDK call it, and the call answers the model with the
 * refusal's text in place of running (the tool did not run); a call held
 * for an operator needs approval, so the run stops with an interruption
 * that decideApprovals resolves by the operator's decision. When gated
 * cannot be asked, needsApproval throws and the run fails: nothing runs.
 * A tool's own needsApproval still applies after gated's approval.
 */
export declare function gateAgentTools<T extends object>(gated: GatedTools, tools: T[]): T[];
/**
 * Resolves a run's interruptions that gated holds, by the operator's
 * decision as gated's stored verdict has it: an approval approves the
 * call (the run, resumed with the state, runs it through its grant), a
 * rejection or the hold's deadline rejects it with the refusal's text for
 * the model. Interruptions gated does not hold are left to the caller.
 * Resolves with the number resolved; throws when gated cannot be asked
 * (nothing is approved then).
 */
export declare function decideApprovals<I extends ApprovalItemLike>(gated: GatedTools, run: InterruptedRunLike<I>, opts?: CallOptions): Promise<number>;
