// gated's wire contract on the fleet side: subjects, the exact bytes of a
// proposal, its address, and the client's judgement of a verdict message.
// Every function here is pure; the shared vectors in test/vectors hold it
// to what the Go client (bus/fleet) does.

import { createHash } from "node:crypto";

import {
  BadProposalError,
  FoldedKeysError,
  IdReusedError,
  MalformedVerdictError,
  NotFoundError,
  NotGatedError,
  NotThisProposalError,
  ServiceError,
  UnconfirmedApprovalError,
} from "./errors.js";
import {
  decodeAs,
  describe,
  goMap,
  goNumber,
  goString,
  type GoType,
  type JSONValue,
  parseJSON,
  utf8Text,
  validRFC3339,
} from "./json.js";
import { findFoldedKeys } from "./fold.js";
import type { Address, Proposal, Verdict } from "./types.js";

/** The proposal and verdict schema version this package speaks. */
export const schemaVersion = 1;

/** Subjects and names of the v1 wire contract (engine/wire in Go). */
export const wire = {
  proposalSubjectPrefix: "gated.proposals.",
  verdictSubjectPrefix: "gated.verdicts.",
  statusSubjectPrefix: "gated.status.",
  statusWatchSubjectPrefix: "gated.watch.",
  statusHeader: "Gated-Status",
  reviewSubject: "gated.review",
  reviewSubjectPrefix: "gated.review.",
  verdictBucket: "GATED_VERDICTS",
  defaultAPIPrefix: "$JS.API",
} as const;

/** Where a proposal of tenant for action is published. */
export function proposalSubject(tenant: string, action: string): string {
  return wire.proposalSubjectPrefix + tenant + "." + action;
}

/** Where the verdict for tenant and id is published. */
export function verdictSubject(tenant: string, id: string): string {
  return wire.verdictSubjectPrefix + tenant + "." + id;
}

/** The JetStream direct-get subject that reads the stored verdict of tenant and id (Go: VerdictLookupSubject). */
export function verdictLookupSubject(apiPrefix: string, tenant: string, id: string): string {
  return `${apiPrefix}.DIRECT.GET.KV_${wire.verdictBucket}.$KV.${wire.verdictBucket}.${tenant}.${id}`;
}

/** Reports whether s is a tenant token: [a-z0-9_-]{1,64}. */
export function validTenant(s: unknown): s is string {
  return typeof s === "string" && /^[a-z0-9_-]{1,64}$/.test(s);
}

/** Reports whether s is a proposal id: [A-Za-z0-9_-]{1,128}. */
export function validID(s: unknown): s is string {
  return typeof s === "string" && /^[A-Za-z0-9_-]{1,128}$/.test(s);
}

/** Reports whether s is an action token: [A-Za-z0-9_-]{1,128}. */
export function validAction(s: unknown): s is string {
  return validID(s);
}

/** The proposal's Nats-Msg-Id and its verdict's key in the bucket: <tenant>.<id>. */
export function addressKey(a: Address): string {
  return a.tenant + "." + a.id;
}

/** Throws BadProposalError unless a's tokens are valid. */
export function checkAddress(a: Address): Address {
  if (!validTenant(a.tenant)) {
    throw new BadProposalError(`proposal cannot be addressed: tenant ${quote(a.tenant)} must match [a-z0-9_-]{1,64}`);
  }
  if (!validID(a.id)) {
    throw new BadProposalError(`proposal cannot be addressed: id ${quote(a.id)} must match [A-Za-z0-9_-]{1,128}`);
  }
  if (!validAction(a.action)) {
    throw new BadProposalError(`proposal cannot be addressed: action ${quote(a.action)} must match [A-Za-z0-9_-]{1,128}`);
  }
  return a;
}

function quote(v: unknown): string {
  return typeof v === "string" ? JSON.stringify(v) : describe(v);
}

const addressType: GoType = { struct: { tenant: "string", id: "string", action: "string" } };

/**
 * Reads the address of a raw proposal (its JSON bytes or text). It checks
 * only what publishing needs; gated validates the rest. Throws
 * BadProposalError.
 */
