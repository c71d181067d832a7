import { GatedError, NotApprovedError } from "./errors.js";
/** Subjects, names and limits of the grant contract. */
export declare const grantWire: {
    /** gated answers a request here with its key set. */
    readonly keysSubject: "gated.grants.keys";
    /** A grant is used by a request on gated.grants.<tenant>.use. */
    readonly useSubjectPrefix: "gated.grants.";
    /** Outcomes are published on gated.outcomes.<tenant>.<proposal_id>. */
    readonly outcomesSubjectPrefix: "gated.outcomes.";
    /** The JetStream stream that captures outcomes. */
    readonly outcomesStream: "GATED_OUTCOMES";
    /** The KV bucket of gated's grant records. */
    readonly grantsBucket: "GATED_GRANTS";
    /** The header's typ. */
    readonly tokenType: "gated-grant+jwt";
    /** The header's alg: Ed25519 (RFC 8037). */
    readonly algorithm: "EdDSA";
    /** The payload's iss. */
    readonly issuer: "gated";
    /** How far a grant's iat may be ahead of the verifier's clock, in seconds. */
    readonly clockSkewS: 60;
    /** The longest token this package decodes, in characters. */
    readonly maxTokenLength: number;
    /** The longest error text an outcome carries, in UTF-8 bytes. */
    readonly maxOutcomeErrorBytes: 4096;
};
/**
 * Where a grant of tenant is used; with agent, that agent's subject, where
 * gated accepts only a grant issued to it.
 */
export declare function grantUseSubject(tenant: string, agent?: string): string;
/**
 * Where the outcome of tenant's proposal id is reported; with agent, that
 * agent's subject, where gated takes a report only from the agent the grant
 * was issued to or that used it.
 */
export declare function outcomeSubject(tenant: string, proposalID: string, agent?: string): string;
/** One reviewer that approved, as a grant names it ("" when unknown). */
export interface GrantReviewer {
    plugin: string;
    plugin_version: string;
    persona: string;
    model: string;
}
/** The payload of a grant: what gated approved, for whom, until when. */
export interface GrantClaims {
    /** The format version, 1. */
    v: number;
    /** The grant id and nonce: 16 random bytes, unpadded base64url. */
    gid: string;
    /** Always "gated". */
    iss: string;
    tenant: string;
    proposal_id: string;
    /** Lowercase hex SHA-256 of the exact proposal bytes. */
    proposal_sha256: string;
    action: string;
    /** Lowercase hex SHA-256 of the RFC 8785 canonical JSON of the proposal's target ({} when it has none). */
    target_sha256: string;
    /** The policy revision that decided. */
    policy_revision: string;
    /** Who approved; empty for an approval of the policy alone. */
    reviewers: GrantReviewer[];
    /** Issued at, Unix seconds. */
    iat: number;
    /** Expires at, Unix seconds. */
    exp: number;
}
/** The protected header of a grant. */
export interface GrantHeader {
    alg: string;
    typ: string;
    kid: string;
}
/** One of gated's public keys (a JWK of an Ed25519 key plus gated's three members). */
export interface GrantKey {
    /** The first 16 bytes of SHA-256 of the raw public key, unpadded base64url. */
    kid: string;
    kty: "OKP";
    crv: "Ed25519";
    /** The 32-byte public key, unpadded base64url. */
    x: string;
    /** When the key began to sign, Unix seconds. */
    created_at: number;
    /** When the key stopped signing, Unix seconds; absent while it is active. */
    retired_at?: number;
    /** The longest lifetime (exp - iat) of a grant it signs, in seconds. */
    max_ttl_s: number;
}
/** gated's published key set, as `gated grants keys` prints it. */
export interface GrantKeySet {
    keys: GrantKey[];
}
/**
 * What the executor is about to run, that a grant must name. The proposal
 * is given as its exact bytes or their digest, the target as a value, as
 * JSON text, or as its digest; one of each is required (a proposal with no
 * target is checked with target {}).
 */
export interface GrantExpectation {
    tenant: string;
    proposal_id: string;
    action: string;
    /** The exact bytes (or text) of the proposal sent. */
    proposal?: Uint8Array | string;
    /** The lowercase hex SHA-256 of the proposal's bytes, when the bytes are not at hand. */
    proposal_sha256?: string;
    /** The target about to be acted on, as a JSON value. */
    target?: unknown;
    /** The target about to be acted on, as JSON text. */
    target_json?: string;
    /** The target's digest (targetDigest), when it was computed already. */
    target_sha256?: string;
}
/**
 * A grant refused: malformed, not signed by a key of the set, outside its
 * key's or its own lifetime, or naming something else than what is about
 * to run. `member` names the header or payload member, or the check
 * ("format", "signature", "retired", "max_ttl"), at fault; the message
 * names it too. The action must not run. It is a NotApprovedError.
 */
export declare class GrantError extends NotApprovedError {
    readonly code: string;
    /** The member or check that failed, e.g. "target_sha256", "signature", "exp". */
    readonly member: string;
    constructor(member: string, message: string, options?: {
        cause?: unknown;
    });
}
/**
 * gated refused to take a grant's single use: it was used already, it
 * expired, gated does not know it, or gated's own check refused it.
 * `reason` is gated's answer. The action must not run.
 */
