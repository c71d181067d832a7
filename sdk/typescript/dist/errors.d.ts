import type { Verdict } from "./types.js";
/** The root of every error this package throws. `code` names its kind. */
export declare class GatedError extends Error {
    /** The kind of error, as the shared test vectors name it (e.g. "no_verdict"). */
    readonly code: string;
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/**
 * A proposal cannot even be addressed: it is not a JSON object with valid
 * tenant, id and action tokens, or it cannot be encoded. gated never sees it.
 */
export declare class BadProposalError extends GatedError {
    readonly code: string;
}
/**
 * A proposal's arguments hold an object with two member names equal under
 * Unicode simple case folding (Go's strings.EqualFold), such as "host" and
 * "hoſt" (U+017F): a reader that matches names without case could act on
 * either, so gated refuses the proposal as invalid, and this client does
 * not publish it. Rename one member.
 */
export declare class FoldedKeysError extends BadProposalError {
    readonly code: string;
    /** The object, as gated names it: arguments, then the path to it, e.g. arguments.opts or arguments.ops.1. */
    readonly path: string;
    /** The object's place in the arguments, a JSON Pointer (RFC 6901); "" for the arguments themselves. */
    readonly pointer: string;
    /** The two member names, in the order of their UTF-8 bytes. */
    readonly key: string;
    readonly other: string;
    constructor(where: string, found: {
        pointer: string;
        key: string;
        other: string;
    });
}
/**
 * No verdict arrived before the deadline or the abort. The proposal may
 * still be decided later: look it up with Client.verdict, and never act on
 * it before.
 */
export declare class NoVerdictError extends GatedError {
    readonly code: string;
}
/**
 * The id was already used by a different proposal of the same tenant, or
 * the verdict answers other bytes under this id. Choose a new id.
 */
export declare class IdReusedError extends GatedError {
    readonly code: string;
}
/** The gated.review service did not take the request. Retry with backoff, or propose instead. */
export declare class ServiceUnavailableError extends GatedError {
    readonly code: string;
}
/** A proposal sent to gated.review.<tenant> names another tenant. */
export declare class TenantMismatchError extends GatedError {
    readonly code: string;
}
/** An option of the client or the gate is unusable. */
export declare class InvalidConfigError extends GatedError {
    readonly code: string;
}
/** A guarded tool's spec is unusable; such a tool never runs. */
export declare class InvalidToolSpecError extends GatedError {
    readonly code: string;
}
/**
 * A guarded call's arguments cannot be reviewed: they are not a plain
 * object, or hold something that is not JSON (a bigint, a function, a
 * symbol, a Date or another class instance, NaN or an infinity, undefined
 * in an array, a cycle), or two member names equal under simple case
 * folding (its cause is then a FoldedKeysError). The tool does not run and
 * nothing is proposed.
 */
export declare class InvalidArgumentsError extends InvalidToolSpecError {
    readonly code: string;
    /** Where in the arguments, e.g. "arguments", "arguments.opts[2]". */
    readonly path: string;
    constructor(path: string, message: string, options?: {
        cause?: unknown;
    });
}
/** No verdict is stored under the tenant and id (never decided, or past the bucket's TTL). */
export declare class NotFoundError extends GatedError {
    readonly code: string;
}
/**
 * An approval message that the stored verdict, which only gated can write,
 * does not confirm: it may be forged. Never an approval.
 */
export declare class UnconfirmedApprovalError extends GatedError {
    readonly code: string;
}
/** A verdict without proposal_sha256: gated always sets one, so it is not gated's. */
export declare class NotGatedError extends GatedError {
    readonly code: string;
}
/** A verdict that names another tenant or proposal id than the one sent. */
export declare class NotThisProposalError extends GatedError {
    readonly code: string;
}
/** A reply of the review service, or a stored verdict, that is not a verdict. */
export declare class MalformedVerdictError extends GatedError {
    readonly code: string;
}
/** NATS failed: the connection closed, a permission was refused, JetStream answered an error. */
export declare class TransportError extends GatedError {
    readonly code: string;
}
/**
 * Matches every answer that is not an approval: every VerdictError, and a
 * gate's approval that names another proposal.
 */
export declare class NotApprovedError extends GatedError {
    readonly code: string;
}
/**
 * A verdict that is not an approval. The subclass names its outcome
 * (ReviewRejectedError, ReviewBlockedError, ReviewFailedError,
 * ReviewTimeoutError, ProposalInvalidError); an outcome this client does
 * not know comes as a plain VerdictError.
 */
export declare class VerdictError extends NotApprovedError {
    /** gated's answer. */
    readonly verdict: Verdict;
    constructor(verdict: Verdict);
    /** The verdict's outcome, e.g. "rejected". */
    get outcome(): string;
}
/** Outcome rejected: the policy or a reviewer said no. The verdict's reason says why. */
export declare class ReviewRejectedError extends VerdictError {
}
/** Outcome blocked: no reviewer could be routed (missing plugin or persona, open circuit, only the proposer to review). */
export declare class ReviewBlockedError extends VerdictError {
}
/**
 * Outcome blocked, held for an operator (awaiting_operator on an action,
 * run.awaiting_operator on a run). Not final and never an approval: gated
 * replaces the verdict with the operator's decision or, for an action, a
 * timeout at the deadline. Wait for it with Client.awaitDecision(err.verdict).
 */
export declare class AwaitingOperatorError extends ReviewBlockedError {
}
/** Outcome error: a reviewer, a tool or gated failed. Not retried: propose again with a new id. */
export declare class ReviewFailedError extends VerdictError {
}
/** Outcome timeout: the review passed its deadline inside gated (unlike NoVerdictError, where the caller stopped waiting). */
export declare class ReviewTimeoutError extends VerdictError {
}
/** Outcome invalid: gated's strict decoding refused the proposal; the reason names the field. */
export declare class ProposalInvalidError extends VerdictError {
}
/**
 * Reports whether v is final: every verdict but one held for an operator
 * (outcome blocked with awaiting_operator, or with run.awaiting_operator
 * naming criteria). A held verdict is replaced by the operator's decision or
 * a timeout; it is never an approval.
 */
export declare function isFinal(v: Verdict): boolean;
/** Returns the VerdictError of a verdict that is not an approval. */
export declare function verdictError(v: Verdict): VerdictError;
/**
 * Returns nothing when v approves its proposal (outcome approved and
 * approved true); throws a VerdictError otherwise, and a NotApprovedError
 * for no verdict at all.
 */
export declare function checkVerdict(v: Verdict | null | undefined): void;
/**
 * A refusal of the gated.review service: a micro error reply with a status
 * code and a description. instanceof matches it against BadProposalError
 * (400, 413), TenantMismatchError (403), IdReusedError (409),
 * ServiceUnavailableError (503) and NoVerdictError (504); `code` is that
 * kind, or "service_error" for any other status.
 */
export declare class ServiceError extends GatedError {
    readonly code: string;
    /** The Nats-Service-Error-Code header, e.g. 504 (500 when it was not a status code). */
    readonly status: number;
    /** The Nats-Service-Error header. */
    readonly description: string;
    constructor(status: number, description: string);
}
