/**
 * Go's unicode.SimpleFold: the next code point after c, in increasing
 * order and wrapping around, of c's orbit under Unicode simple case
 * folding; c itself when it folds to nothing else or is not a code point.
 */
export declare function simpleFold(c: number): number;
/**
 * A representative of s's class under simple case folding: each code point
 * becomes the least of its orbit, and a lone surrogate U+FFFD (as Go reads
 * it once encoded). Two strings have the same key exactly when Go's
 * strings.EqualFold holds for them as Go holds them.
 */
export declare function foldKey(s: string): string;
/** Go's strings.EqualFold of a and b, as Go holds them (a lone surrogate reads as U+FFFD). */
export declare function equalFold(a: string, b: string): boolean;
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
export declare function findFoldedKeys(v: unknown): FoldedKeys | null;
