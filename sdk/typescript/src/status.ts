// A proposal's progress: the status events gated publishes on
// gated.status.<tenant>.<id> (docs/FLEET.md), read as strictly as the Go
// client reads them. The shared vectors (test/vectors/statuses.json) hold
// this module to what the Go client does.

import { GatedError } from "./errors.js";
import { JSONNumber, type JSONValue, parseJSON, validRFC3339 } from "./json.js";
import type { Verdict } from "./types.js";
import { decodeVerdictValue, validID, validTenant, wire } from "./wire.js";

/** The stages of the v1 status contract, in the order a proposal passes them. */
export const statusStages = ["received", "policy_decided", "review_started", "awaiting_operator", "decided"] as const;

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
export class StatusError extends GatedError {
  override readonly code: string = "bad_status";
  constructor(
    /** The member at fault, or "" for the message as a whole. */
    readonly field: string,
    /** What is wrong with it. */
    readonly problem: string,
  ) {
    super(field ? `status event: field ${field}: ${problem}` : `status event: ${problem}`);
  }
}

/** Where gated publishes each stage of tenant's proposal id. */
export function statusSubject(tenant: string, id: string): string {
  return wire.statusSubjectPrefix + tenant + "." + id;
}

/** Where a watch asks gated for the status of tenant's proposal id. */
export function statusWatchSubject(tenant: string, id: string): string {
  return wire.statusWatchSubjectPrefix + tenant + "." + id;
}

const known = new Set(["v", "tenant", "id", "stage", "at", "reviewer", "deadline", "reason", "verdict"]);
const outcomes = new Set(["approved", "rejected", "blocked", "error", "timeout", "invalid"]);
const own: [string, StatusStage][] = [
  ["reviewer", "review_started"],
  ["reason", "awaiting_operator"],
  ["verdict", "decided"],
];

function shown(v: JSONValue, n: number): string {
  const s = v instanceof JSONNumber ? v.text : JSON.stringify(v, (_k, x: unknown) => (x instanceof JSONNumber ? Number(x.text) : x));
  return (s ?? "null").slice(0, n);
}

function time(name: string, v: JSONValue): string {
  if (typeof v !== "string") {
    throw new StatusError(name, `must be an RFC 3339 time string, not ${shown(v, 40)}`);
  }
  if (!validRFC3339(v)) {
    throw new StatusError(name, `must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not ${JSON.stringify(v.slice(0, 40))}`);
  }
  return v;
}

/**
 * Decodes one status event strictly: one JSON object, every member known
 * and given once, of the right type, the members of its stage only, and the
 * ones its stage requires present. Throws StatusError naming the member at
 * fault.
 */
