// JSON as gated's Go code writes and reads it.
//
// Encoding: a proposal must have the same bytes, and so the same SHA-256,
// whichever language sends it, so values are written as Go's encoding/json
// writes them: map keys sorted by their UTF-8 bytes, no insignificant white
// space, <, >, &, U+2028 and U+2029 escaped, numbers as Go prints a float64.
//
// Decoding: a verdict is read as Go's encoding/json reads it into gated's
// Verdict struct, so that a message the Go client skips as "not a verdict"
// is skipped here too. parseJSON keeps each number's text (Go refuses 1.5
// or 1e3 for an integer field), and decodeStruct checks every known member
// against its Go type.
/** A JSON number with the text it was written as. */
export class JSONNumber {
    text;
    constructor(
    /** The number's literal text, e.g. "1e3". */
    text) {
        this.text = text;
    }
    /** The number's value as a float64. */
    get value() {
        return Number(this.text);
    }
}
const hex = "0123456789abcdef";
/** Writes s as Go's encoding/json writes a string (HTML escaping on). */
export function goString(s) {
    let out = '"';
    let start = 0;
    for (let i = 0; i < s.length; i++) {
        const c = s.charCodeAt(i);
        let esc;
        if (c < 0x20) {
            switch (c) {
                case 0x08:
                    esc = "\\b";
                    break;
                case 0x0c:
                    esc = "\\f";
                    break;
                case 0x0a:
                    esc = "\\n";
                    break;
                case 0x0d:
                    esc = "\\r";
                    break;
                case 0x09:
                    esc = "\\t";
                    break;
                default:
                    esc = "\\u00" + hex[c >> 4] + hex[c & 0xf];
            }
        }
        else if (c === 0x22) {
            esc = '\\"';
        }
        else if (c === 0x5c) {
            esc = "\\\\";
        }
        else if (c === 0x3c) {
            esc = "\\u003c";
        }
        else if (c === 0x3e) {
            esc = "\\u003e";
        }
        else if (c === 0x26) {
            esc = "\\u0026";
        }
        else if (c === 0x2028) {
            esc = "\\u2028";
        }
        else if (c === 0x2029) {
            esc = "\\u2029";
        }
        else if (c >= 0xd800 && c <= 0xdbff) {
            const d = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
            if (d >= 0xdc00 && d <= 0xdfff) {
                i++; // a valid pair: written as it is
                continue;
            }
            esc = "\ufffd"; // a lone surrogate is not UTF-8: Go reads it as U+FFFD
        }
        else if (c >= 0xdc00 && c <= 0xdfff) {
            esc = "\ufffd";
        }
        if (esc !== undefined) {
            out += s.slice(start, i) + esc;
            start = i + 1;
        }
    }
    return out + s.slice(start) + '"';
}
/** Writes n as Go's encoding/json writes a float64. */
export function goNumber(n, path) {
    if (!Number.isFinite(n)) {
        throw new JSONValueError(path, `${n} is not a JSON number`);
    }
    if (Object.is(n, -0)) {
        return "-0";
    }
    // ECMAScript's Number::toString is the format Go copies: shortest
    // round-trip digits, exponent form below 1e-6 and from 1e21 on.
    return String(n);
}
/** Compares two strings by their UTF-8 bytes (code point order), as Go sorts map keys. */
export function compareUTF8(a, b) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) {
        const x = a.charCodeAt(i);
        const y = b.charCodeAt(i);
        if (x === y) {
            continue;
        }
        // Surrogates (0xD800-0xDFFF) stand for code points above 0xFFFF, which
        // sort after every BMP character, 0xE000-0xFFFF included.
        const sx = x >= 0xd800 && x <= 0xdfff ? x + 0x10000 : x;
        const sy = y >= 0xd800 && y <= 0xdfff ? y + 0x10000 : y;
        return sx - sy;
    }
    return a.length - b.length;
}
/** A value goValue cannot write as JSON, and where it is. */
export class JSONValueError extends TypeError {
    path;
    name = "JSONValueError";
    constructor(
    /** Where the value is, e.g. "arguments.opts[2]". */
    path, what) {
        super(`${path}: ${what}`);
        this.path = path;
    }
}
/** Reports whether v is a plain object: its prototype is Object.prototype or null. */
export function isPlainObject(v) {
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
        return false;
    }
    const proto = Object.getPrototypeOf(v);
    return proto === Object.prototype || proto === null;
}
/**
 * Writes a JSON value (null, boolean, number, string, array, plain object)
 * as Go's encoding/json writes the same value held in an `any`. Anything
 * else (undefined in an array or a hole, a bigint, a symbol, a function, a
 * Date, a class instance, NaN or an infinity, a value that contains itself)
 * is a TypeError naming its path. Each member is read once.
 */
