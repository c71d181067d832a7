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
  GrantUseError,
  NotApprovedError,
  canonicalJSON,
  canonicalJSONText,
  decodeGrant,
  decodeGrantKeySet,
  decodeGrantUseReply,
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
      if (Object.hasOwn(c, "target")) {
        assert.equal(canonicalJSON(c.target), c.canonical, "the parsed target");
      }
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

test("what RFC 8785 cannot hold is a CanonicalJSONError", async (t) => {
  const texts = [
    { note: "a number beyond a double", text: '{"n": 1e999}' },
    { note: "a member named twice", text: '{"a": 1, "a": 2}' },
    { note: "a member named twice, nested", text: '{"x": {"a": 1, "a": 1}}' },
    { note: "not JSON", text: "{device_id: 7}" },
    { note: "two values", text: "{} {}" },
  ];
  for (const c of texts) {
    await t.test(c.note, () => assert.throws(() => canonicalJSONText(c.text), CanonicalJSONError));
  }
  const cyclic = {};
  cyclic.self = cyclic;
  const values = [
    { note: "NaN", v: { n: NaN } },
    { note: "a bigint", v: { n: 7n } },
    { note: "a Date", v: { at: new Date(0) } },
    { note: "undefined in an array", v: [1, undefined] },
    { note: "a cycle", v: cyclic },
  ];
  for (const c of values) {
    await t.test(c.note, () => assert.throws(() => canonicalJSON(c.v), CanonicalJSONError));
  }
  // A lone surrogate reads as U+FFFD, as gated reads it; an undefined member is left out.
  assert.equal(canonicalJSON({ s: "a\ud800b", u: undefined }), '{"s":"a\ufffdb"}');
  assert.equal(targetDigest(undefined), sha256("{}"));
  assert.equal(targetDigest(null), sha256("{}"));
});

test("a key set that is not gated's is refused", async (t) => {
  const good = doc.keysets[Object.keys(doc.keysets)[0]].keys[0];
  const cases = [
    { note: "not JSON", set: "keys" },
    { note: "no keys", set: "{}" },
    { note: "another key type", set: { keys: [{ ...good, kty: "EC" }] } },
    { note: "a kid that is not its key's", set: { keys: [{ ...good, kid: "AAAAAAAAAAAAAAAAAAAAAA" }] } },
    { note: "a short x", set: { keys: [{ ...good, x: good.x.slice(0, 42) }] } },
    { note: "an unknown member", set: { keys: [{ ...good, d: good.x }] } },
    { note: "a kid twice", set: { keys: [good, good] } },
    { note: "max_ttl_s zero", set: { keys: [{ ...good, max_ttl_s: 0 }] } },
    { note: "created_at a string", set: { keys: [{ ...good, created_at: "0" }] } },
    { note: "retired before created", set: { keys: [{ ...good, retired_at: good.created_at - 1 }] } },
  ];
  for (const c of cases) {
    await t.test(c.note, () => {
      assert.throws(() => decodeGrantKeySet(c.set), GrantKeySetError);
      // verifyGrant checks a key set it did not decode before it trusts it.
      const tok = doc.grants.find((g) => g.valid).token;
      assert.throws(() => verifyGrant(tok, typeof c.set === "string" ? c.set : c.set, doc.now, {}), (e) => e instanceof GatedError);
    });
  }
});

test("a refusal names its member in GrantError.member", () => {
  const c = doc.grants.find((g) => g.valid && !g.now);
  const keys = decodeGrantKeySet(doc.keysets[c.keyset]);
  const member = (now, expect) => {
    try {
      verifyGrant(c.token, keys, now, expect);
    } catch (err) {
      assert.ok(err instanceof GrantError);
      return err.member;
    }
    return "accepted";
  };
  assert.equal(member(doc.now, c.expect), "accepted");
  assert.equal(member(c.claims.exp, c.expect), "exp");
  assert.equal(member(c.claims.iat - 61, c.expect), "iat");
  assert.equal(member(doc.now, { ...c.expect, tenant: "globex" }), "tenant");
  assert.equal(member(doc.now, { ...c.expect, target_json: "{}" }), "target_sha256");
  assert.equal(member(doc.now, { ...c.expect, target_json: undefined }), "target_sha256", "no target given is a refusal, not {}");
  assert.equal(member(doc.now, { ...c.expect, proposal_sha256: undefined }), "proposal_sha256");
  assert.equal(member(doc.now, { ...c.expect, action: "" }), "action");
});

test("only {ok: true} naming the grant accepts its use", async (t) => {
  const gid = "C2VbrarSPjau75BJujMcpw";
  const cases = [
    { note: "accepted", reply: `{"ok":true,"gid":"${gid}"}` },
    { note: "used already", reply: '{"ok":false,"error":"already used at 2026-11-25T10:00:00Z by agent-1"}', cls: GrantUseError, match: /already used at 2026-11-25T10:00:00Z by agent-1/ },
    { note: "refused without a reason", reply: '{"ok":false}', cls: GrantUseError, match: /no reason given/ },
    { note: "another grant accepted", reply: '{"ok":true,"gid":"AAAAAAAAAAAAAAAAAAAAAA"}', cls: GrantError, match: /use/ },
    { note: "no gid", reply: '{"ok":true}', cls: GrantError, match: /use/ },
    { note: "ok a string", reply: `{"ok":"true","gid":"${gid}"}`, cls: GrantError, match: /use/ },
    { note: "ok named twice", reply: `{"ok":false,"ok":true,"gid":"${gid}"}`, cls: GrantError, match: /twice/ },
    { note: "empty", reply: "", cls: GrantError, match: /not JSON/ },
    { note: "a list", reply: "[true]", cls: GrantError, match: /not an object/ },
    { note: "not UTF-8", reply: new Uint8Array([0x7b, 0xff, 0x7d]), cls: GrantError, match: /not JSON/ },
  ];
  for (const c of cases) {
    await t.test(c.note, () => {
      if (!c.cls) {
        assert.doesNotThrow(() => decodeGrantUseReply(c.reply, gid));
        return;
      }
      assert.throws(() => decodeGrantUseReply(c.reply, gid), (err) => {
        assert.ok(err instanceof c.cls, `${err?.stack ?? err}`);
        assert.match(err.message, c.match);
        return true;
      });
    });
  }
});
