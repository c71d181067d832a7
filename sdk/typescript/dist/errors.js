// Errors of the fleet client. They mirror the Go client's sentinels
// (bus/fleet/errors.go): test for them with instanceof. A verdict that is
// not an approval comes as a VerdictError (a subclass per outcome), and a
// refusal of the review service as a ServiceError, which instanceof also
// matches against the class of its status code, as Go's errors.Is does.
/** The root of every error this package throws. `code` names its kind. */
export class GatedError extends Error {
    /** The kind of error, as the shared test vectors name it (e.g. "no_verdict"). */
    code = "gated";
    constructor(message, options) {
        super(message, options);
        this.name = new.target.name;
    }
}
/** Makes instanceof of a class also match a ServiceError whose status code maps to it. */
function matchesServiceCode(cls, code) {
    Object.defineProperty(cls, Symbol.hasInstance, {
        value(x) {
            if (Function.prototype[Symbol.hasInstance].call(this, x)) {
                return true;
            }
            return this === cls && x instanceof ServiceError && x.code === code;
        },
    });
}
/**
 * A proposal cannot even be addressed: it is not a JSON object with valid
 * tenant, id and action tokens, or it cannot be encoded. gated never sees it.
 */
export class BadProposalError extends GatedError {
    code = "bad_proposal";
}
/**
 * A proposal's arguments hold an object with two member names equal under
 * Unicode simple case folding (Go's strings.EqualFold), such as "host" and
 * "hoſt" (U+017F): a reader that matches names without case could act on
 * either, so gated refuses the proposal as invalid, and this client does
 * not publish it. Rename one member.
 */
export class FoldedKeysError extends BadProposalError {
    code = "folded_keys";
    /** The object, as gated names it: arguments, then the path to it, e.g. arguments.opts or arguments.ops.1. */
    path;
    /** The object's place in the arguments, a JSON Pointer (RFC 6901); "" for the arguments themselves. */
    pointer;
    /** The two member names, in the order of their UTF-8 bytes. */
    key;
    other;
    constructor(where, found) {
        const path = "arguments" + found.pointer.replaceAll("/", ".");
        super(`${where}: ${path} has members ${JSON.stringify(found.key)} and ${JSON.stringify(found.other)}, which differ only by case: a reader that matches names without case could act on either`);
        this.path = path;
        this.pointer = found.pointer;
        this.key = found.key;
        this.other = found.other;
    }
}
/**
 * No verdict arrived before the deadline or the abort. The proposal may
 * still be decided later: look it up with Client.verdict, and never act on
 * it before.
 */
export class NoVerdictError extends GatedError {
    code = "no_verdict";
}
/**
 * The id was already used by a different proposal of the same tenant, or
 * the verdict answers other bytes under this id. Choose a new id.
 */
export class IdReusedError extends GatedError {
    code = "id_reused";
}
/** The gated.review service did not take the request. Retry with backoff, or propose instead. */
export class ServiceUnavailableError extends GatedError {
    code = "service_unavailable";
}
/** A proposal sent to gated.review.<tenant> names another tenant. */
export class TenantMismatchError extends GatedError {
    code = "tenant_mismatch";
}
/** An option of the client or the gate is unusable. */
export class InvalidConfigError extends GatedError {
    code = "invalid_config";
}
/** A guarded tool's spec is unusable; such a tool never runs. */
export class InvalidToolSpecError extends GatedError {
    code = "invalid_tool_spec";
}
/**
 * A guarded call's arguments cannot be reviewed: they are not a plain
 * object, or hold something that is not JSON (a bigint, a function, a
 * symbol, a Date or another class instance, NaN or an infinity, undefined
 * in an array, a cycle), or two member names equal under simple case
 * folding (its cause is then a FoldedKeysError). The tool does not run and
 * nothing is proposed.
 */
export class InvalidArgumentsError extends InvalidToolSpecError {
    code = "invalid_arguments";
    /** Where in the arguments, e.g. "arguments", "arguments.opts[2]". */
    path;
    constructor(path, message, options) {
        super(message, options);
        this.path = path;
    }
}
/** No verdict is stored under the tenant and id (never decided, or past the bucket's TTL). */
export class NotFoundError extends GatedError {
    code = "not_found";
}
/**
 * An approval message that the stored verdict, which only gated can write,
 * does not confirm: it may be forged. Never an approval.
 */
export class UnconfirmedApprovalError extends GatedError {
    code = "unconfirmed";
}
/** A verdict without proposal_sha256: gated always sets one, so it is not gated's. */
export class NotGatedError extends GatedError {
    code = "not_gated";
}
/** A verdict that names another tenant or proposal id than the one sent. */
export class NotThisProposalError extends GatedError {
    code = "not_this_proposal";
}
/** A reply of the review service, or a stored verdict, that is not a verdict. */
export class MalformedVerdictError extends GatedError {
    code = "malformed";
}
/** NATS failed: the connection closed, a permission was refused, JetStream answered an error. */
export class TransportError extends GatedError {
    code = "transport";
}
/**
 * Matches every answer that is not an approval: every VerdictError, and a
 * gate's approval that names another proposal.
 */