export function goValue(v, path, within) {
    if (v === null) {
        return "null";
    }
    switch (typeof v) {
        case "boolean":
            return v ? "true" : "false";
        case "number":
            return goNumber(v, path);
        case "string":
            return goString(v);
    }
    if (Array.isArray(v)) {
        const seen = enter(v, path, within);
        const items = [];
        for (let i = 0; i < v.length; i++) {
            items.push(goValue(v[i], `${path}[${i}]`, seen)); // a hole is undefined
        }
        seen.delete(v);
        return "[" + items.join(",") + "]";
    }
    if (isPlainObject(v)) {
        return goMap(v, path, within);
    }
    throw new JSONValueError(path, `a ${describe(v)} is not a JSON value`);
}
/** Marks o as being written, refusing a value that contains itself. */
function enter(o, path, within) {
    const seen = within ?? new Set();
    if (seen.has(o)) {
        throw new JSONValueError(path, "the value contains itself (a cycle), which JSON cannot write");
    }
    seen.add(o);
    return seen;
}
/** Writes a plain object as Go writes a map[string]any: keys sorted, undefined members left out. */
export function goMap(m, path, within) {
    const seen = enter(m, path, within);
    const members = [];
    for (const k of Object.keys(m)) {
        const e = m[k]; // read once: a getter is not asked twice
        if (e === undefined) {
            continue;
        }
        // The key Go would hold: a lone surrogate becomes U+FFFD.
        const key = JSON.parse(goString(k));
        members.push([key, goValue(e, `${path}.${k}`, seen)]);
    }
    seen.delete(m);
    members.sort((a, b) => compareUTF8(a[0], b[0]));
    for (let i = 1; i < members.length; i++) {
        if (members[i - 1][0] === members[i][0]) {
            throw new JSONValueError(path, `two keys read as ${goString(members[i][0])} in Go`);
        }
    }
    return "{" + members.map(([k, e]) => goString(k) + ":" + e).join(",") + "}";
}
/** Names the type of a value in an error message. */
export function describe(v) {
    if (v === null) {
        return "null";
    }
    if (Array.isArray(v)) {
        return "array";
    }
    if (typeof v === "object") {
        const name = Object.getPrototypeOf(v)?.constructor?.name;
        return name && name !== "Object" ? name : "object";
    }
    return typeof v;
}
/** Thrown by parseJSON for text that is not one JSON value. */
export class JSONSyntaxError extends Error {
    name = "JSONSyntaxError";
}
const maxDepth = 10000; // Go's encoding/json nesting limit
/**
 * Parses one JSON value the way Go's encoding/json scanner accepts it:
 * RFC 8259, surrounding white space allowed, numbers kept as JSONNumber,
 * lone surrogate escapes read as U+FFFD. Throws JSONSyntaxError. When
 * duplicates is given, the names of the top object's members that appear
 * more than once are pushed on it (the last value is kept). When
 * unique is true, a member name that appears twice in any object is a
 * JSONSyntaxError (I-JSON, RFC 7493).
 */
