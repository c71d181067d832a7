// The catalog of the framework integrations, held to gated mcp's reader by
// the shared vectors (test/vectors/catalogs.json, which mcpgate's
// TestCatalogVectors reads too), and fuzzed: mutated catalogs (seeded,
// FUZZ_SEED replays a run) give a CatalogError or a catalog whose every
// mapping is usable, never another error.
import assert from "node:assert/strict";
import { test } from "node:test";

import { validAction } from "../dist/index.js";
import { CatalogError, decodeCatalog, mappingOf, parsePointer, readCall, ArgumentsError } from "../dist/integrations/index.js";
import { vectors } from "./vectorfiles.mjs";

const doc = vectors("catalogs.json");

test("every catalog of the vectors is read as gated mcp reads it", () => {
  assert.ok(doc.catalogs.length > 0);
  for (const v of doc.catalogs) {
    if (v.error) {
      assert.throws(
        () => decodeCatalog(v.data),
        (err) => err instanceof CatalogError && err.message.includes(v.error),
        `${v.note}: want a CatalogError containing ${v.error}`,
      );
      continue;
    }
    const c = decodeCatalog(v.data);
    for (const want of v.mappings) {
      const m = mappingOf(want.tool, c);
      assert.deepEqual(
        [m.action, m.class, m.blastRadius, m.reasonArgument, m.reviewer ?? ""],
        [want.action, want.class, want.blast_radius, want.reason_argument, want.reviewer ?? ""],
        `${v.note}: tool ${want.tool}`,
      );
      assert.deepEqual(m.labels, want.labels ?? [], `${v.note}: labels of ${want.tool}`);
      for (const call of want.calls) {
        if (call.error) {
          assert.throws(
            () => readCall(m, call.arguments),
            (err) => err instanceof ArgumentsError && err.message.includes(call.error),
            `${v.note}: ${JSON.stringify(call.arguments)}`,
          );
          continue;
        }
        const got = readCall(m, call.arguments);
        assert.deepEqual(
          { target: got.target, reason: got.reason, forward: got.arguments },
          { target: call.target, reason: call.reason, forward: call.forward },
          `${v.note}: ${JSON.stringify(call.arguments)}`,
        );
      }
    }
  }
});

test("a catalog over 1 MiB is refused", () => {
  assert.throws(() => decodeCatalog("#".repeat((1 << 20) + 1)), /more than/);
});

const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000);
const rounds = Number(process.env.FUZZ_ROUNDS ?? 3000);

function rng(s) {
  return () => {
    s |= 0;
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pieces = [":", " ", "\n", "  ", "{", "}", "[", "]", ",", "-", "~", "/", "'", '"', "&a", "*a", "!!map", "class: read", "action: x.y",
  "target: {h: /h}", "target_fixed: {h: 1}", "tools:", "---", "1", "null", "é", "\u0000", "\t"];

test(`fuzz: a mutated catalog is a CatalogError or usable (FUZZ_SEED=${seed})`, () => {
  const r = rng(seed);
  const seeds = doc.catalogs.map((v) => v.data);
  for (let i = 0; i < rounds; i++) {
    let s = seeds[Math.floor(r() * seeds.length)];
    for (let k = 1 + Math.floor(r() * 4); k > 0; k--) {
      const at = Math.floor(r() * (s.length + 1));
      s = r() < 0.5 ? s.slice(0, at) + s.slice(at + Math.floor(r() * 6)) : s.slice(0, at) + pieces[Math.floor(r() * pieces.length)] + s.slice(at);
    }
    let c;
    try {
      c = decodeCatalog(s);
    } catch (err) {
      assert.ok(err instanceof CatalogError, `FUZZ_SEED=${seed} round ${i}: ${JSON.stringify(s)} threw ${err}`);
      continue;
    }
    for (const [name, rule] of Object.entries(c.tools ?? {})) {
      const m = mappingOf(name, c);
      assert.ok(validAction(m.action), `FUZZ_SEED=${seed} round ${i}: ${JSON.stringify(s)} maps ${name} to ${m.action}`);
      assert.ok(["read", "write", "destructive"].includes(m.class), `FUZZ_SEED=${seed} round ${i}: class ${m.class}`);
      for (const p of Object.values(rule.target ?? {})) {
        parsePointer(p);
      }
    }
  }
});
