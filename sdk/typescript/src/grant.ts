// Grants: the signed, single-use permission gated attaches to every
// approved verdict (docs/GRANTS.md is the normative format). A grant is a
// compact JWS signed with Ed25519; this module decodes one strictly,
// checks it against gated's published key set and against what the
// executor is about to run, and canonicalises a target (RFC 8785) to
// digest it. Everything here is pure: the Client fetches keys, takes a
// grant's single use and reports outcomes.

import { createHash, createPublicKey, verify as verifySignature, type KeyObject } from "node:crypto";

import { GatedError, NotApprovedError } from "./errors.js";
import { JSONNumber, type JSONValue, parseJSON } from "./json.js";

/** Subjects, names and limits of the grant contract. */
export const grantWire = {
  /** gated answers a request here with its key set. */
  keysSubject: "gated.grants.keys",
  /** A grant is used by a request on gated.grants.<tenant>.use. */
  useSubjectPrefix: "gated.grants.",
  /** Outcomes are published on gated.outcomes.<tenant>.<proposal_id>. */
  outcomesSubjectPrefix: "gated.outcomes.",
  /** The JetStream stream that captures outcomes. */
  outcomesStream: "GATED_OUTCOMES",
  /** The KV bucket of gated's grant records. */
  grantsBucket: "GATED_GRANTS",
  /** The header's typ. */
  tokenType: "gated-grant+jwt",
  /** The header's alg: Ed25519 (RFC 8037). */
  algorithm: "EdDSA",
  /** The payload's iss. */
  issuer: "gated",
  /** How far a grant's iat may be ahead of the verifier's clock, in seconds. */
  clockSkewS: 60,
  /** The longest token this package decodes, in characters. */
  maxTokenLength: 16 * 1024,
  /** The longest error text an outcome carries, in UTF-8 bytes. */
  maxOutcomeErrorBytes: 4096,
} as const;

/**
 * Where a grant of tenant is used; with agent, that agent's subject, where
 * gated accepts only a grant issued to it.
 */
export function grantUseSubject(tenant: string, agent?: string): string {
  const subject = grantWire.useSubjectPrefix + tenant + ".use";
  return agent ? subject + "." + agent : subject;
}

/**
 * Where the outcome of tenant's proposal id is reported; with agent, that
 * agent's subject, where gated takes a report only from the agent the grant
 * was issued to or that used it.
 */
export function outcomeSubject(tenant: string, proposalID: string, agent?: string): string {
  const subject = grantWire.outcomesSubjectPrefix + tenant + "." + proposalID;
  return agent ? subject + "." + agent : subject;
}

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
export class GrantError extends NotApprovedError {
  override readonly code: string = "grant_refused";
  /** The member or check that failed, e.g. "target_sha256", "signature", "exp". */
  readonly member: string;
  constructor(member: string, message: string, options?: { cause?: unknown }) {
    super(message.startsWith("grant refused: ") ? message : `grant refused: ${message}`, options);
    this.member = member;
  }
}

/**
 * gated refused to take a grant's single use: it was used already, it
 * expired, gated does not know it, or gated's own check refused it.
 * `reason` is gated's answer. The action must not run.
 */
export class GrantUseError extends GrantError {
  override readonly code: string = "grant_use_refused";
  /** gated's reason, e.g. "already used at 2026-11-25T10:00:00Z by agent-1". */
  readonly reason: string;
  constructor(reason: string, options?: { cause?: unknown }) {
    super("use", `grant refused: gated refused its use: ${reason}`, options);
    this.reason = reason;
  }
}

/** A key set that is not one: malformed JSON, a bad key, a kid that is not its key's. */
export class GrantKeySetError extends GatedError {
  override readonly code: string = "invalid_keyset";
}

/** A value RFC 8785 cannot canonicalise: a number out of range, a cycle, a non-JSON value, a duplicate member. */
export class CanonicalJSONError extends GatedError {
  override readonly code: string = "not_canonical";
}

// ---- RFC 8785 (JCS) ----

/** s with every lone surrogate replaced by U+FFFD, as gated's decoder reads it. */
function wellFormed(s: string): string {
  return s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
}

function jcsNumber(n: number, path: string): string {
  if (!Number.isFinite(n)) {
    throw new CanonicalJSONError(`canonicalising ${path}: ${n} is not a number JSON can hold`);
  }
  // ECMAScript's Number::toString is RFC 8785's number serialisation; -0 is "0".
  return String(n);
}