export declare class GrantUseError extends GrantError {
    readonly code: string;
    /** gated's reason, e.g. "already used at 2026-11-25T10:00:00Z by agent-1". */
    readonly reason: string;
    constructor(reason: string, options?: {
        cause?: unknown;
    });
}
/** A key set that is not one: malformed JSON, a bad key, a kid that is not its key's. */
export declare class GrantKeySetError extends GatedError {
    readonly code: string;
}
/** A value RFC 8785 cannot canonicalise: a number out of range, a cycle, a non-JSON value, a duplicate member. */
export declare class CanonicalJSONError extends GatedError {
    readonly code: string;
}
/**
 * The RFC 8785 (JCS) canonical JSON of a value: object members sorted by
 * UTF-16 code units, no white space, numbers as ECMAScript prints them,
 * strings with JSON's minimal escapes. A lone surrogate reads as U+FFFD, as
 * gated reads it. Throws CanonicalJSONError for what JSON cannot hold (a
 * non-finite number, a bigint, a class instance, a cycle).
 */
export declare function canonicalJSON(value: unknown): string;
/**
 * The RFC 8785 canonical form of JSON text. The text must be one JSON value
 * with no member named twice in any object (I-JSON); numbers are read as
 * IEEE-754 doubles, so one beyond their range is refused. Throws
 * CanonicalJSONError.
 */
export declare function canonicalJSONText(text: string): string;
/** The lowercase hex SHA-256 of the canonical JSON of a target; null and undefined digest as {}. */
export declare function targetDigest(target: unknown): string;
/** A grant split and decoded, its signature not checked yet. */
export interface DecodedGrant {
    header: GrantHeader;
    claims: GrantClaims;
    /** The bytes the signature covers: BASE64URL(header) "." BASE64URL(payload). */
    signingInput: Buffer;
    /** The 64-byte Ed25519 signature. */
    signature: Buffer;
}
/**
 * Splits and decodes a grant strictly, without checking its signature or
 * lifetime: the header must be exactly alg EdDSA, typ gated-grant+jwt and a
 * kid; the payload exactly the members of the format with their types.
 * Throws GrantError naming the member. Use verifyGrant to check a grant;
 * this is for reading one (e.g. its tenant, to know where to use it).
 */
export declare function decodeGrant(token: unknown): DecodedGrant;
/** The kid of a raw Ed25519 public key: the first 16 bytes of its SHA-256, unpadded base64url. */
export declare function grantKeyID(publicKey: Uint8Array): string;
/**
 * Decodes and checks gated's key set: its JSON bytes or text (a file
 * printed by `gated grants keys`, or the reply of gated.grants.keys), or
 * the object. Every key is an Ed25519 public key (kty OKP, crv Ed25519, a
 * 32-byte x) whose kid is its own, with integer created_at, max_ttl_s > 0
 * and retired_at when retired; a kid appears once. Throws GrantKeySetError.
 */
export declare function decodeGrantKeySet(data: Uint8Array | string | GrantKeySet): GrantKeySet;
/**
 * Verifies a grant, at now (Unix seconds), against key set keys and what
 * the executor is about to run, and returns its claims. In order: the
 * header (alg EdDSA, typ gated-grant+jwt, no other member, a kid of the
 * set), the payload's members and types, the key's rules (created_at ≤
 * iat; a retired key signed before retired_at and exp ≤ retired_at +
 * max_ttl_s; exp - iat ≤ max_ttl_s), iat at most 60 s ahead of now, now
 * before exp, the Ed25519 signature over the bytes as received, then
 * tenant, proposal_id, proposal_sha256, action and target_sha256 against
 * expect. keys is a decodeGrantKeySet result (any other value is checked
 * as one first: GrantKeySetError). Throws GrantError naming the member
 * that fails; never returns
 * for a grant that does not hold. It does not take the grant's single use:
 * Client.useGrant does.
 */
export declare function verifyGrant(token: unknown, keys: GrantKeySet, now: number, expect: GrantExpectation): GrantClaims;
/** The kid a grant's header names, or undefined when the token cannot be read that far. */
export declare function grantKeyIDOf(token: unknown): string | undefined;
/**
 * Reads gated's answer to the use of the grant gid: {"ok":true,"gid":gid}
 * is the only acceptance. {"ok":false,"error":why} throws GrantUseError
 * with gated's reason; anything else (not JSON, another gid, ok missing)
 * throws GrantError with member "use": never an acceptance.
 */
export declare function decodeGrantUseReply(data: Uint8Array | string, gid: string): void;
/**
 * What became of an action run on a grant; refused: the executor refused
 * the grant itself, and the action did not run.
 */
export type OutcomeStatus = "started" | "succeeded" | "failed" | "refused";
/** An executor's report of a granted action, as published on gated.outcomes.<tenant>.<proposal_id>. */
export interface OutcomeReport {
    /** The grant's gid; "" only for a refused grant whose token did not verify. */
    gid: string;
    tenant: string;
    proposal_id: string;
    status: OutcomeStatus;
    /** Why it failed (failed) or was refused (refused); cut to 4096 UTF-8 bytes. */
    error?: string;
    /** When, RFC 3339; default now. */
    at?: string | Date;
}
/** s cut to at most max UTF-8 bytes, never inside a character. */
export declare function boundUTF8(s: string, max: number): string;
/** The JSON text of an outcome report: members in the contract's order, the error bounded. */
export declare function encodeOutcome(r: OutcomeReport, now?: Date): string;
