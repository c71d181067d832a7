/** A JSON number with the text it was written as. */
export declare class JSONNumber {
    /** The number's literal text, e.g. "1e3". */
    readonly text: string;
    constructor(
    /** The number's literal text, e.g. "1e3". */
    text: string);
    /** The number's value as a float64. */
    get value(): number;
}
/** A value parseJSON returns. */
export type JSONValue = null | boolean | string | JSONNumber | JSONValue[] | {
    [key: string]: JSONValue;
};
/** Writes s as Go's encoding/json writes a string (HTML escaping on). */
export declare function goString(s: string): string;
/** Writes n as Go's encoding/json writes a float64. */
export declare function goNumber(n: number, path: string): string;
/** Compares two strings by their UTF-8 bytes (code point order), as Go sorts map keys. */
export declare function compareUTF8(a: string, b: string): number;
/** A value goValue cannot write as JSON, and where it is. */
export declare class JSONValueError extends TypeError {
    /** Where the value is, e.g. "arguments.opts[2]". */
    readonly path: string;
    name: string;
    constructor(
    /** Where the value is, e.g. "arguments.opts[2]". */
    path: string, what: string);
}
/** Reports whether v is a plain object: its prototype is Object.prototype or null. */
export declare function isPlainObject(v: unknown): v is Record<string, unknown>;
/**
 * Writes a JSON value (null, boolean, number, string, array, plain object)
 * as Go's encoding/json writes the same value held in an `any`. Anything
 * else (undefined in an array or a hole, a bigint, a symbol, a function, a
 * Date, a class instance, NaN or an infinity, a value that contains itself)
 * is a TypeError naming its path. Each member is read once.
 */
export declare function goValue(v: unknown, path: string, within?: Set<object>): string;
/** Writes a plain object as Go writes a map[string]any: keys sorted, undefined members left out. */
export declare function goMap(m: Record<string, unknown>, path: string, within?: Set<object>): string;
/** Names the type of a value in an error message. */
export declare function describe(v: unknown): string;
/** Thrown by parseJSON for text that is not one JSON value. */
export declare class JSONSyntaxError extends Error {
    name: string;
}
/**
 * Parses one JSON value the way Go's encoding/json scanner accepts it:
 * RFC 8259, surrounding white space allowed, numbers kept as JSONNumber,
 * lone surrogate escapes read as U+FFFD. Throws JSONSyntaxError. When
 * duplicates is given, the names of the top object's members that appear
 * more than once are pushed on it (the last value is kept). When
 * unique is true, a member name that appears twice in any object is a
 * JSONSyntaxError (I-JSON, RFC 7493).
 */
export declare function parseJSON(text: string, duplicates?: string[], unique?: boolean): JSONValue;
/** Decodes bytes as Go reads them: invalid UTF-8 becomes U+FFFD. */
export declare function utf8Text(data: Uint8Array): string;
/** The Go type of a struct member: how decodeStruct checks it. */
export type GoType = "string" | "bool" | "int" | "uint" | "float" | "time" | "any" | {
    struct: Record<string, GoType>;
} | {
    slice: GoType;
} | {
    map: GoType;
} | {
    ptr: GoType;
};
/** Thrown by decodeStruct for a member whose JSON type Go would refuse. */
export declare class JSONTypeError extends Error {
    name: string;
}
/** Reports whether s is a time Go's time.Time reads from JSON (RFC 3339). */
export declare function validRFC3339(s: string): boolean;
/**
 * Checks a parsed value against a Go type as encoding/json's Unmarshal
 * would, and returns it as plain JavaScript (numbers as numbers). Members
 * are matched to struct fields as Go does (exact name first, else case
 * insensitive); unknown members are dropped; null leaves a member unset.
 * Throws JSONTypeError naming the member.
 */
export declare function decodeAs(v: JSONValue, t: GoType, path: string): unknown;