function jcs(v: unknown, path: string, seen: Set<object>): string {
  if (v === null) {
    return "null";
  }
  switch (typeof v) {
    case "boolean":
      return v ? "true" : "false";
    case "number":
      return jcsNumber(v, path);
    case "string":
      return JSON.stringify(wellFormed(v));
  }
  if (v instanceof JSONNumber) {
    return jcsNumber(v.value, path);
  }
  if (typeof v !== "object") {
    throw new CanonicalJSONError(`canonicalising ${path}: a ${typeof v} is not a JSON value`);
  }
  if (seen.has(v)) {
    throw new CanonicalJSONError(`canonicalising ${path}: the value contains itself`);
  }
  seen.add(v);
  try {
    if (Array.isArray(v)) {
      return "[" + v.map((e, i) => (e === undefined ? fail(`${path}[${i}]`) : jcs(e, `${path}[${i}]`, seen))).join(",") + "]";
    }
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) {
      throw new CanonicalJSONError(`canonicalising ${path}: a ${proto?.constructor?.name ?? "object"} is not a JSON value`);
    }
    const members: [string, string][] = [];
    for (const k of Object.keys(v)) {
      const e = (v as Record<string, unknown>)[k];
      if (e === undefined) {
        continue; // as JSON.stringify leaves it out
      }
      members.push([wellFormed(k), jcs(e, `${path}.${k}`, seen)]);
    }
    // RFC 8785 §3.2.3: member names sorted by their UTF-16 code units, which
    // is how JavaScript compares strings.
    members.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    for (let i = 1; i < members.length; i++) {
      if (members[i - 1]![0] === members[i]![0]) {
        throw new CanonicalJSONError(`canonicalising ${path}: two members are named ${JSON.stringify(members[i]![0])}`);
      }
    }
    return "{" + members.map(([k, e]) => JSON.stringify(k) + ":" + e).join(",") + "}";
  } finally {
    seen.delete(v);
  }
}

function fail(path: string): never {
  throw new CanonicalJSONError(`canonicalising ${path}: undefined is not a JSON value`);
}

/**
 * The RFC 8785 (JCS) canonical JSON of a value: object members sorted by
 * UTF-16 code units, no white space, numbers as ECMAScript prints them,
 * strings with JSON's minimal escapes. A lone surrogate reads as U+FFFD, as
 * gated reads it. Throws CanonicalJSONError for what JSON cannot hold (a
 * non-finite number, a bigint, a class instance, a cycle).
 */
export function canonicalJSON(value: unknown): string {
  return jcs(value, "target", new Set());
}

/**
 * The RFC 8785 canonical form of JSON text. The text must be one JSON value
 * with no member named twice in any object (I-JSON); numbers are read as
 * IEEE-754 doubles, so one beyond their range is refused. Throws
 * CanonicalJSONError.
 */
export function canonicalJSONText(text: string): string {
  let v: JSONValue;
  try {
    v = parseJSON(text, undefined, true);
  } catch (err) {
    throw new CanonicalJSONError(`canonicalising target: ${(err as Error).message}`, { cause: err });
  }
  return canonicalJSON(v);
}

/** The lowercase hex SHA-256 of the canonical JSON of a target; null and undefined digest as {}. */
export function targetDigest(target: unknown): string {
  return createHash("sha256")
    .update(canonicalJSON(target ?? {}))
    .digest("hex");
}

// ---- the token ----

const b64url = /^[A-Za-z0-9_-]*$/;

/** Decodes unpadded base64url strictly (no padding, no other alphabet, zero trailing bits). */
function decodeSegment(s: string, segment: string): Buffer {
  if (!b64url.test(s) || s.length % 4 === 1) {
    throw new GrantError("format", `format: the ${segment} is not unpadded base64url`);
  }
  const b = Buffer.from(s, "base64url");
  if (b.toString("base64url") !== s) {
    throw new GrantError("format", `format: the ${segment} is not canonical base64url`);
  }
  return b;
}

function decodeJSONSegment(s: string, segment: string): Record<string, JSONValue> {
  const b = decodeSegment(s, segment);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(b);
  } catch {
    throw new GrantError("format", `format: the ${segment} is not UTF-8`);
  }
  let v: JSONValue;
  try {
    v = parseJSON(text, undefined, true);
  } catch (err) {
    throw new GrantError("format", `format: the ${segment} is not one JSON object: ${(err as Error).message}`, { cause: err });
  }
  if (typeof v !== "object" || v === null || Array.isArray(v) || v instanceof JSONNumber) {
    throw new GrantError("format", `format: the ${segment} is not a JSON object`);
  }
  return v;
}

