/** The version of Unicode whose simple case folding, as Go's unicode package has it, this table holds. */
export declare const foldUnicodeVersion = "15.0.0";
/**
 * The orbits of two code points, as runs of four numbers: first, count,
 * stride, delta. Run i holds the orbits {c, c + delta} for c = first,
 * first + stride, ... (count of them).
 */
export declare const pairRuns: readonly number[];
/** The orbits of three or four code points, each from its least in the order Go's unicode.SimpleFold visits them. */
export declare const longOrbits: readonly (readonly number[])[];
