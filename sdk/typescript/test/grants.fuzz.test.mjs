// Fuzz-style tests of the grant decoders: the shared grant vectors mutated
// at random (seeded: replay a failure with FUZZ_SEED) give a GrantError,
// GrantKeySetError or CanonicalJSONError, never another exception, and a
// mutated grant is never accepted.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CanonicalJSONError,
  GrantError,
  GrantKeySetError,
  canonicalJSONText,
  decodeGrant,
  decodeGrantKeySet,
  decodeGrantUseReply,
  verifyGrant,
} from "../dist/index.js";
import { vectors } from "./vectorfiles.mjs";

const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000);
const rounds = Number(process.env.FUZZ_ROUNDS ?? 3000);
const doc = vectors("grants.json");

/** A small seeded PRNG (mulberry32). */
function rng(s) {
  return () => {
    s |= 0;
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pieces = ['"', "\\", "{", "}", "[", "]", ",", ":", "0", "-", "1e999", "1.5", "-0", "null", "true", "\ud800", "\u0000", "é", "🚀",
  '"alg"', '"none"', '"kid"', '"jwk"', '"exp"', '"iat"', '"tenant"', '"acme"', '"globex"', "9007199254740993", ".", "=", "+", "/", "_", "-", " "];

function mutate(r, s) {
  let out = s;
  const n = 1 + Math.floor(r() * 4);
  for (let k = 0; k < n; k++) {
    const at = Math.floor(r() * (out.length + 1));
    switch (Math.floor(r() * 4)) {
      case 0:
        out = out.slice(0, at) + out.slice(at + Math.floor(r() * 8));
        break;
      case 1:
        out = out.slice(0, at) + pieces[Math.floor(r() * pieces.length)] + out.slice(at);
        break;
      case 2:
        out = out.slice(0, at) + String.fromCharCode(Math.floor(r() * 0x3000)) + out.slice(at + 1);
        break;
      default:
        out = out.slice(0, at) + out.slice(at, at + Math.floor(r() * 16)) + out.slice(at);
    }
  }
  return out;
}

function typed(fn, ...classes) {
  try {
    return fn();
  } catch (err) {
    assert.ok(classes.some((c) => err instanceof c), `untyped error: ${err?.stack ?? err}`);
    return undefined;
  }
}

const b64 = (s) => Buffer.from(s).toString("base64url");
const unb64 = (s) => Buffer.from(s, "base64url").toString("utf8");

test(`a mutated grant is refused with a GrantError, never accepted (seed ${seed})`, () => {
  const r = rng(seed);
  let accepted = 0;
  for (let i = 0; i < rounds; i++) {
    const c = doc.grants[Math.floor(r() * doc.grants.length)];
    const keys = decodeGrantKeySet(doc.keysets[c.keyset]);
    let token;
    const [h, p, s] = c.token.split(".");
    switch (Math.floor(r() * 3)) {
      case 0: // the token's text
        token = mutate(r, c.token);
        break;
      case 1: // the header's JSON, re-encoded
        token = [b64(mutate(r, unb64(h ?? ""))), p, s].join(".");
        break;
      default: // the payload's JSON, re-encoded
        token = [h, b64(mutate(r, unb64(p ?? ""))), s].join(".");
    }
    typed(() => decodeGrant(token), GrantError);
    const claims = typed(() => verifyGrant(token, keys, c.now ?? doc.now, c.expect), GrantError);
    if (claims !== undefined) {
      // Only a grant the vectors hold, signed as it is, verifies (an
      // invalid case may wrap one: "four segments" is one and a dot).
      assert.ok(doc.grants.some((v) => v.token.includes(token)), `a mutation verified: ${token}`);
      accepted++;
    }
  }
  assert.ok(accepted < rounds, "every round was accepted");
});

test(`a mutated key set is refused with a GrantKeySetError (seed ${seed})`, () => {
  const r = rng(seed + 1);
  const sets = Object.values(doc.keysets).map((k) => JSON.stringify(k));
  for (let i = 0; i < rounds; i++) {
    const text = mutate(r, sets[Math.floor(r() * sets.length)]);
    const set = typed(() => decodeGrantKeySet(text), GrantKeySetError);
    if (set !== undefined) {
      for (const k of set.keys) {
        assert.equal(Buffer.from(k.x, "base64url").length, 32);
        assert.ok(Number.isSafeInteger(k.created_at) && k.max_ttl_s > 0);
      }
    }
  }
});

test(`canonical JSON of mutated text is a fixed point, or a CanonicalJSONError (seed ${seed})`, () => {
  const r = rng(seed + 2);
  const corpus = doc.jcs.map((c) => c.json);
  for (let i = 0; i < rounds; i++) {
    const text = mutate(r, corpus[Math.floor(r() * corpus.length)]);
    const canon = typed(() => canonicalJSONText(text), CanonicalJSONError);
    if (canon !== undefined) {
      assert.equal(canonicalJSONText(canon), canon, `not canonical: ${JSON.stringify(text)} -> ${JSON.stringify(canon)}`);
      assert.doesNotThrow(() => JSON.parse(canon));
    }
  }
});

test(`a mutated use reply is an acceptance only when it says ok true for the grant (seed ${seed})`, () => {
  const r = rng(seed + 3);
  const gid = "C2VbrarSPjau75BJujMcpw";
  const corpus = [`{"ok":true,"gid":"${gid}"}`, '{"ok":false,"error":"already used at 2026-11-25T10:00:00Z by a"}', '{"ok":false,"error":"expired"}'];
  for (let i = 0; i < rounds; i++) {
    const text = mutate(r, corpus[Math.floor(r() * corpus.length)]);
    let accepted = true;
    try {
      decodeGrantUseReply(text, gid);
    } catch (err) {
      assert.ok(err instanceof GrantError, `untyped error: ${err?.stack ?? err}`);
      accepted = false;
    }
    if (accepted) {
      const v = JSON.parse(text);
      assert.equal(v.ok, true, text);
      assert.equal(v.gid, gid, text);
    }
  }
});