function jsonKind(v: JSONValue | undefined): string {
  if (v === undefined) {
    return "nothing";
  }
  if (v === null) {
    return "null";
  }
  if (v instanceof JSONNumber) {
    return "a number";
  }
  if (Array.isArray(v)) {
    return "an array";
  }
  return typeof v === "object" ? "an object" : `a ${typeof v}`;
}

const headerMembers = new Set(["alg", "typ", "kid"]);

function decodeHeader(s: string): GrantHeader {
  const h = decodeJSONSegment(s, "header");
  if (h["alg"] !== grantWire.algorithm) {
    const got = typeof h["alg"] === "string" ? JSON.stringify(h["alg"]) : jsonKind(h["alg"]);
    throw new GrantError("alg", `alg ${got} is not ${grantWire.algorithm}: a grant is signed with Ed25519 only`);
  }
  if (h["typ"] !== grantWire.tokenType) {
    const got = typeof h["typ"] === "string" ? JSON.stringify(h["typ"]) : jsonKind(h["typ"]);
    throw new GrantError("typ", `typ ${got} is not ${grantWire.tokenType}`);
  }
  for (const k of Object.keys(h)) {
    if (!headerMembers.has(k)) {
      throw new GrantError(k, `header member ${JSON.stringify(k)} is not allowed: a grant's header has alg, typ and kid only, and no key is taken from a token`);
    }
  }
  const kid = h["kid"];
  if (typeof kid !== "string" || kid === "") {
    throw new GrantError("kid", `kid is ${typeof kid === "string" ? "empty" : jsonKind(kid)}: the header must name gated's key`);
  }
  return { alg: grantWire.algorithm, typ: grantWire.tokenType, kid };
}

const hex64 = /^[0-9a-f]{64}$/;
const intText = /^-?(?:0|[1-9][0-9]*)$/;
const reviewerMembers = ["plugin", "plugin_version", "persona", "model"] as const;
const payloadMembers = [
  "v",
  "gid",
  "iss",
  "tenant",
  "proposal_id",
  "proposal_sha256",
  "action",
  "target_sha256",
  "policy_revision",
  "reviewers",
  "iat",
  "exp",
] as const;

function str(p: Record<string, JSONValue>, k: string): string {
  const v = p[k];
  if (typeof v !== "string") {
    throw new GrantError(k, `${k} is ${jsonKind(v)}, want a string`);
  }
  return v;
}

function int(p: Record<string, JSONValue>, k: string): number {
  const v = p[k];
  if (!(v instanceof JSONNumber) || !intText.test(v.text) || !Number.isSafeInteger(v.value)) {
    throw new GrantError(k, `${k} is ${v instanceof JSONNumber ? `the number ${v.text}` : jsonKind(v)}, want an integer`);
  }
  return v.value;
}