export function addressOf(data: Uint8Array | string): Address {
  const text = typeof data === "string" ? data : utf8Text(data);
  let a: Partial<Address>;
  try {
    a = decodeAs(parseJSON(text), addressType, "") as Partial<Address>;
  } catch (err) {
    throw new BadProposalError(`proposal cannot be addressed: ${(err as Error).message}`, { cause: err });
  }
  return checkAddress({ tenant: a?.tenant ?? "", id: a?.id ?? "", action: a?.action ?? "" });
}

/** The hex SHA-256 of the exact bytes of a proposal: a verdict's proposal_sha256. */
export function proposalDigest(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

// The encoding of a proposal: engine.Proposal's fields in order, with the
// Go type and omitempty of each.
type Enc = "string" | "bool" | "int" | "map" | "time" | { struct: Field[] } | { slice: Enc } | { ptr: Enc };
type Field = [name: string, type: Enc, omitempty: boolean];

const findingEnc: Enc = {
  struct: [
    ["id", "string", false],
    ["body", "string", false],
    ["path", "string", true],
    ["line", { ptr: "int" }, false],
    ["criterion", "string", true],
    ["status", "string", true],
  ],
};

const proposalEnc: Field[] = [
  ["v", "int", false],
  ["id", "string", false],
  ["tenant", "string", false],
  ["kind", "string", true],
  ["action", "string", false],
  ["class", "string", false],
  ["target", "map", true],
  ["arguments", "map", true],
  ["reason", "string", true],
  ["blast_radius", "string", true],
  ["operator", { ptr: { struct: [["id", "string", false], ["roles", { slice: "string" }, true]] } }, true],
  ["requested_by", { ptr: { struct: [["agent", "string", false], ["session", "string", true]] } }, true],
  ["incident_id", "string", true],
  ["context_summary", "string", true],
  [
    "flags",
    {
      struct: [
        ["skip_review", "bool", false],
        ["force_approve", "bool", false],
        ["force_approve_no_sop", "bool", false],
        ["user_confirmed", "bool", false],
      ],
    },
    false,
  ],
  ["reviewer", "string", true],
  [
    "criteria",
    {
      slice: {
        struct: [
          ["id", "string", false],
          ["description", "string", false],
          ["required", "bool", false],
          ["kind", "string", true],
          ["params", "map", true],
          ["evidence", "map", true],
        ],
      },
    },
    true,
  ],
  [
    "run",
    {
      ptr: {
        struct: [
          ["run_id", "string", false],
          ["task_id", "string", true],
          ["status", "string", false],
          ["summary", "string", true],
          ["diff", "string", true],
          ["test_output", "string", true],
          ["round", "int", false],
          ["worker", "string", false],
          [
            "prior_reviews",
            {
              slice: {
                struct: [
                  ["proposal_id", "string", true],
                  ["round", "int", false],
                  ["findings", { slice: findingEnc }, true],
                  ["summary", "string", true],
                ],
              },
            },
            true,
          ],
        ],
      },
    },
    true,
  ],
  ["created_at", { ptr: "time" }, true],
  ["labels", { slice: "string" }, true],
];

function isEmpty(v: unknown, t: Enc): boolean {
  if (v === undefined || v === null) {
    return true;
  }
  if (typeof t === "string") {
    switch (t) {
      case "string":
        return v === "";
      case "bool":
        return v === false;
      case "int":
        return v === 0;
      case "map":
        return typeof v === "object" && Object.values(v).every((e) => e === undefined);
      default:
        return false;
    }
  }
  if ("slice" in t) {
    return Array.isArray(v) && v.length === 0;
  }
  return false; // a pointer that is set, or a struct: Go never omits them
}

/** Go's time.Time MarshalJSON of an RFC 3339 time: trailing zeros of the fraction cut, a zero offset written Z. */
function goTime(v: unknown, path: string): string {
  let s: string;
  if (v instanceof Date) {
    if (Number.isNaN(v.getTime())) {
      throw new TypeError(`${path}: invalid Date`);
    }
    s = v.toISOString();
  } else if (typeof v === "string") {
    s = v;
  } else {
    throw new TypeError(`${path}: want an RFC 3339 time as a string or a Date, got a ${describe(v)}`);
  }
  if (!validRFC3339(s)) {
    throw new TypeError(`${path}: ${JSON.stringify(s)} is not an RFC 3339 time such as 2026-11-25T10:00:00Z`);
  }
  const m = /^([^.]*?)(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.exec(s)!;
  let frac = (m[2] ?? "").replace(/0+$/, "");
  if (frac === ".") {
    frac = "";
  }
  const zone = m[3] === "+00:00" || m[3] === "-00:00" ? "Z" : m[3]!;
  return goString(m[1] + frac + zone);
}

function encodeAs(v: unknown, t: Enc, path: string): string {
  if (typeof t === "string") {
    switch (t) {
      case "string":
        if (v === undefined || v === null) {
          return '""';
        }
        if (typeof v !== "string") {
          throw new TypeError(`${path}: want a string, got a ${describe(v)}`);
        }
        return goString(v);
      case "bool":
        if (v === undefined || v === null) {
          return "false";
        }
        if (typeof v !== "boolean") {
          throw new TypeError(`${path}: want a boolean, got a ${describe(v)}`);
        }
        return v ? "true" : "false";
      case "int":
        if (v === undefined || v === null) {
          return "0";
        }
        if (typeof v !== "number" || !Number.isSafeInteger(v)) {
          throw new TypeError(`${path}: want an integer, got ${typeof v === "number" ? v : "a " + describe(v)}`);
        }
        return goNumber(v === 0 ? 0 : v, path);
      case "map":
        if (v === undefined || v === null) {
          return "null";
        }
        if (typeof v !== "object" || Array.isArray(v) || describe(v) !== "object") {
          throw new TypeError(`${path}: want an object, got a ${describe(v)}`);
        }
        return goMap(v as Record<string, unknown>, path);
      case "time":
        return goTime(v, path);
    }
  }
  if ("ptr" in t) {
    return v === undefined || v === null ? "null" : encodeAs(v, t.ptr, path);
  }
  if ("slice" in t) {
    if (v === undefined || v === null) {
      return "null";
    }
    if (!Array.isArray(v)) {
      throw new TypeError(`${path}: want an array, got a ${describe(v)}`);
    }
    return "[" + v.map((e, i) => encodeAs(e, t.slice, `${path}[${i}]`)).join(",") + "]";
  }
  return encodeStruct(v ?? {}, t.struct, path);
}

function encodeStruct(v: unknown, fields: Field[], path: string): string {
  if (typeof v !== "object" || v === null || Array.isArray(v) || describe(v) !== "object") {
    throw new TypeError(`${path || "proposal"}: want an object, got a ${describe(v)}`);
  }
  const o = v as Record<string, unknown>;
  const known = new Set(fields.map((f) => f[0]));
  for (const k of Object.keys(o)) {
    if (!known.has(k) && o[k] !== undefined) {
      throw new TypeError(`${path ? path + "." : ""}${k}: not a member of a gated proposal`);
    }
  }
  const members: string[] = [];
  for (const [name, t, omitempty] of fields) {
    const e = o[name];
    if (omitempty && isEmpty(e, t)) {
      continue;
    }
    members.push(goString(name) + ":" + encodeAs(e, t, path ? `${path}.${name}` : name));
  }
  return "{" + members.join(",") + "}";
}

/**
 * Encodes a proposal as the Go client does (engine.Proposal through Go's
 * encoding/json), with v set to 1 when it is absent or 0: the same proposal
 * has the same bytes, and the same digest, from every language. Throws
 * BadProposalError for an unusable address, a member gated does not know,
 * or a value of the wrong type, and its FoldedKeysError for arguments with
 * two member names equal under case folding, which gated would refuse.
 */
export function encodeProposal(p: Proposal): { address: Address; text: string; bytes: Uint8Array } {
  if (typeof p !== "object" || p === null) {
    throw new BadProposalError(`proposal cannot be addressed: a proposal is an object, got a ${describe(p)}`);
  }
  const address = checkAddress({ tenant: p.tenant, id: p.id, action: p.action });
  let text: string;
  try {
    text = encodeStruct({ ...p, v: p.v || schemaVersion }, proposalEnc, "");
  } catch (err) {
    throw new BadProposalError(`encoding proposal ${addressKey(address)}: ${(err as Error).message}`, { cause: err });
  }
  if (p.arguments != null && !isEmpty(p.arguments, "map")) {
    // The names as gated reads them from these bytes (a lone surrogate is U+FFFD).
    const found = findFoldedKeys((JSON.parse(text) as { arguments?: unknown }).arguments);
    if (found) {
      throw new FoldedKeysError(`encoding proposal ${addressKey(address)}`, found);
    }
  }
  return { address, text, bytes: new TextEncoder().encode(text) };
}

// The verdict as Go's engine.Verdict reads it.
const criterionEvalType: GoType = {
  struct: {
    id: "string",
    pass: "bool",
    confidence: "float",
    reason: "string",
    refs: { slice: "string" },
    kind: "string",
    required: "bool",
    judged_by: "string",
  },
};
const commentType: GoType = { struct: { path: "string", line: { ptr: "int" }, body: "string" } };
const verdictType: GoType = {
  struct: {
    v: "int",
    proposal_id: "string",
    tenant: "string",
    action: "string",
    kind: "string",
    outcome: "string",
    approved: "bool",
    stage: "string",
    reason: "string",
    policy: {
      ptr: {
        struct: {
          denies: { slice: { struct: { rule: "string", message: "string" } } },
          revision: "string",
          eval_us: "int",
        },
      },
    },
    reviews: {
      slice: {
        struct: {
          plugin: "string",
          plugin_version: "string",
          persona: "string",
          model: "string",
          decision_text: "string",
          decision: "string",
          gates: { slice: { struct: { name: "string", passed: "bool", detail: "string" } } },
          missing_gates: { slice: "string" },
          sop_id: "string",
          rollback_path: "string",
          notes: "string",
          criteria: { slice: criterionEvalType },
          comments: { slice: commentType },
          missing_work: { slice: "string" },
          next_round_guidance: "string",
          warnings: { slice: "string" },
          confidence: "float",
          turns: "int",
          tokens: { struct: { prompt: "int", completion: "int" } },
          latency_ms: "float",
        },
      },
    },
    decided_at: "time",
    latency_ms: "float",
    audit_seq: "uint",
    proposal_sha256: "string",
    target_key: "string",
    agent: "string",
    duplicate_of: "string",
    run: {
      ptr: {
        struct: {
          run_id: "string",
          task_id: "string",
          worker: "string",
          round: "int",
          max_rounds: "int",
          criteria: { slice: criterionEvalType },
          missing_work: { slice: "string" },
          next_round_guidance: "string",
          comments: { slice: commentType },
          findings: {
            slice: {
              struct: {
                id: "string",
                body: "string",
                path: "string",
                line: { ptr: "int" },
                criterion: "string",
                status: "string",
              },
            },
          },
          warnings: { slice: "string" },
          awaiting_operator: { slice: "string" },
          next: "string",
          follow_up_subject: "string",
        },
      },
    },
    awaiting_operator: { ptr: { struct: { deadline: "time", reason: "string", rule: "string" } } },
    operator_decision: { ptr: { struct: { id: "string", key: "string", decision: "string", reason: "string" } } },
    grant: "string",
  },
};

/**
 * Decodes a verdict as Go's encoding/json reads engine.Verdict: members of
 * the wrong type are an error, unknown members are ignored, absent ones
 * read as empty. Throws JSONSyntaxError or JSONTypeError.
 */
export function decodeVerdict(data: Uint8Array | string): Verdict {
  const text = typeof data === "string" ? data : utf8Text(data);
  return decodeVerdictValue(parseJSON(text));
}

/** decodeVerdict of a value parsed already (the verdict inside a status event). */
export function decodeVerdictValue(value: JSONValue): Verdict {
  const v = (decodeAs(value, verdictType, "") ?? {}) as Partial<Verdict>;
  return { ...v, proposal_id: v.proposal_id ?? "", tenant: v.tenant ?? "", outcome: v.outcome ?? "" };
}

/**
 * Reads a message on a's verdict subject. Anything that is not a verdict
 * naming a's tenant and id is not an answer (null) and is skipped, not
 * taken as a failure: another client may land a reply there.
 */
export function verdictMessage(a: Address, data: Uint8Array | string): Verdict | null {
  try {
    const v = decodeVerdict(data);
    return v.tenant === a.tenant && v.proposal_id === a.id ? v : null;
  } catch {
    return null;
  }
}

/**
 * Accepts only a verdict for exactly these bytes. Throws
 * NotThisProposalError (another tenant or id), NotGatedError (no digest)
 * or IdReusedError (the digest of other bytes).
 */
export function answer(a: Address, digest: string, v: Verdict): Verdict {
  if (v.tenant !== a.tenant || v.proposal_id !== a.id) {
    throw new NotThisProposalError(`verdict names ${v.tenant}.${v.proposal_id}, want ${addressKey(a)}`);
  }
  if (v.proposal_sha256 !== digest) {
    if (!v.proposal_sha256) {
      throw new NotGatedError(`verdict of ${addressKey(a)} names no proposal digest: gated always sets one, so it is not gated's`);
    }
    throw new IdReusedError(`proposal id already used by a different proposal: ${addressKey(a)}`);
  }
  return v;
}

/**
 * The client's whole judgement of a verdict that arrived as a message:
 * a refusal is taken as it comes (it can only stop an action), an approval
 * counts only once the stored verdict confirms it. A look-up that fails is
 * an UnconfirmedApprovalError, never an approval.
 */
export async function confirmApproval(
  a: Address,
  digest: string,
  v: Verdict,
  stored: () => Promise<Verdict>,
): Promise<Verdict> {
  answer(a, digest, v);
  if (v.approved !== true) {
    return v; // not an approval, whatever its outcome says (checkVerdict)
  }
  let s: Verdict;
  try {
    s = await stored();
  } catch (err) {
    throw new UnconfirmedApprovalError(
      `confirming the approval of ${addressKey(a)} with its stored verdict: ${(err as Error).message}`,
      { cause: err },
    );
  }
  return answer(a, digest, s);
}

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
export function decodeStoredVerdict(tenant: string, id: string, m: WireReply): Verdict {
  if (m.data.length === 0 && m.status) {
    if (m.status === "404") {
      throw new NotFoundError(`verdict not found: ${tenant}.${id}`);
    }
    throw new MalformedVerdictError(`reading verdict ${tenant}.${id}: JetStream answered ${m.status} ${m.description ?? ""}`);
  }
  const op = m.header("KV-Operation");
  if (op === "DEL" || op === "PURGE") {
    throw new NotFoundError(`verdict not found: ${tenant}.${id}`);
  }
  const subj = m.header("Nats-Subject");
  if (subj && subj !== `$KV.${wire.verdictBucket}.${tenant}.${id}`) {
    throw new MalformedVerdictError(`reading verdict ${tenant}.${id}: JetStream returned the entry of ${subj}`);
  }
  let v: Verdict;
  try {
    v = decodeVerdict(m.data);
  } catch (err) {
    throw new MalformedVerdictError(`decoding stored verdict ${tenant}.${id}: ${(err as Error).message}`, { cause: err });
  }
  if (v.tenant !== tenant || v.proposal_id !== id) {
    throw new MalformedVerdictError(`stored verdict under ${tenant}.${id} names ${v.tenant}.${v.proposal_id}`);
  }
  return v;
}

/**
 * Reads a reply of the review service: a micro error (headers
 * Nats-Service-Error-Code and Nats-Service-Error) is a ServiceError,
 * anything else must be a verdict (else MalformedVerdictError).
 */
export function decodeReviewReply(header: (name: string) => string | undefined, data: Uint8Array | string): Verdict {
  const code = header("Nats-Service-Error-Code");
  if (code) {
    // Go reads the code with strconv.Atoi: an optional sign, decimal digits.
    let n = /^[+-]?[0-9]+$/.test(code) ? Number(code) : NaN;
    if (!Number.isInteger(n) || n < 100 || n > 999) {
      n = 500;
    }
    return throwService(n, header("Nats-Service-Error") || "no description");
  }
  let v: Verdict;
  try {
    v = decodeVerdict(data);
  } catch (err) {
    throw new MalformedVerdictError(`decoding the review service's reply: ${(err as Error).message}`, { cause: err });
  }
  if (!v.proposal_id || !v.tenant || !v.outcome) {
    throw new MalformedVerdictError("decoding the review service's reply: not a verdict (no proposal_id, tenant or outcome)");
  }
  return v;
}

function throwService(status: number, description: string): never {
  throw new ServiceError(status, description);
}