export class NotApprovedError extends GatedError {
    code = "not_approved";
}
/**
 * A verdict that is not an approval. The subclass names its outcome
 * (ReviewRejectedError, ReviewBlockedError, ReviewFailedError,
 * ReviewTimeoutError, ProposalInvalidError); an outcome this client does
 * not know comes as a plain VerdictError.
 */
export class VerdictError extends NotApprovedError {
    /** gated's answer. */
    verdict;
    constructor(verdict) {
        super(`proposal ${verdict.tenant}.${verdict.proposal_id} ${verdict.outcome} at stage ${verdict.stage ?? ""}: ${verdict.reason ?? ""}`);
        this.verdict = verdict;
    }
    /** The verdict's outcome, e.g. "rejected". */
    get outcome() {
        return this.verdict.outcome;
    }
}
/** Outcome rejected: the policy or a reviewer said no. The verdict's reason says why. */
export class ReviewRejectedError extends VerdictError {
}
/** Outcome blocked: no reviewer could be routed (missing plugin or persona, open circuit, only the proposer to review). */
export class ReviewBlockedError extends VerdictError {
}
/**
 * Outcome blocked, held for an operator (awaiting_operator on an action,
 * run.awaiting_operator on a run). Not final and never an approval: gated
 * replaces the verdict with the operator's decision or, for an action, a
 * timeout at the deadline. Wait for it with Client.awaitDecision(err.verdict).
 */
export class AwaitingOperatorError extends ReviewBlockedError {
}
/** Outcome error: a reviewer, a tool or gated failed. Not retried: propose again with a new id. */
export class ReviewFailedError extends VerdictError {
}
/** Outcome timeout: the review passed its deadline inside gated (unlike NoVerdictError, where the caller stopped waiting). */
export class ReviewTimeoutError extends VerdictError {
}
/** Outcome invalid: gated's strict decoding refused the proposal; the reason names the field. */
export class ProposalInvalidError extends VerdictError {
}
const outcomeErrors = {
    rejected: ReviewRejectedError,
    blocked: ReviewBlockedError,
    error: ReviewFailedError,
    timeout: ReviewTimeoutError,
    invalid: ProposalInvalidError,
};
/**
 * Reports whether v is final: every verdict but one held for an operator
 * (outcome blocked with awaiting_operator, or with run.awaiting_operator
 * naming criteria). A held verdict is replaced by the operator's decision or
 * a timeout; it is never an approval.
 */
export function isFinal(v) {
    if (v.outcome !== "blocked") {
        return true;
    }
    const awaited = v.run?.["awaiting_operator"];
    return v.awaiting_operator == null && !(Array.isArray(awaited) && awaited.length > 0);
}
/** Returns the VerdictError of a verdict that is not an approval. */
export function verdictError(v) {
    if (!isFinal(v)) {
        return new AwaitingOperatorError(v);
    }
    const cls = Object.hasOwn(outcomeErrors, v.outcome) ? outcomeErrors[v.outcome] : VerdictError;
    return new cls(v);
}
/**
 * Returns nothing when v approves its proposal (outcome approved and
 * approved true); throws a VerdictError otherwise, and a NotApprovedError
 * for no verdict at all.
 */
export function checkVerdict(v) {
    if (v == null) {
        throw new NotApprovedError("proposal not approved: no verdict");
    }
    if (v.outcome === "approved" && v.approved === true) {
        return;
    }
    throw verdictError(v);
}
const serviceKinds = {
    400: "bad_proposal",
    413: "bad_proposal",
    403: "tenant_mismatch",
    409: "id_reused",
    503: "service_unavailable",
    504: "no_verdict",
};
/**
 * A refusal of the gated.review service: a micro error reply with a status
 * code and a description. instanceof matches it against BadProposalError
 * (400, 413), TenantMismatchError (403), IdReusedError (409),
 * ServiceUnavailableError (503) and NoVerdictError (504); `code` is that
 * kind, or "service_error" for any other status.
 */
export class ServiceError extends GatedError {
    code;
    /** The Nats-Service-Error-Code header, e.g. 504 (500 when it was not a status code). */
    status;
    /** The Nats-Service-Error header. */
    description;
    constructor(status, description) {
        super(`gated.review refused the request (${status}): ${description}`);
        this.status = status;
        this.description = description;
        this.code = serviceKinds[status] ?? "service_error";
    }
}
matchesServiceCode(BadProposalError, "bad_proposal");
matchesServiceCode(TenantMismatchError, "tenant_mismatch");
matchesServiceCode(IdReusedError, "id_reused");
matchesServiceCode(ServiceUnavailableError, "service_unavailable");
matchesServiceCode(NoVerdictError, "no_verdict");