function decodePayload(s: string): GrantClaims {
  const p = decodeJSONSegment(s, "payload");
  for (const k of Object.keys(p)) {
    if (!(payloadMembers as readonly string[]).includes(k)) {
      throw new GrantError(k, `payload member ${JSON.stringify(k)} is unknown`);
    }
  }
  for (const k of payloadMembers) {
    if (!Object.hasOwn(p, k)) {
      throw new GrantError(k, `${k} is missing from the payload`);
    }
  }
  const v = int(p, "v");
  if (v !== 1) {
    throw new GrantError("v", `v is ${v}: this client reads grants of version 1`);
  }
  const gid = str(p, "gid");
  if (gid.length !== 22 || !b64url.test(gid) || Buffer.from(gid, "base64url").toString("base64url") !== gid) {
    throw new GrantError("gid", `gid ${JSON.stringify(gid)} is not 16 bytes of unpadded base64url`);
  }
  const iss = str(p, "iss");
  if (iss !== grantWire.issuer) {
    throw new GrantError("iss", `iss ${JSON.stringify(iss)} is not ${grantWire.issuer}`);
  }
  const claims: GrantClaims = {
    v,
    gid,
    iss,
    tenant: str(p, "tenant"),
    proposal_id: str(p, "proposal_id"),
    proposal_sha256: str(p, "proposal_sha256"),
    action: str(p, "action"),
    target_sha256: str(p, "target_sha256"),
    policy_revision: str(p, "policy_revision"),
    reviewers: [],
    iat: int(p, "iat"),
    exp: int(p, "exp"),
  };
  for (const k of ["proposal_sha256", "target_sha256"] as const) {
    if (!hex64.test(claims[k])) {
      throw new GrantError(k, `${k} ${JSON.stringify(claims[k])} is not a lowercase hex SHA-256`);
    }
  }
  const reviewers = p["reviewers"];
  if (!Array.isArray(reviewers)) {
    throw new GrantError("reviewers", `reviewers is ${jsonKind(reviewers)}, want a list`);
  }
  for (const [i, r] of reviewers.entries()) {
    if (typeof r !== "object" || r === null || Array.isArray(r) || r instanceof JSONNumber) {
      throw new GrantError("reviewers", `reviewers[${i}] is ${jsonKind(r)}, want an object`);
    }
    const keys = Object.keys(r);
    const extra = keys.find((k) => !(reviewerMembers as readonly string[]).includes(k));
    if (extra !== undefined) {
      throw new GrantError("reviewers", `reviewers[${i}] has an unknown member ${JSON.stringify(extra)}`);
    }
    const entry = {} as GrantReviewer;
    for (const k of reviewerMembers) {
      const m = r[k];
      if (typeof m !== "string") {
        throw new GrantError("reviewers", `reviewers[${i}].${k} is ${jsonKind(m)}, want a string`);
      }
      entry[k] = m;
    }
    claims.reviewers.push(entry);
  }
  return claims;
}

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
export function decodeGrant(token: unknown): DecodedGrant {
  const [h, p, s] = split(token);
  const header = decodeHeader(h);
  const claims = decodePayload(p);
  return { header, claims, signingInput: Buffer.from(h + "." + p, "ascii"), signature: decodeSignature(s) };
}

function split(token: unknown): [string, string, string] {
  if (typeof token !== "string") {
    throw new GrantError("format", `format: a grant is a string, got ${token === null ? "null" : typeof token}`);
  }
  if (token.length > grantWire.maxTokenLength) {
    throw new GrantError("format", `format: the grant is ${token.length} characters, over ${grantWire.maxTokenLength}`);
  }
  const parts = token.split(".");
  if (parts.length !== 3) {
    throw new GrantError("format", `format: a grant is three base64url segments joined by dots, got ${parts.length} segment(s)`);
  }
  return parts as [string, string, string];
}

function decodeSignature(s: string): Buffer {
  let signature: Buffer;
  try {
    signature = decodeSegment(s, "signature");
  } catch (err) {
    throw new GrantError("signature", `signature: ${(err as Error).message.replace(/^grant refused: /, "")}`);
  }
  if (signature.length !== 64) {
    throw new GrantError("signature", `signature is ${signature.length} bytes, want the 64 of Ed25519`);
  }
  return signature;
}

// ---- keys ----

const keyMembers = new Set(["kid", "kty", "crv", "x", "created_at", "retired_at", "max_ttl_s", "alg", "use"]);

/** The kid of a raw Ed25519 public key: the first 16 bytes of its SHA-256, unpadded base64url. */
export function grantKeyID(publicKey: Uint8Array): string {
  return createHash("sha256").update(publicKey).digest().subarray(0, 16).toString("base64url");
}

function keyInt(k: Record<string, JSONValue>, name: string, i: number): number {
  const v = k[name];
  if (!(v instanceof JSONNumber) || !intText.test(v.text) || !Number.isSafeInteger(v.value) || v.value < 0) {
    throw new GrantKeySetError(`grant key set: keys[${i}].${name} is ${v instanceof JSONNumber ? v.text : jsonKind(v)}, want a non-negative integer`);
  }
  return v.value;
}

