// Reads the shared vectors of test/vectors (never a copy).
import { readFileSync } from "node:fs";

/** Parses one file of test/vectors. */
export function vectors(name) {
  return JSON.parse(readFileSync(new URL(`../../../test/vectors/${name}`, import.meta.url), "utf8"));
}
