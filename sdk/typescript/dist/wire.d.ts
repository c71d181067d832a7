import { type JSONValue } from "./json.js";
import type { Address, Proposal, Verdict } from "./types.js";
/** The proposal and verdict schema version this package speaks. */
export declare const schemaVersion = 1;
/** Subjects and names of the v1 wire contract (engine/wire in Go). */
export declare const wire: {
    readonly proposalSubjectPrefix: "gated.proposals.";
    readonly verdictSubjectPrefix: "gated.verdicts.";
    readonly statusSubjectPrefix: "gated.status.";
    readonly statusWatchSubjectPrefix: "gated.watch.";
    readonly statusHeader: "Gated-Status";
    readonly reviewSubject: "gated.review";
    readonly reviewSubjectPrefix: "gated.review.";
    readonly verdictBucket: "GATED_VERDICTS";
    readonly defaultAPIPrefix: "$JS.API";
};
/** Where a proposal of tenant for action is published. */
export declare function proposalSubject(tenant: string, action: string): string;
/** Where the verdict for tenant and id is published. */
export declare function verdictSubject(tenant: string, id: string): string;
/** The JetStream direct-get subject that reads the stored verdict of tenant and id (Go: VerdictLookupSubject). */
export declare function verdictLookupSubject(apiPrefix: string, tenant: string, id: string): string;
/** Reports whether s is a tenant token: [a-z0-9_-]{1,64}. */
export declare function validTenant(s: unknown): s is string;
/** Reports whether s is a proposal id: [A-Za-z0-9_-]{1,128}. */
export declare function validID(s: unknown): s is string;
/** Reports whether s is an action token: [A-Za-z0-9_-]{1,128}. */
export declare function validAction(s: unknown): s is string;
/** The proposal's Nats-Msg-Id and its verdict's key in the bucket: <tenant>.<id>. */
export declare function addressKey(a: Address): string;
/** Throws BadProposalError unless a's tokens are valid. */
export declare function checkAddress(a: Address): Address;
/**
 * Reads the address of a raw proposal (its JSON bytes or text). It checks
 * only what publishing needs; gated validates the rest. Throws
 * BadProposalError.
 */
export declare function addressOf(data: Uint8Array | string): Address;
/** The hex SHA-256 of the exact bytes of a proposal: a verdict's proposal_sha256. */
export declare function proposalDigest(data: Uint8Array | string): string;
/**
 * Encodes a proposal as the Go client does (engine.Proposal through Go's
 * encoding/json), with v set to 1 when it is absent or 0: the same proposal
 * has the same bytes, and the same digest, from every language. Throws
 * BadProposalError for an unusable address, a member gated does not know,
 * or a value of the wrong type, and its FoldedKeysError for arguments with
 * two member names equal under case folding, which gated would refuse.
 */
export declare function encodeProposal(p: Proposal): {
    address: Address;
    text: string;
    bytes: Uint8Array;
};
/**
 * Decodes a verdict as Go's encoding/json reads engine.Verdict: members of
 * the wrong type are an error, unknown members are ignored, absent ones
 * read as empty. Throws JSONSyntaxError or JSONTypeError.
 */
export declare function decodeVerdict(data: Uint8Array | string): Verdict;
/** decodeVerdict of a value parsed already (the verdict inside a status event). */
export declare function decodeVerdictValue(value: JSONValue): Verdict;
/**
 * Reads a message on a's verdict subject. Anything that is not a verdict
 * naming a's tenant and id is not an answer (null) and is skipped, not
 * taken as a failure: another client may land a reply there.
 */
export declare function verdictMessage(a: Address, data: Uint8Array | string): Verdict | null;
/**
 * Accepts only a verdict for exactly these bytes. Throws
 * NotThisProposalError (another tenant or id), NotGatedError (no digest)
 * or IdReusedError (the digest of other bytes).
 */
export declare function answer(a: Address, digest: string, v: Verdict): Verdict;
/**
 * The client's whole judgement of a verdict that arrived as a message:
 * a refusal is taken as it comes (it can only stop an action), an approval
 * counts only once the stored verdict confirms it. A look-up that fails is
 * an UnconfirmedApprovalError, never an approval.
 */
export declare function confirmApproval(a: Address, digest: string, v: Verdict, stored: () => Promise<Verdict>): Promise<Verdict>;
/** A reply as the transport gives it: body, status line and headers. */
export interface WireReply {
    data: Uint8Array;
    /** The status code of a status reply, e.g. "404"; "" for none. */
    status?: string;
    /** The status line's description. */
    description?: string;
    /** A header's value, or undefined. */
    header(name: string): string | undefined;
}
/**
 * Reads a direct-get reply for the stored verdict of tenant and id: a 404
 * or a KV delete marker is NotFoundError; an entry of another key, a body
 * that is not a verdict, or one naming another proposal is a
 * MalformedVerdictError.
 */
export declare function decodeStoredVerdict(tenant: string, id: string, m: WireReply): Verdict;
/**
 * Reads a reply of the review service: a micro error (headers
 * Nats-Service-Error-Code and Nats-Service-Error) is a ServiceError,
 * anything else must be a verdict (else MalformedVerdictError).
 */
export declare function decodeReviewReply(header: (name: string) => string | undefined, data: Uint8Array | string): Verdict;