function toJSONValue(v: unknown): JSONValue {
  // A key set given as an object is checked as its JSON text would be.
  let text: string | undefined;
  try {
    text = JSON.stringify(v);
  } catch (err) {
    throw new GrantKeySetError(`grant key set: not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (text === undefined) {
    throw new GrantKeySetError("grant key set: not JSON");
  }
  return parseJSON(text);
}

/**
 * Decodes and checks gated's key set: its JSON bytes or text (a file
 * printed by `gated grants keys`, or the reply of gated.grants.keys), or
 * the object. Every key is an Ed25519 public key (kty OKP, crv Ed25519, a
 * 32-byte x) whose kid is its own, with integer created_at, max_ttl_s > 0
 * and retired_at when retired; a kid appears once. Throws GrantKeySetError.
 */
export function decodeGrantKeySet(data: Uint8Array | string | GrantKeySet): GrantKeySet {
  let v: JSONValue;
  if (typeof data === "string" || data instanceof Uint8Array) {
    let text: string;
    try {
      text = typeof data === "string" ? data : new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data);
      v = parseJSON(text, undefined, true);
    } catch (err) {
      throw new GrantKeySetError(`grant key set: not one JSON object: ${(err as Error).message}`, { cause: err });
    }
  } else {
    v = toJSONValue(data);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v) || v instanceof JSONNumber) {
    throw new GrantKeySetError(`grant key set: ${jsonKind(v)}, want an object with keys`);
  }
  const list = v["keys"];
  if (!Array.isArray(list)) {
    throw new GrantKeySetError(`grant key set: keys is ${jsonKind(list)}, want a list`);
  }
  const keys: GrantKey[] = [];
  const kids = new Set<string>();
  for (const [i, k] of list.entries()) {
    if (typeof k !== "object" || k === null || Array.isArray(k) || k instanceof JSONNumber) {
      throw new GrantKeySetError(`grant key set: keys[${i}] is ${jsonKind(k)}, want an object`);
    }
    for (const m of Object.keys(k)) {
      if (!keyMembers.has(m)) {
        throw new GrantKeySetError(`grant key set: keys[${i}] has an unknown member ${JSON.stringify(m)}`);
      }
    }
    if (k["kty"] !== "OKP" || k["crv"] !== "Ed25519") {
      throw new GrantKeySetError(`grant key set: keys[${i}] is not an Ed25519 key (kty OKP, crv Ed25519)`);
    }
    if ((k["alg"] !== undefined && k["alg"] !== grantWire.algorithm) || (k["use"] !== undefined && k["use"] !== "sig")) {
      throw new GrantKeySetError(`grant key set: keys[${i}] is not a signing key of alg ${grantWire.algorithm}`);
    }
    const x = k["x"];
    if (typeof x !== "string" || !b64url.test(x) || x.length !== 43 || Buffer.from(x, "base64url").toString("base64url") !== x) {
      throw new GrantKeySetError(`grant key set: keys[${i}].x is not a 32-byte public key in unpadded base64url`);
    }
    const kid = k["kid"];
    const want = grantKeyID(Buffer.from(x, "base64url"));
    if (kid !== want) {
      throw new GrantKeySetError(`grant key set: keys[${i}].kid ${typeof kid === "string" ? JSON.stringify(kid) : jsonKind(kid)} is not its key's id ${want}`);
    }
    if (kids.has(kid)) {
      throw new GrantKeySetError(`grant key set: kid ${kid} appears twice`);
    }
    kids.add(kid);
    const key: GrantKey = { kid, kty: "OKP", crv: "Ed25519", x, created_at: keyInt(k, "created_at", i), max_ttl_s: keyInt(k, "max_ttl_s", i) };
    if (key.max_ttl_s <= 0) {
      throw new GrantKeySetError(`grant key set: keys[${i}].max_ttl_s is ${key.max_ttl_s}, want a positive number of seconds`);
    }
    if (k["retired_at"] !== undefined && k["retired_at"] !== null) {
      key.retired_at = keyInt(k, "retired_at", i);
      if (key.retired_at < key.created_at) {
        throw new GrantKeySetError(`grant key set: keys[${i}] retired at ${key.retired_at}, before it was created at ${key.created_at}`);
      }
    }
    keys.push(key);
  }
  const set = { keys };
  decodedKeySets.add(set);
  return set;
}

/** Key sets decodeGrantKeySet returned: verifyGrant checks any other before it trusts it. */
const decodedKeySets = new WeakSet<GrantKeySet>();

function checkedKeySet(keys: GrantKeySet): GrantKeySet {
  return typeof keys === "object" && keys !== null && decodedKeySets.has(keys) ? keys : decodeGrantKeySet(keys);
}

const publicKeys = new WeakMap<GrantKey, KeyObject>();

function publicKey(k: GrantKey): KeyObject {
  let key = publicKeys.get(k);
  if (!key) {
    key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: k.x }, format: "jwk" });
    publicKeys.set(k, key);
  }
  return key;
}

