// The tool catalog: how an agent framework's tool calls become proposals.
// The file is the one `gated mcp --catalog` reads (mcpgate/catalog.go,
// docs/MCP.md "The mapping"), read with the same rules, so one file
// serves both; test/vectors/catalogs.json holds the two readers to each
// other.

import { createHash } from "node:crypto";

import { parseAllDocuments } from "yaml";

import { GatedError } from "../errors.js";
import { isPlainObject } from "../json.js";
import type { BlastRadius, ProposalClass } from "../types.js";
import { validAction, validTenant } from "../wire.js";

/** The argument a call's reason is read from when the catalog names no other. */
export const defaultReasonArgument = "_reason";

/** The largest catalog decodeCatalog reads, in bytes. */
export const maxCatalogSize = 1 << 20;

/** A catalog that cannot be used: the message names what is wrong. */
export class CatalogError extends GatedError {
  override readonly code: string = "invalid_catalog";
}

/** One tool's overrides; every member is optional. */
export interface ToolRule {
  /** The proposal's action token, in place of the one derived from the tool's name (actionName). */
  action?: string;
  /** read, write or destructive; default write. */
  class?: ProposalClass;
  blast_radius?: BlastRadius;
  /** Target member → JSON Pointer (RFC 6901) into the call's arguments; default: the whole arguments. */
  target?: Record<string, string>;
  /** Members added to every call's target. */
  target_fixed?: Record<string, unknown>;
  reason_argument?: string;
  /** A persona to ask for; the policy's routes outrank it. */
  reviewer?: string;
  /** Flow labels every proposal of the tool carries (docs/POLICIES.md#flows): at most 16, each [a-z0-9_-]{1,64}. */
  labels?: string[];
}

/** The operator's description of an agent's tools (docs/MCP.md, "The mapping"). */
export interface Catalog {
  reason_argument?: string;
  blast_radius?: BlastRadius;
  tools?: Record<string, ToolRule>;
  /** gated mcp's overrides of each prompt's gets, read with the same rules. */
  prompts?: Record<string, ToolRule>;
  /** gated mcp's overrides of each resource's reads, read with the same rules. */
  resources?: Record<string, ToolRule>;
}

/** How the calls of one tool become proposals. */
export interface ToolMapping {
  tool: string;
  action: string;
  class: ProposalClass;
  /** Where the class came from: "catalog", or "default" (write). */
  classFrom: "catalog" | "default";
  blastRadius: BlastRadius;
  target: Record<string, string> | undefined;
  targetFixed: Record<string, unknown> | undefined;
  reasonArgument: string;
  reviewer: string | undefined;
  /** The catalog's flow labels; a labelled read is proposed, so its labels join the agent's flow state. */
  labels: string[];
}

/** One call read through its mapping. */
export interface MappedCall {
  target: Record<string, unknown>;
  /** The reason argument's value, "" when the call has none. */
  reason: string;
  /** Every argument but the reason: what the proposal carries and the tool runs with. */
  arguments: Record<string, unknown>;
}

const ruleKeys = new Set(["action", "class", "blast_radius", "target", "target_fixed", "reason_argument", "reviewer", "labels"]);
const maxLabels = 16;
const catalogKeys = new Set(["reason_argument", "blast_radius", "tools", "prompts", "resources"]);
const blasts = new Set(["single_device", "cluster", "tenant_wide"]);
const classes = new Set(["read", "write", "destructive"]);

/**
 * Plain integers as gated mcp's YAML decoder reads them: a leading 0 is
 * octal (010 is 8), 0o, 0x and 0b name their base, and _ may separate
 * digits (1_000 is 1000); the YAML 1.2 core schema alone would read 010 as
 * 10 and 1_000 as text, so one catalog would give two targets.
 */
