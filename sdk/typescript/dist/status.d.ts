import { GatedError } from "./errors.js";
import type { Verdict } from "./types.js";
/** The stages of the v1 status contract, in the order a proposal passes them. */
export declare const statusStages: readonly ["received", "policy_decided", "review_started", "awaiting_operator", "decided"];
/** One stage of a proposal's progress. */
export type StatusStage = (typeof statusStages)[number];
/**
 * One step of a proposal's progress. reviewer is set on review_started,
 * deadline on review_started and awaiting_operator, reason on
 * awaiting_operator, verdict on decided. A status shows progress; only the
 * verdict a proposal call resolves with says what may run.
 */
export interface Status {
    v: 1;
    tenant: string;
    id: string;
    stage: StatusStage;
    /** When gated recorded the step, RFC 3339. */
    at: string;
    reviewer?: string;
    deadline?: string;
    reason?: string;
    verdict?: Verdict;
}
/**
 * A message on a proposal's status subject that is not a well-formed status
 * event. field names the member at fault ("" for the message as a whole,
 * "verdict.outcome" for a member of the verdict). A watch that throws it
 * stays open.
 */
export declare class StatusError extends GatedError {
    /** The member at fault, or "" for the message as a whole. */
    readonly field: string;
    /** What is wrong with it. */
    readonly problem: string;
    readonly code: string;
    constructor(
    /** The member at fault, or "" for the message as a whole. */
    field: string, 
    /** What is wrong with it. */
    problem: string);
}
/** Where gated publishes each stage of tenant's proposal id. */
export declare function statusSubject(tenant: string, id: string): string;
/** Where a watch asks gated for the status of tenant's proposal id. */
export declare function statusWatchSubject(tenant: string, id: string): string;
/**
 * Decodes one status event strictly: one JSON object, every member known
 * and given once, of the right type, the members of its stage only, and the
 * ones its stage requires present. Throws StatusError naming the member at
 * fault.
 */
export declare function decodeStatus(data: Uint8Array | string): Status;
/**
 * Reads one message of tenant's proposal id's status subject: the status,
 * or a StatusError when it is malformed or names another proposal.
 */
export declare function statusUpdate(tenant: string, id: string, data: Uint8Array | string): Status;