export function parseJSON(text, duplicates, unique = false) {
    let i = 0;
    const fail = (what) => {
        throw new JSONSyntaxError(`${what} at offset ${i}`);
    };
    const ws = () => {
        for (;;) {
            const c = text.charCodeAt(i);
            if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) {
                i++;
            }
            else {
                return;
            }
        }
    };
    const str = () => {
        i++; // opening quote
        let out = "";
        let start = i;
        for (;;) {
            if (i >= text.length) {
                fail("unterminated string");
            }
            const c = text.charCodeAt(i);
            if (c === 0x22) {
                out += text.slice(start, i);
                i++;
                return out;
            }
            if (c < 0x20) {
                fail("control character in string");
            }
            if (c !== 0x5c) {
                i++;
                continue;
            }
            out += text.slice(start, i);
            const e = text[i + 1];
            i += 2;
            switch (e) {
                case '"':
                    out += '"';
                    break;
                case "\\":
                    out += "\\";
                    break;
                case "/":
                    out += "/";
                    break;
                case "b":
                    out += "\b";
                    break;
                case "f":
                    out += "\f";
                    break;
                case "n":
                    out += "\n";
                    break;
                case "r":
                    out += "\r";
                    break;
                case "t":
                    out += "\t";
                    break;
                case "u": {
                    const u = hex4(i);
                    i += 4;
                    if (u >= 0xd800 && u <= 0xdbff && text[i] === "\\" && text[i + 1] === "u") {
                        const l = hex4(i + 2);
                        if (l >= 0xdc00 && l <= 0xdfff) {
                            out += String.fromCharCode(u, l);
                            i += 6;
                            break;
                        }
                    }
                    out += u >= 0xd800 && u <= 0xdfff ? "\ufffd" : String.fromCharCode(u);
                    break;
                }
                default:
                    i -= 2;
                    fail("invalid escape in string");
            }
            start = i;
        }
    };
    const hex4 = (at) => {
        const h = text.slice(at, at + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(h)) {
            i = at;
            fail("invalid \\u escape");
        }
        return parseInt(h, 16);
    };
    const num = () => {
        const m = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 4096));
        if (!m || m[0] === "" || m[0] === "-") {
            fail("invalid number");
        }
        const t = m[0];
        i += t.length;
        return new JSONNumber(t);
    };
    const value = (depth) => {
        if (depth > maxDepth) {
            fail("nesting too deep");
        }
        ws();
        const c = text[i];
        switch (c) {
            case "{": {
                i++;
                const o = Object.create(null);
                ws();
                if (text[i] === "}") {
                    i++;
                    return o;
                }
                for (;;) {
                    ws();
                    if (text[i] !== '"') {
                        fail("expected a member name");
                    }
                    const k = str();
                    ws();
                    if (text[i] !== ":") {
                        fail("expected ':'");
                    }
                    i++;
                    if (unique && Object.hasOwn(o, k)) {
                        fail(`member ${JSON.stringify(k)} appears twice`);
                    }
                    if (duplicates && depth === 0 && Object.hasOwn(o, k)) {
                        duplicates.push(k);
                    }
                    o[k] = value(depth + 1);
                    ws();
                    if (text[i] === ",") {
                        i++;
                        continue;
                    }
                    if (text[i] === "}") {
                        i++;
                        return o;
                    }
                    fail("expected ',' or '}'");
                }
            }
            // eslint-disable-next-line no-fallthrough
            case "[": {
                i++;
                const a = [];
                ws();
                if (text[i] === "]") {
                    i++;
                    return a;
                }
                for (;;) {
                    a.push(value(depth + 1));
                    ws();
                    if (text[i] === ",") {
                        i++;
                        continue;
                    }
                    if (text[i] === "]") {
                        i++;
                        return a;
                    }
                    fail("expected ',' or ']'");
                }
            }
            // eslint-disable-next-line no-fallthrough
            case '"':
                return str();
            case "t":
                return lit("true", true);
            case "f":
                return lit("false", false);
            case "n":
                return lit("null", null);
            default:
                if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) {
                    return num();
                }
                return fail(c === undefined ? "unexpected end of JSON" : "unexpected character");
        }
    };
    const lit = (word, v) => {
        if (text.startsWith(word, i)) {
            i += word.length;
            return v;
        }
        return fail("invalid literal");
    };
    const v = value(0);
    ws();
    if (i !== text.length) {
        fail("data after the JSON value");
    }
    return v;
}
/** Decodes bytes as Go reads them: invalid UTF-8 becomes U+FFFD. */
export function utf8Text(data) {
    return new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(data);
}
/** Thrown by decodeStruct for a member whose JSON type Go would refuse. */
export class JSONTypeError extends Error {
    name = "JSONTypeError";
}
const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})[T](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
/** Reports whether s is a time Go's time.Time reads from JSON (RFC 3339). */
export function validRFC3339(s) {
    const m = rfc3339.exec(s);
    if (!m) {
        return false;
    }
    const [year, month, day, hour, min, sec] = m.slice(1, 7).map(Number);
    const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
    const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
    if (days === undefined || day < 1 || day > days || hour > 23 || min > 59 || sec > 59) {
        return false;
    }
    const zone = m[8];
    if (zone !== "Z" && (Number(zone.slice(1, 3)) > 23 || Number(zone.slice(4, 6)) > 59)) {
        return false;
    }
    return true;
}
const intText = /^-?(?:0|[1-9][0-9]*)$/;
/** Go's case-insensitive member matching (simple folding: K and ſ included). */
function fold(k) {
    return k.replace(/\u212a/g, "k").replace(/\u017f/g, "s").toLowerCase();
}
/**
 * Checks a parsed value against a Go type as encoding/json's Unmarshal
 * would, and returns it as plain JavaScript (numbers as numbers). Members
 * are matched to struct fields as Go does (exact name first, else case
 * insensitive); unknown members are dropped; null leaves a member unset.
 * Throws JSONTypeError naming the member.
 */
export function decodeAs(v, t, path) {
    if (v === null) {
        return undefined;
    }
    const bad = () => {
        throw new JSONTypeError(`${path || "value"}: cannot read JSON ${jsonKind(v)} as Go ${typeName(t)}`);
    };
    if (typeof t === "string") {
        switch (t) {
            case "any":
                return plain(v);
            case "string":
                return typeof v === "string" ? v : bad();
            case "time":
                if (typeof v !== "string" || !validRFC3339(v)) {
                    throw new JSONTypeError(`${path}: ${typeof v === "string" ? JSON.stringify(v) : jsonKind(v)} is not an RFC 3339 time`);
                }
                return v;
            case "bool":
                return typeof v === "boolean" ? v : bad();
            case "float":
                return v instanceof JSONNumber && Number.isFinite(v.value) ? v.value : bad();
            case "int":
            case "uint":
                if (!(v instanceof JSONNumber) || !intText.test(v.text)) {
                    return bad();
                }
                {
                    const n = BigInt(v.text);
                    const [lo, hi] = t === "int" ? [-(2n ** 63n), 2n ** 63n - 1n] : [0n, 2n ** 64n - 1n];
                    if (n < lo || n > hi) {
                        return bad();
                    }
                }
                return v.value;
        }
    }
    if ("ptr" in t) {
        return decodeAs(v, t.ptr, path);
    }
    if ("slice" in t) {
        return Array.isArray(v) ? v.map((e, i) => decodeAs(e, t.slice, `${path}[${i}]`) ?? null) : bad();
    }
    if (typeof v !== "object" || Array.isArray(v) || v instanceof JSONNumber) {
        return bad();
    }
    const out = {};
    if ("map" in t) {
        for (const [k, e] of Object.entries(v)) {
            out[k] = decodeAs(e, t.map, `${path}.${k}`) ?? null;
        }
        return out;
    }
    const fields = t.struct;
    const folded = new Map(Object.keys(fields).map((f) => [fold(f), f]));
    for (const [k, e] of Object.entries(v)) {
        const f = Object.hasOwn(fields, k) ? k : folded.get(fold(k));
        if (f === undefined) {
            continue;
        }
        const d = decodeAs(e, fields[f], path ? `${path}.${f}` : f);
        if (d !== undefined) {
            out[f] = d;
        }
    }
    return out;
}
function plain(v) {
    if (v instanceof JSONNumber) {
        return v.value;
    }
    if (Array.isArray(v)) {
        return v.map(plain);
    }
    if (v !== null && typeof v === "object") {
        const o = {};
        for (const [k, e] of Object.entries(v)) {
            o[k] = plain(e);
        }
        return o;
    }
    return v;
}
function jsonKind(v) {
    if (v instanceof JSONNumber) {
        return `number ${v.text}`;
    }
    if (Array.isArray(v)) {
        return "array";
    }
    return v === null ? "null" : typeof v;
}
function typeName(t) {
    if (typeof t === "string") {
        return t;
    }
    if ("ptr" in t) {
        return typeName(t.ptr);
    }
    if ("slice" in t) {
        return "[]" + typeName(t.slice);
    }
    return "map" in t ? "map[string]" + typeName(t.map) : "struct";
}