const goInt = {
  identify: (v: unknown) => typeof v === "number" && Number.isInteger(v),
  default: true,
  tag: "tag:yaml.org,2002:int",
  test: /^[-+]?(?:0[0-7]+(?:_[0-7]+)*|0[oO]_?[0-7]+(?:_[0-7]+)*|0[xX]_?[0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|0[bB]_?[01]+(?:_[01]+)*|[0-9]+(?:_[0-9]+)+)$/,
  resolve(str: string): number {
    let s = str.replace(/^[-+]/, "").replaceAll("_", "");
    let base = 10;
    if (/^0[xXoObB]/.test(s)) {
      base = { x: 16, o: 8, b: 2 }[s[1]!.toLowerCase() as "x" | "o" | "b"];
      s = s.slice(2);
    } else if (/^0[0-7]/.test(s)) {
      base = 8;
      s = s.slice(1);
    }
    const n = parseInt(s, base);
    return str.startsWith("-") ? -n : n;
  },
};

/**
 * A plain date as gated mcp's decoder reads it, a time written back in
 * RFC 3339 (2001-1-2 is "2001-01-02T00:00:00Z"); a plain date with a time
 * of day is refused (quote it), as the Python reader refuses it.
 */
const goDate = {
  identify: () => false,
  default: true,
  tag: "tag:yaml.org,2002:timestamp",
  test: /^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9].*)?$/,
  resolve(str: string, onError: (message: string) => void): string {
    const m = /^([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})$/.exec(str);
    if (!m) {
      onError(`quote the time ${JSON.stringify(str)} to keep it as text`);
      return str;
    }
    return `${m[1]}-${m[2]!.padStart(2, "0")}-${m[3]!.padStart(2, "0")}T00:00:00Z`;
  },
};

function fail(msg: string): never {
  throw new CatalogError(`invalid catalog: ${msg}`);
}

/**
 * Reads a catalog from YAML or JSON text (JSON is read as YAML), refusing
 * unknown fields, duplicate keys, more than one document, a bad class,
 * action, blast radius, target pointer or reviewer, and text over
 * maxCatalogSize bytes. Throws CatalogError naming what is wrong.
 */
export function decodeCatalog(data: string | Uint8Array): Catalog {
  const text = typeof data === "string" ? data : new TextDecoder("utf-8", { fatal: false }).decode(data);
  const size = typeof data === "string" ? Buffer.byteLength(data, "utf8") : data.length;
  if (size > maxCatalogSize) {
    fail(`${size} bytes, more than ${maxCatalogSize}`);
  }
  const docs = parseAllDocuments(text, { uniqueKeys: true, version: "1.2", customTags: (tags) => [goInt, goDate, ...tags] });
  const list = Array.isArray(docs) ? docs : [];
  if (list.length > 1) {
    fail("more than one YAML document");
  }
  const doc = list[0];
  if (!doc) {
    return {};
  }
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    const where = e.linePos?.[0] ? `line ${e.linePos[0].line}: ` : "";
    fail(`${where}${e.code === "DUPLICATE_KEY" ? "mapping key already defined" : e.message.split("\n")[0]}`);
  }
  let v: unknown;
  try {
    // Mappings as Maps, so that a key that is not a string is seen.
    v = doc.toJS({ mapAsMap: true, maxAliasCount: 100 });
  } catch (err) {
    fail((err as Error).message);
  }
  if (v === null || v === undefined) {
    return {};
  }
  const top = mapping(v);
  if (!top) {
    fail("cannot unmarshal a catalog from what is not a mapping");
  }
  return check(top);
}

/**
 * A YAML mapping as an object, its keys as strings (as Go reads a key into
 * a map of strings); undefined for anything else.
 */
function mapping(v: unknown): Record<string, unknown> | undefined {
  if (!(v instanceof Map)) {
    return undefined;
  }
  const out: Record<string, unknown> = {};
  for (const [k, e] of v) {
    out[String(k)] = e;
  }
  return out;
}