export function decodeStatus(data: Uint8Array | string): Status {
  let text: string;
  try {
    text = typeof data === "string" ? data : new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data);
  } catch {
    throw new StatusError("", "not valid UTF-8");
  }
  if (text.trim() === "") {
    throw new StatusError("", "empty; expected a JSON object");
  }
  const dups: string[] = [];
  let doc: JSONValue;
  try {
    doc = parseJSON(text, dups);
  } catch (err) {
    throw new StatusError("", `not valid JSON: ${(err as Error).message}`);
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc) || doc instanceof JSONNumber) {
    throw new StatusError("", "must be a JSON object");
  }
  if (dups.length > 0) {
    throw new StatusError(dups[0]!.slice(0, 64), "appears more than once");
  }
  const out: Partial<Status> = {};
  for (const [key, value] of Object.entries(doc)) {
    switch (key) {
      case "v":
        if (!(value instanceof JSONNumber) || value.text !== "1") {
          throw new StatusError(key, `must be 1, not ${shown(value, 40)}`);
        }
        out.v = 1;
        break;
      case "tenant":
        if (!validTenant(value)) {
          throw new StatusError(key, `must be a tenant token [a-z0-9_-]{1,64}, not ${shown(value, 80)}`);
        }
        out.tenant = value as string;
        break;
      case "id":
        if (!validID(value)) {
          throw new StatusError(key, `must be a proposal id [A-Za-z0-9_-]{1,128}, not ${shown(value, 160)}`);
        }
        out.id = value as string;
        break;
      case "stage":
        if (typeof value !== "string") {
          throw new StatusError(key, `must be a string, not ${shown(value, 40)}`);
        }
        if (!(statusStages as readonly string[]).includes(value)) {
          throw new StatusError(key, `${JSON.stringify(value.slice(0, 40))} is not a stage of the v1 status contract`);
        }
        out.stage = value as StatusStage;
        break;
      case "at":
        out.at = time(key, value);
        break;
      case "deadline":
        out.deadline = time(key, value);
        break;
      case "reviewer":
        if (typeof value !== "string" || value === "") {
          throw new StatusError(key, `must be a non-empty string, not ${shown(value, 40)}`);
        }
        out.reviewer = value;
        break;
      case "reason":
        if (typeof value !== "string") {
          throw new StatusError(key, `must be a string, not ${shown(value, 40)}`);
        }
        out.reason = value;
        break;
      case "verdict":
        if (value === null || typeof value !== "object" || Array.isArray(value) || value instanceof JSONNumber) {
          throw new StatusError(key, `must be an object, not ${shown(value, 40)}`);
        }
        try {
          out.verdict = decodeVerdictValue(value);
        } catch (err) {
          throw new StatusError(key, `is not a verdict: ${(err as Error).message.slice(0, 200)}`);
        }
        break;
      default:
        if (!known.has(key)) {
          throw new StatusError(key.slice(0, 64), "is not a field of the v1 status event");
        }
    }
  }
  for (const name of ["v", "tenant", "id", "stage", "at"]) {
    if (!Object.hasOwn(doc, name)) {
      throw new StatusError(name, "is missing");
    }
  }
  const stage = out.stage!;
  for (const [name, stageOf] of own) {
    if (Object.hasOwn(doc, name) && stage !== stageOf) {
      throw new StatusError(name, `belongs to stage ${stageOf}, not ${stage}`);
    }
  }
  if (Object.hasOwn(doc, "deadline") && stage !== "review_started" && stage !== "awaiting_operator") {
    throw new StatusError("deadline", `belongs to stages review_started and awaiting_operator, not ${stage}`);
  }
  if (stage === "review_started" && out.reviewer === undefined) {
    throw new StatusError("reviewer", "is missing; stage review_started names its reviewer");
  }
  if (stage === "awaiting_operator" && out.deadline === undefined) {
    throw new StatusError("deadline", "is missing; stage awaiting_operator has a deadline");
  }
  if (stage === "decided") {
    const v = out.verdict;
    if (v === undefined) {
      throw new StatusError("verdict", "is missing; stage decided carries the verdict");
    }
    if (v.tenant !== out.tenant || v.proposal_id !== out.id) {
      throw new StatusError("verdict", `names ${v.tenant.slice(0, 64)}.${v.proposal_id.slice(0, 128)}, not the status's ${out.tenant}.${out.id}`);
    }
    if (!outcomes.has(v.outcome)) {
      throw new StatusError("verdict.outcome", `${JSON.stringify(v.outcome.slice(0, 40))} is not an outcome`);
    }
    if ((v.approved === true) !== (v.outcome === "approved")) {
      throw new StatusError("verdict.approved", `is ${v.approved === true} for outcome ${v.outcome}`);
    }
  }
  return out as Status;
}

/**
 * Reads one message of tenant's proposal id's status subject: the status,
 * or a StatusError when it is malformed or names another proposal.
 */
export function statusUpdate(tenant: string, id: string, data: Uint8Array | string): Status {
  const st = decodeStatus(data);
  if (st.tenant !== tenant) {
    throw new StatusError("tenant", `is ${st.tenant} on the status subject of ${tenant}.${id}`);
  }
  if (st.id !== id) {
    throw new StatusError("id", `is ${st.id} on the status subject of ${tenant}.${id}`);
  }
  return st;
}
