// The shared grant vectors (test/vectors/grants.json) hold this client's
// verifier to every other: each valid grant accepted with its claims, each
// invalid one refused naming its member, each RFC 8785 case canonicalised
// to the same bytes.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";

import {
  CanonicalJSONError,
  GatedError,
  GrantError,
  GrantKeySetError,
  NotApprovedError,
  canonicalJSON,
  canonicalJSONText,
  decodeGrant,
  decodeGrantKeySet,
  encodeOutcome,
  grantKeyID,
  targetDigest,
  verifyGrant,
} from "../dist/index.js";
import { vectors } from "./vectorfiles.mjs";

const doc = vectors("grants.json");
const sha256 = (s) => createHash("sha256").update(s).digest("hex");

test("grant vectors", async (t) => {
  assert.ok(doc.grants.some((c) => c.valid) && doc.grants.some((c) => !c.valid), "the vectors need valid and invalid grants");
  for (const c of doc.grants) {
    await t.test(c.name, () => {
      const keys = decodeGrantKeySet(doc.keysets[c.keyset]);
      const now = c.now ?? doc.now;
      if (c.valid) {
        assert.deepEqual(verifyGrant(c.token, keys, now, c.expect), c.claims);
        return;
      }
      const err = (() => {
        try {
          verifyGrant(c.token, keys, now, c.expect);
        } catch (e) {
          return e;
        }
        assert.fail("accepted");
      })();
      assert.ok(err instanceof GrantError, `not a GrantError: ${err?.stack ?? err}`);
      assert.ok(err instanceof NotApprovedError);
      assert.ok(err.message.includes(c.error_member), `the error does not name ${c.error_member}: ${err.message}`);
    });
  }
});

test("jcs vectors", async (t) => {
  assert.ok(doc.jcs.length > 0, "no jcs vectors");
  for (const c of doc.jcs) {
    await t.test(c.name, () => {
      assert.equal(canonicalJSONText(c.json), c.canonical);
      assert.equal(canonicalJSON(c.target), c.canonical, "the parsed target");
      assert.equal(sha256(c.canonical), c.sha256);
      if (typeof c.target === "object" && c.target !== null && !Array.isArray(c.target)) {
        assert.equal(targetDigest(c.target), c.sha256);
      }
    });
  }
});

test("every key set of the vectors decodes, and each kid is its key's", () => {
  for (const [name, set] of Object.entries(doc.keysets)) {
    const keys = decodeGrantKeySet(JSON.stringify(set)).keys;
    assert.equal(keys.length, set.keys.length, name);
    for (const k of keys) {
      assert.equal(grantKeyID(Buffer.from(k.x, "base64url")), k.kid);
    }
  }
});