function check(v: Record<string, unknown>): Catalog {
  for (const k of Object.keys(v)) {
    if (!catalogKeys.has(k)) {
      fail(`field ${k} not found in the catalog`);
    }
  }
  const c: Catalog = {};
  const set = (k: string) => v[k] !== undefined && v[k] !== null && v[k] !== "";
  if (set("reason_argument")) {
    c.reason_argument = argumentName(v["reason_argument"], "reason_argument");
  }
  if (set("blast_radius")) {
    c.blast_radius = blast(v["blast_radius"], "blast_radius");
  }
  for (const section of ["tools", "prompts", "resources"] as const) {
    const rules = section in v ? sectionRules(v[section], section) : undefined;
    if (rules) {
      c[section] = rules;
    }
  }
  return c;
}

/**
 * One section of the catalog (tools, prompts or resources): a mapping of
 * names to rules, each checked as gated mcp checks it; undefined when the
 * section is absent or null.
 */
function sectionRules(v: unknown, section: string): Record<string, ToolRule> | undefined {
  if (v === undefined || v === null) {
    return undefined;
  }
  const entries = mapping(v);
  if (!entries) {
    fail(`${section} must be a mapping of names to rules`);
  }
  const out: Record<string, ToolRule> = {};
  for (const name of Object.keys(entries).sort()) {
    const where = `${section}[${JSON.stringify(name)}]`;
    if (name.trim() === "") {
      fail(`${section}: an entry with a blank name`);
    }
    const raw = entries[name] === null ? {} : mapping(entries[name]);
    if (!raw) {
      fail(`${where} must be a mapping`);
    }
    out[name] = rule(raw, where);
  }
  return out;
}

function rule(raw: Record<string, unknown>, where: string): ToolRule {
  for (const k of Object.keys(raw)) {
    if (!ruleKeys.has(k)) {
      fail(`${where}: field ${k} not found in a tool's rule`);
    }
  }
  const r: ToolRule = {};
  const present = (k: string) => raw[k] !== undefined && raw[k] !== null && raw[k] !== "";
  if (present("action")) {
    if (!validAction(raw["action"])) {
      fail(`${where}.action ${JSON.stringify(raw["action"])} must match [A-Za-z0-9_-]{1,128}`);
    }
    r.action = raw["action"] as string;
  }
  if (present("class")) {
    if (typeof raw["class"] !== "string" || !classes.has(raw["class"])) {
      fail(`${where}.class ${JSON.stringify(raw["class"])}: want read, write or destructive`);
    }
    r.class = raw["class"] as ProposalClass;
  }
  if (present("blast_radius")) {
    r.blast_radius = blast(raw["blast_radius"], `${where}.blast_radius`);
  }
  if (present("reason_argument")) {
    r.reason_argument = argumentName(raw["reason_argument"], `${where}.reason_argument`);
  }
  if (present("reviewer")) {
    if (!validTenant(raw["reviewer"])) {
      fail(`${where}.reviewer ${JSON.stringify(raw["reviewer"])} must be a persona name matching [a-z0-9_-]{1,64}`);
    }
    r.reviewer = raw["reviewer"] as string;
  }
  if (raw["labels"] !== undefined && raw["labels"] !== null) {
    r.labels = labels(raw["labels"], `${where}.labels`);
  }
  if (present("target_fixed")) {
    const fixed = mapping(raw["target_fixed"]);
    if (!fixed) {
      fail(`${where}.target_fixed is not a JSON object`);
    }
    r.target_fixed = jsonOnly(fixed, `${where}.target_fixed`) as Record<string, unknown>;
  }
  if (present("target")) {
    const t = mapping(raw["target"]);
    if (!t) {
      fail(`${where}.target must map target members to JSON Pointers`);
    }
    r.target = {};
    for (const [member, ptr] of Object.entries(t)) {
      if (member.trim() === "") {
        fail(`${where}.target has a blank member name`);
      }
      if (typeof ptr !== "string") {
        fail(`${where}.target[${JSON.stringify(member)}]: a JSON Pointer must be a string`);
      }
      try {
        parsePointer(ptr);
      } catch (err) {
        fail(`${where}.target[${JSON.stringify(member)}]: ${(err as Error).message}`);
      }
      if (r.target_fixed && Object.hasOwn(r.target_fixed, member)) {
        fail(`${where}: member ${JSON.stringify(member)} is both in target and in target_fixed`);
      }
      r.target[member] = ptr;
    }
  }
  return r;
}

