// Case folding as Go has it: the shared vectors' folding.json, generated
// from Go's unicode.SimpleFold, strings.EqualFold and gated's own check,
// hold this client's table to Go's over every code point, and the
// encoder refuses what gated would refuse.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BadProposalError,
  FoldedKeysError,
  encodeProposal,
  equalFold,
  findFoldedKeys,
  foldKey,
  foldUnicodeVersion,
  simpleFold,
} from "../dist/index.js";
import { vectors } from "./vectorfiles.mjs";

const doc = vectors("folding.json");

test("simpleFold is Go's unicode.SimpleFold at every code point", () => {
  assert.equal(foldUnicodeVersion, doc.unicode, "the table was made from another Unicode version: node scripts/fold-table.mjs");
  const want = new Map();
  for (const o of doc.orbits) {
    o.forEach((c, i) => want.set(c, o[(i + 1) % o.length]));
  }
  assert.ok(want.size > 2800, `only ${want.size} code points fold`);
  let wrong = 0;
  for (let c = 0; c <= 0x10ffff; c++) {
    const w = want.get(c) ?? c;
    const got = simpleFold(c);
    if (got !== w && wrong++ < 10) {
      assert.fail(`simpleFold(U+${c.toString(16).toUpperCase()}) = U+${got.toString(16).toUpperCase()}, Go says U+${w.toString(16).toUpperCase()}`);
    }
  }
  assert.equal(simpleFold(-1), -1);
  assert.equal(simpleFold(0x110000), 0x110000);
});

test("foldKey maps every code point to the least of its orbit", () => {
  for (const o of doc.orbits) {
    const least = String.fromCodePoint(o[0]);
    for (const c of o) {
      assert.equal(foldKey(String.fromCodePoint(c)), least);
    }
  }
  // A lone surrogate is U+FFFD once encoded, as Go reads it.
  assert.equal(foldKey("a\ud800"), "A\ufffd");
});

test("equalFold is Go's strings.EqualFold", async (t) => {
  assert.ok(doc.equal_fold.some((c) => c.equal) && doc.equal_fold.some((c) => !c.equal));
  for (const c of doc.equal_fold) {
    await t.test(`${c.a} ${c.b}`, () => {
      assert.equal(equalFold(c.a, c.b), c.equal);
      assert.equal(equalFold(c.b, c.a), c.equal);
    });
  }
});

test("findFoldedKeys names what gated's check names", async (t) => {
  for (const c of doc.checks) {
    await t.test(c.json, () => {
      assert.deepEqual(findFoldedKeys(JSON.parse(c.json)), c.found && { pointer: c.found.path, key: c.found.key, other: c.found.other });
    });
  }
});

test("the encoder refuses arguments gated would refuse, naming the member and both keys", async (t) => {
  const base = { id: "p-1", tenant: "acme", action: "host_restart_service", class: "write", blast_radius: "single_device" };
  for (const c of doc.checks) {
    await t.test(c.json, () => {
      const p = { ...base, arguments: JSON.parse(c.json) };
      if (c.found === null) {
        assert.doesNotThrow(() => encodeProposal(p));
        return;
      }
      const err = (() => {
        try {
          encodeProposal(p);
        } catch (e) {
          return e;
        }
        assert.fail("encoded");
      })();
      assert.ok(err instanceof FoldedKeysError && err instanceof BadProposalError, `${err}`);
      assert.equal(err.code, "folded_keys");
      // gated's member: arguments, then the pointer with / read as .
      assert.equal(err.path, "arguments" + c.found.path.replaceAll("/", "."));
      assert.equal(err.pointer, c.found.path);
      assert.equal(err.key, c.found.key);
      assert.equal(err.other, c.found.other);
      assert.ok(err.message.includes(JSON.stringify(c.found.key)) && err.message.includes(JSON.stringify(c.found.other)), err.message);
    });
  }
  // The target is not the arguments: gated does not check it, nor does the client.
  assert.doesNotThrow(() => encodeProposal({ ...base, target: { host: "a", HOST: "b" } }));
});
