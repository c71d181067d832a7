import { GatedError } from "../errors.js";
import type { BlastRadius, ProposalClass } from "../types.js";
/** The argument a call's reason is read from when the catalog names no other. */
export declare const defaultReasonArgument = "_reason";
/** The largest catalog decodeCatalog reads, in bytes. */
export declare const maxCatalogSize: number;
/** A catalog that cannot be used: the message names what is wrong. */
export declare class CatalogError extends GatedError {
    readonly code: string;
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
/**
 * Reads a catalog from YAML or JSON text (JSON is read as YAML), refusing
 * unknown fields, duplicate keys, more than one document, a bad class,
 * action, blast radius, target pointer or reviewer, and text over
 * maxCatalogSize bytes. Throws CatalogError naming what is wrong.
 */
export declare function decodeCatalog(data: string | Uint8Array): Catalog;
/**
 * Maps a tool name onto the action token rules as gated mcp does: every
 * UTF-8 byte outside [A-Za-z0-9_-] becomes "_", and a name over 128 bytes
 * keeps its first 119, then "-" and 8 hex digits of its SHA-256.
 */
export declare function actionName(tool: string): string;
/** The mapping of a tool under catalog c (undefined: no overrides). A tool the catalog does not name is a write. */
export declare function mappingOf(tool: string, c?: Catalog): ToolMapping;
/** A call's arguments that cannot be read through the tool's mapping; nothing was proposed. */
export declare class ArgumentsError extends GatedError {
    readonly code: string;
}
/**
 * Reads a call's arguments (a JSON object, or nothing) through mapping m:
 * the reason argument, a string, is taken out; the target is what the
 * mapping's pointers name, or the whole arguments, with its fixed members.
 * Throws ArgumentsError for arguments that are not an object, a reason that
 * is not a string, or a pointer that names nothing.
 */
export declare function readCall(m: ToolMapping, args: unknown): MappedCall;
/** Splits a JSON Pointer (RFC 6901) into its unescaped tokens; "" is the whole document. */
export declare function parsePointer(p: string): string[];