/** A list of labels, as gated mcp's decoder reads one: a sequence of scalars, each read as text. */
function labels(v: unknown, where: string): string[] {
  if (!Array.isArray(v)) {
    fail(`${where}: cannot unmarshal ${typeof v === "object" ? "a mapping" : "a scalar"} into a list of labels`);
  }
  const out = v.map((l, i) => {
    if (l !== null && typeof l === "object") {
      fail(`${where}[${i}]: cannot unmarshal a collection into a label`);
    }
    return l === null ? "" : String(l);
  });
  if (out.length > maxLabels) {
    fail(`${where}: ${out.length} labels, more than ${maxLabels}`);
  }
  out.forEach((l, i) => {
    if (!validTenant(l)) {
      fail(`${where}[${i}] ${JSON.stringify(l)} must match [a-z0-9_-]{1,64}`);
    }
  });
  return out;
}

function argumentName(v: unknown, where: string): string {
  if (typeof v !== "string" || v.trim() === "" || Buffer.byteLength(v, "utf8") > 128) {
    fail(`${where} ${JSON.stringify(v)} must be a non-blank name of at most 128 bytes`);
  }
  return v;
}

function blast(v: unknown, where: string): BlastRadius {
  if (typeof v !== "string" || !blasts.has(v)) {
    fail(`${where} ${JSON.stringify(v)}: want single_device, cluster or tenant_wide`);
  }
  return v as BlastRadius;
}

/** What YAML gave, held to what JSON can carry: string keys, no dates or binary. */
function jsonOnly(v: unknown, where: string): unknown {
  if (v === null || typeof v === "string" || typeof v === "boolean") {
    return v;
  }
  if (typeof v === "number") {
    if (!Number.isFinite(v)) {
      fail(`${where} holds ${v}, which JSON cannot`);
    }
    return v;
  }
  if (Array.isArray(v)) {
    return v.map((e, i) => jsonOnly(e, `${where}[${i}]`));
  }
  if (isPlainObject(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, e] of Object.entries(v)) {
      out[k] = jsonOnly(e, `${where}.${k}`);
    }
    return out;
  }
  if (v instanceof Map) {
    const out: Record<string, unknown> = {};
    for (const [k, e] of v) {
      if (typeof k !== "string") {
        fail(`${where} is not a JSON object: a mapping with keys that are not strings`);
      }
      out[k] = jsonOnly(e, `${where}.${k}`);
    }
    return out;
  }
  fail(`${where} holds a value JSON cannot carry`);
}

/**
 * Maps a tool name onto the action token rules as gated mcp does: every
 * UTF-8 byte outside [A-Za-z0-9_-] becomes "_", and a name over 128 bytes
 * keeps its first 119, then "-" and 8 hex digits of its SHA-256.
 */