/** Throws GrantError unless key may have signed a grant of claims, checked at now (Unix seconds). */
function checkLifetime(key: GrantKey, c: GrantClaims, now: number): void {
  if (c.iat < key.created_at) {
    throw new GrantError("iat", `iat ${c.iat} is before key ${key.kid}'s created_at ${key.created_at}`);
  }
  if (key.retired_at !== undefined) {
    if (c.iat >= key.retired_at) {
      throw new GrantError("retired", `retired: key ${key.kid} was retired at ${key.retired_at}, and iat ${c.iat} is not before that`);
    }
    if (c.exp > key.retired_at + key.max_ttl_s) {
      throw new GrantError(
        "retired",
        `retired: exp ${c.exp} is after key ${key.kid}'s retired_at ${key.retired_at} plus max_ttl_s ${key.max_ttl_s}`,
      );
    }
  }
  if (c.exp <= c.iat) {
    throw new GrantError("exp", `exp ${c.exp} is not after iat ${c.iat}`);
  }
  if (c.exp - c.iat > key.max_ttl_s) {
    throw new GrantError("max_ttl", `max_ttl: exp - iat is ${c.exp - c.iat} s, over key ${key.kid}'s max_ttl_s ${key.max_ttl_s}`);
  }
  if (c.iat > now + grantWire.clockSkewS) {
    throw new GrantError("iat", `iat ${c.iat} is more than ${grantWire.clockSkewS} s after now (${now}): issued in the future`);
  }
  if (now >= c.exp) {
    throw new GrantError("exp", `exp: the grant expired at ${c.exp} (now ${now})`);
  }
}

function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

function expectString(expect: GrantExpectation, k: "tenant" | "proposal_id" | "action"): string {
  const v = expect?.[k];
  if (typeof v !== "string" || v === "") {
    throw new GrantError(k, `the executor names no ${k} to check the grant against`);
  }
  return v;
}

/** The digest of the target the executor is about to act on. */
function expectedTarget(expect: GrantExpectation): string {
  if (expect.target_sha256 !== undefined) {
    if (typeof expect.target_sha256 !== "string" || !hex64.test(expect.target_sha256)) {
      throw new GrantError("target_sha256", "the executor's target_sha256 is not a lowercase hex SHA-256");
    }
    return expect.target_sha256;
  }
  try {
    if (expect.target_json !== undefined) {
      if (typeof expect.target_json !== "string") {
        throw new CanonicalJSONError("target_json is not JSON text");
      }
      return sha256Hex(canonicalJSONText(expect.target_json));
    }
    if (Object.hasOwn(expect, "target")) {
      return targetDigest(expect.target);
    }
  } catch (err) {
    throw new GrantError("target_sha256", `target_sha256: the executor's target cannot be canonicalised: ${(err as Error).message}`, {
      cause: err,
    });
  }
  throw new GrantError("target_sha256", "the executor names no target to check the grant against (give target, target_json or target_sha256; {} for none)");
}

