// Unicode simple case folding exactly as Go has it (unicode.SimpleFold,
// strings.EqualFold): gated refuses a proposal's arguments when two member
// names of one object are equal under it, because a reader that matches
// names without case (Go's encoding/json does) could act on either.
//
// JavaScript has no simple folding: toLowerCase and toUpperCase apply the
// full mappings (ß, ſ, K, İ and the final sigma behave otherwise), and
// follow the engine's Unicode version, not Go's. So the relation comes from
// a table generated from Go's (src/foldtable.ts), which test/folding.test.mjs
// holds to test/vectors/folding.json over every code point.

import { compareUTF8 } from "./json.js";
import { longOrbits, pairRuns } from "./foldtable.js";

let next: Map<number, number> | undefined; // a code point to the next of its orbit
let least: Map<number, number> | undefined; // a code point to the least of its orbit

function tables(): [Map<number, number>, Map<number, number>] {
  if (!next || !least) {
    const n = new Map<number, number>();
    const l = new Map<number, number>();
    const orbit = (o: readonly number[]): void => {
      o.forEach((c, i) => {
        n.set(c, o[(i + 1) % o.length]!);
        l.set(c, o[0]!);
      });
    };
    for (let i = 0; i < pairRuns.length; i += 4) {
      const [first, count, stride, delta] = pairRuns.slice(i, i + 4) as [number, number, number, number];
      for (let k = 0, c = first; k < count; k++, c += stride) {
        orbit([c, c + delta]);
      }
    }
    longOrbits.forEach(orbit);
    next = n;
    least = l;
  }
  return [next, least];
}

/**
 * Go's unicode.SimpleFold: the next code point after c, in increasing
 * order and wrapping around, of c's orbit under Unicode simple case
 * folding; c itself when it folds to nothing else or is not a code point.
 */
export function simpleFold(c: number): number {
  return tables()[0].get(c) ?? c;
}

/**
 * A representative of s's class under simple case folding: each code point
 * becomes the least of its orbit, and a lone surrogate U+FFFD (as Go reads
 * it once encoded). Two strings have the same key exactly when Go's
 * strings.EqualFold holds for them as Go holds them.
 */
export function foldKey(s: string): string {
  const l = tables()[1];
  let out = "";
  for (const ch of s) {
    let c = ch.codePointAt(0)!;
    if (c >= 0xd800 && c <= 0xdfff) {
      c = 0xfffd;
    }
    out += String.fromCodePoint(l.get(c) ?? c);
  }
  return out;
}

/** Go's strings.EqualFold of a and b, as Go holds them (a lone surrogate reads as U+FFFD). */
export function equalFold(a: string, b: string): boolean {
  return foldKey(a) === foldKey(b);
}

/** Two member names of one object that are equal under simple case folding, and where. */
export interface FoldedKeys {
  /** The object's place in the value, a JSON Pointer (RFC 6901); "" for the value itself. */
  pointer: string;
  /** The two names, in the order of their UTF-8 bytes. */
  key: string;
  other: string;
}

/**
 * Finds, as gated does (strictjson.CheckFolded), the first object of v
 * that holds two member names equal under simple case folding: in a walk
 * that looks at an object's names before its members' values, names in
 * the order of their UTF-8 bytes. v is a JSON value as JSON.parse gives
 * it; null when there is none.
 */
export function findFoldedKeys(v: unknown): FoldedKeys | null {
  return walk(v, "");
}

function walk(v: unknown, pointer: string): FoldedKeys | null {
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const found = walk(v[i], `${pointer}/${i}`);
      if (found) {
        return found;
      }
    }
    return null;
  }
  if (typeof v !== "object" || v === null) {
    return null;
  }
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort(compareUTF8);
  const seen = new Map<string, string>();
  for (const k of keys) {
    const f = foldKey(k);
    const other = seen.get(f);
    if (other !== undefined) {
      return { pointer, key: other, other: k };
    }
    seen.set(f, k);
  }
  for (const k of keys) {
    const found = walk(o[k], `${pointer}/${k.replaceAll("~", "~0").replaceAll("/", "~1")}`);
    if (found) {
      return found;
    }
  }
  return null;
}