export function actionName(tool: string): string {
  const bytes = Buffer.from(tool, "utf8");
  let out = "";
  for (const c of bytes) {
    const ok = (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x5f || c === 0x2d;
    out += ok ? String.fromCharCode(c) : "_";
  }
  if (out === "") {
    return "_";
  }
  if (out.length > 128) {
    out = out.slice(0, 119) + "-" + createHash("sha256").update(bytes).digest("hex").slice(0, 8);
  }
  return out;
}

/** The mapping of a tool under catalog c (undefined: no overrides). A tool the catalog does not name is a write. */
export function mappingOf(tool: string, c?: Catalog): ToolMapping {
  const r = c?.tools && Object.hasOwn(c.tools, tool) ? c.tools[tool] : undefined;
  return {
    tool,
    action: r?.action ?? actionName(tool),
    class: r?.class ?? "write",
    classFrom: r?.class ? "catalog" : "default",
    blastRadius: r?.blast_radius ?? c?.blast_radius ?? "single_device",
    target: r?.target,
    targetFixed: r?.target_fixed,
    reasonArgument: r?.reason_argument ?? c?.reason_argument ?? defaultReasonArgument,
    reviewer: r?.reviewer,
    labels: r?.labels ? [...r.labels] : [],
  };
}

/** A call's arguments that cannot be read through the tool's mapping; nothing was proposed. */
export class ArgumentsError extends GatedError {
  override readonly code: string = "bad_arguments";
}

/**
 * Reads a call's arguments (a JSON object, or nothing) through mapping m:
 * the reason argument, a string, is taken out; the target is what the
 * mapping's pointers name, or the whole arguments, with its fixed members.
 * Throws ArgumentsError for arguments that are not an object, a reason that
 * is not a string, or a pointer that names nothing.
 */
export function readCall(m: ToolMapping, args: unknown): MappedCall {
  if (args === undefined || args === null) {
    args = {};
  }
  if (!isPlainObject(args)) {
    throw new ArgumentsError(`bad arguments: the arguments of ${m.tool} are not a JSON object`);
  }
  const rest: Record<string, unknown> = { ...args };
  let reason = "";
  if (Object.hasOwn(rest, m.reasonArgument)) {
    const r = rest[m.reasonArgument];
    if (typeof r !== "string") {
      throw new ArgumentsError(`bad arguments: argument ${m.reasonArgument} of ${m.tool} must be a string, the reason for the call`);
    }
    reason = r;
    delete rest[m.reasonArgument];
  }
  let target: Record<string, unknown>;
  if (m.target === undefined) {
    target = m.targetFixed ? { ...rest } : rest;
  } else {
    target = {};
    for (const member of Object.keys(m.target).sort(compareBytes)) {
      const ptr = m.target[member]!;
      const found = resolvePointer(rest, ptr);
      if (!found.ok) {
        throw new ArgumentsError(`bad arguments: target member ${member} of ${m.tool} (${ptr}): no such argument`);
      }
      target[member] = found.value;
    }
  }
  for (const [k, v] of Object.entries(m.targetFixed ?? {})) {
    target[k] = v;
  }
  return { target, reason, arguments: rest };
}

/** Orders strings by their UTF-8 bytes, as Go sorts them. */
function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/** Splits a JSON Pointer (RFC 6901) into its unescaped tokens; "" is the whole document. */
export function parsePointer(p: string): string[] {
  if (p === "") {
    return [];
  }
  if (!p.startsWith("/")) {
    throw new Error(`JSON Pointer ${JSON.stringify(p)} must be empty or begin with /`);
  }
  return p
    .slice(1)
    .split("/")
    .map((s) => {
      if (/~(?![01])/.test(s)) {
        throw new Error(`JSON Pointer ${JSON.stringify(p)}: ~ must be followed by 0 or 1`);
      }
      return s.replaceAll("~1", "/").replaceAll("~0", "~");
    });
}

function resolvePointer(args: Record<string, unknown>, p: string): { ok: true; value: unknown } | { ok: false } {
  let cur: unknown = args;
  for (const tok of parsePointer(p)) {
    if (Array.isArray(cur)) {
      if (!/^(0|[1-9][0-9]*)$/.test(tok) || Number(tok) >= cur.length) {
        return { ok: false };
      }
      cur = cur[Number(tok)];
    } else if (isPlainObject(cur)) {
      if (!Object.hasOwn(cur, tok)) {
        return { ok: false };
      }
      cur = cur[tok];
    } else {
      return { ok: false };
    }
  }
  return { ok: true, value: cur };
}