/** The digest of the proposal the executor is about to act on. */
function expectedProposal(expect: GrantExpectation): string {
  if (expect.proposal !== undefined) {
    if (typeof expect.proposal !== "string" && !(expect.proposal instanceof Uint8Array)) {
      throw new GrantError("proposal_sha256", "the executor's proposal is not bytes or text");
    }
    return sha256Hex(expect.proposal);
  }
  if (typeof expect.proposal_sha256 !== "string" || !hex64.test(expect.proposal_sha256)) {
    throw new GrantError("proposal_sha256", "the executor names no proposal (bytes or lowercase hex proposal_sha256) to check the grant against");
  }
  return expect.proposal_sha256;
}

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
export function verifyGrant(token: unknown, keys: GrantKeySet, now: number, expect: GrantExpectation): GrantClaims {
  if (typeof now !== "number" || !Number.isFinite(now)) {
    throw new GrantError("exp", `the verifier's clock reads ${String(now)}, not Unix seconds`);
  }
  if (typeof expect !== "object" || expect === null) {
    throw new GrantError("tenant", "the executor names nothing to check the grant against");
  }
  // The header and its key, the payload's form, the signature, and only
  // then what the signed payload says: the key's rules on its times, then
  // what it names. Nothing the payload claims is judged before the
  // signature holds, so an altered payload is refused as forged.
  const [h, p, s] = split(token);
  const header = decodeHeader(h);
  const key = checkedKeySet(keys).keys.find((k) => k.kid === header.kid);
  if (!key) {
    throw new GrantError("kid", `kid ${JSON.stringify(header.kid)} is not a key of gated's key set`);
  }
  const c = decodePayload(p);
  const signature = decodeSignature(s);
  let ok: boolean;
  try {
    ok = verifySignature(null, Buffer.from(h + "." + p, "ascii"), publicKey(key), signature);
  } catch (err) {
    throw new GrantError("signature", `signature cannot be checked with key ${key.kid}: ${(err as Error).message}`, { cause: err });
  }
  if (!ok) {
    throw new GrantError("signature", `signature does not verify with key ${key.kid}: the grant is forged or altered`);
  }
  checkLifetime(key, c, now);
  for (const k of ["tenant", "proposal_id"] as const) {
    const want = expectString(expect, k);
    if (c[k] !== want) {
      throw new GrantError(k, `${k} ${JSON.stringify(c[k])} does not match ${JSON.stringify(want)}, the one about to run`);
    }
  }
  if (c.proposal_sha256 !== expectedProposal(expect)) {
    throw new GrantError("proposal_sha256", "proposal_sha256 does not match the proposal about to run: the grant approves other bytes");
  }
  const action = expectString(expect, "action");
  if (c.action !== action) {
    throw new GrantError("action", `action ${JSON.stringify(c.action)} does not match ${JSON.stringify(action)}, the one about to run`);
  }
  if (c.target_sha256 !== expectedTarget(expect)) {
    throw new GrantError("target_sha256", "target_sha256 does not match the target");
  }
  return c;
}

/** The kid a grant's header names, or undefined when the token cannot be read that far. */
export function grantKeyIDOf(token: unknown): string | undefined {
  if (typeof token !== "string" || token.length > grantWire.maxTokenLength) {
    return undefined;
  }
  try {
    return decodeHeader(token.split(".")[0] ?? "").kid;
  } catch {
    return undefined;
  }
}

/**
 * Reads gated's answer to the use of the grant gid: {"ok":true,"gid":gid}
 * is the only acceptance. {"ok":false,"error":why} throws GrantUseError
 * with gated's reason; anything else (not JSON, another gid, ok missing)
 * throws GrantError with member "use": never an acceptance.
 */
export function decodeGrantUseReply(data: Uint8Array | string, gid: string): void {
  let reply: JSONValue;
  try {
    const text = typeof data === "string" ? data : new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data);
    reply = parseJSON(text, undefined, true);
  } catch (err) {
    throw new GrantError("use", `use: gated's reply to the use of grant ${gid} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (typeof reply !== "object" || reply === null || Array.isArray(reply) || reply instanceof JSONNumber) {
    throw new GrantError("use", `use: gated's reply to the use of grant ${gid} is ${jsonKind(reply)}, not an object`);
  }
  if (reply["ok"] === false) {
    const why = reply["error"];
    throw new GrantUseError(typeof why === "string" && why.trim() !== "" ? why : "no reason given");
  }
  if (reply["ok"] !== true) {
    throw new GrantError("use", `use: gated's reply to the use of grant ${gid} has ok ${jsonKind(reply["ok"])}, not true`);
  }
  if (reply["gid"] !== gid) {
    throw new GrantError("use", `use: gated's reply accepts ${typeof reply["gid"] === "string" ? `grant ${reply["gid"]}` : "no grant"}, not grant ${gid}`);
  }
}

// ---- outcomes ----

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
export function boundUTF8(s: string, max: number): string {
  const b = Buffer.from(wellFormed(s), "utf8");
  if (b.length <= max) {
    return wellFormed(s);
  }
  let end = max;
  while (end > 0 && (b[end]! & 0xc0) === 0x80) {
    end--;
  }
  return b.subarray(0, end).toString("utf8");
}

/** The JSON text of an outcome report: members in the contract's order, the error bounded. */
export function encodeOutcome(r: OutcomeReport, now: Date = new Date()): string {
  const at = r.at === undefined ? now.toISOString() : r.at instanceof Date ? r.at.toISOString() : r.at;
  return JSON.stringify({
    v: 1,
    gid: r.gid,
    tenant: r.tenant,
    proposal_id: r.proposal_id,
    status: r.status,
    error: boundUTF8(r.error ?? "", grantWire.maxOutcomeErrorBytes),
    at,
  });
}
