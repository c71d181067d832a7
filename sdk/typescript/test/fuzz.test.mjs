// Fuzz-style tests of every decoder: vector inputs mutated at random
// (seeded, so a failure can be replayed with FUZZ_SEED) must give a typed
// error or a well-formed result, never a crash, never an approval that
// the vectors do not already approve.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AwaitingOperatorError,
  BadProposalError,
  GatedError,
  InvalidConfigError,
  addressOf,
  answer,
  checkVerdict,
  confirmApproval,
  decodeReviewReply,
  decodeStoredVerdict,
  decodeVerdict,
  encodeProposal,
  isFinal,
  proposalDigest,
  StatusError,
  statusUpdate,
  traceHeaders,
  validTraceparent,
  verdictMessage,
} from "../dist/index.js";
import { compareUTF8, goValue, JSONSyntaxError, JSONTypeError, parseJSON, validRFC3339 } from "../dist/json.js";
import { vectors } from "./vectorfiles.mjs";

const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000);
const rounds = Number(process.env.FUZZ_ROUNDS ?? 3000);

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

const pieces = ['"', "\\", "{", "}", "[", "]", ",", ":", "0", "-", "1e999", "1.5", "null", "true", "\u2028", "\ud800",
  "\u0000", "é", "🚀", "<", "&", '"approved"', '"tenant"', '"acme"', '"p-1"', "\\u0000", "\\ud800", " ", "\n"];

function mutate(r, s) {
  let out = s;
  const n = 1 + Math.floor(r() * 4);
  for (let k = 0; k < n; k++) {
    const at = Math.floor(r() * (out.length + 1));
    switch (Math.floor(r() * 4)) {
      case 0: // delete a span
        out = out.slice(0, at) + out.slice(at + Math.floor(r() * 8));
        break;
      case 1: // insert a piece
        out = out.slice(0, at) + pieces[Math.floor(r() * pieces.length)] + out.slice(at);
        break;
      case 2: // replace a character
        out = out.slice(0, at) + String.fromCharCode(Math.floor(r() * 0x3000)) + out.slice(at + 1);
        break;
      default: // duplicate a span
        out = out.slice(0, at) + out.slice(at, at + Math.floor(r() * 16)) + out.slice(at);
    }
  }
  return out;
}

function typed(fn) {
  try {
    return fn();
  } catch (err) {
    assert.ok(err instanceof GatedError, `untyped error: ${err?.stack ?? err}`);
    return undefined;
  }
}

test(`parseJSON accepts what JSON.parse accepts (seed ${seed})`, () => {
  const r = rng(seed);
  const corpus = [...vectors("verdicts.json").cases.flatMap((c) => [c.message, c.stored]), ...vectors("addresses.json").cases.map((c) => c.proposal)].filter(
    (s) => typeof s === "string",
  );
  for (let i = 0; i < rounds; i++) {
    const text = mutate(r, corpus[Math.floor(r() * corpus.length)]);
    let ours;
    let theirs;
    try {
      ours = parseJSON(text);
    } catch (err) {
      assert.ok(err instanceof JSONSyntaxError || err instanceof RangeError, `${err}`);
    }
    try {
      theirs = JSON.parse(text);
    } catch {
      theirs = undefined;
    }
    assert.equal(ours !== undefined, theirs !== undefined || text.trim() === "null", `validity differs for ${JSON.stringify(text)}`);
  }
});

test(`verdict decoders never throw untyped errors nor approve a mutation (seed ${seed})`, async () => {
  const r = rng(seed + 1);
  const doc = vectors("verdicts.json");
  const a = addressOf(doc.proposal);
  const digest = proposalDigest(doc.proposal);
  const approval = doc.cases.find((c) => c.expect.result === "approved" && c.via === "subject").stored;
  for (let i = 0; i < rounds; i++) {
    const c = doc.cases[Math.floor(r() * doc.cases.length)];
    const message = mutate(r, c.message ?? c.stored ?? "{}");
    const bytes = new TextEncoder().encode(message);
    try {
      decodeVerdict(bytes);
    } catch (err) {
      assert.ok(err instanceof JSONSyntaxError || err instanceof JSONTypeError, `${err?.stack ?? err}`);
    }
    const v = verdictMessage(a, bytes);
    if (v !== null) {
      assert.equal(v.tenant, "acme");
      assert.equal(v.proposal_id, "p-1");
      if (!isFinal(v)) {
        // Held: never an approval, always the typed error to wait on.
        assert.equal(v.outcome, "blocked");
        assert.throws(() => checkVerdict(v), AwaitingOperatorError);
      }
      if (v.awaiting_operator?.deadline !== undefined) {
        assert.ok(validRFC3339(v.awaiting_operator.deadline), v.awaiting_operator.deadline);
      }
      // Confirmed against a mutated store, an approval stands only when
      // the stored verdict is itself a well-formed approval of these bytes.
      const stored = mutate(r, approval);
      const got = await confirmApproval(a, digest, v, async () =>
        decodeStoredVerdict("acme", "p-1", { data: new TextEncoder().encode(stored), status: "", header: () => undefined }),
      ).catch((err) => {
        assert.ok(err instanceof GatedError, `${err?.stack ?? err}`);
        return undefined;
      });
      if (got !== undefined && got.approved === true && got.outcome === "approved") {
        const s = decodeVerdict(stored);
        assert.equal(s.proposal_sha256, digest);
        assert.equal(s.approved, true);
        assert.doesNotThrow(() => checkVerdict(answer(a, digest, s)));
      }
    }
    typed(() => decodeReviewReply(() => undefined, bytes));
    typed(() => decodeReviewReply((n) => (n === "Nats-Service-Error-Code" ? message.slice(0, 4) : message), new Uint8Array(0)));
    typed(() => decodeStoredVerdict("acme", "p-1", { data: bytes, status: "", header: () => undefined }));
  }
});

test(`addressOf refuses with BadProposalError or reads valid tokens (seed ${seed})`, () => {
  const r = rng(seed + 2);
  const corpus = [...vectors("addresses.json").cases.map((c) => c.proposal), ...vectors("proposals.json").cases.map((c) => c.wire)];
  for (let i = 0; i < rounds; i++) {
    const text = mutate(r, corpus[Math.floor(r() * corpus.length)]);
    try {
      const got = addressOf(text);
      assert.match(got.tenant, /^[a-z0-9_-]{1,64}$/);
      assert.match(got.id, /^[A-Za-z0-9_-]{1,128}$/);
      assert.match(got.action, /^[A-Za-z0-9_-]{1,128}$/);
    } catch (err) {
      assert.ok(err instanceof BadProposalError, `${err?.stack ?? err}`);
    }
  }
});

test(`encodeProposal writes JSON that reads back as the proposal (seed ${seed})`, () => {
  const r = rng(seed + 3);
  const inputs = vectors("proposals.json").cases.map((c) => c.input);
  const randomString = () => {
    let s = "";
    const n = Math.floor(r() * 12);
    for (let k = 0; k < n; k++) {
      s += r() < 0.3 ? pieces[Math.floor(r() * pieces.length)] : String.fromCodePoint(Math.floor(r() * 0x1ffff) % 0x10ffff);
    }
    return s;
  };
  const randomValue = (depth) => {
    switch (Math.floor(r() * (depth > 2 ? 4 : 6))) {
      case 0:
        return randomString();
      case 1:
        return r() < 0.5 ? Math.floor(r() * 2e6) - 1e6 : (r() - 0.5) * 10 ** Math.floor(r() * 60 - 30);
      case 2:
        return r() < 0.5;
      case 3:
        return null;
      case 4:
        return Array.from({ length: Math.floor(r() * 4) }, () => randomValue(depth + 1));
      default:
        return Object.fromEntries(Array.from({ length: Math.floor(r() * 4) }, () => [randomString(), randomValue(depth + 1)]));
    }
  };
  for (let i = 0; i < rounds; i++) {
    const p = { ...inputs[Math.floor(r() * inputs.length)], target: { [randomString()]: randomValue(0), k: randomValue(0) }, reason: randomString() };
    let enc;
    try {
      enc = encodeProposal(p);
    } catch (err) {
      assert.ok(err instanceof BadProposalError, `${err?.stack ?? err}`);
      continue;
    }
    // The bytes read back as the proposal (lone surrogates as U+FFFD, as
    // Go reads them), with every key in UTF-8 order and no raw <, >, &,
    // U+2028 or U+2029.
    const back = JSON.parse(enc.text);
    assert.equal(back.reason ?? "", p.reason.toWellFormed());
    assert.deepEqual(back.target, wellFormed(p.target));
    assert.doesNotMatch(enc.text, /[<>&\u2028\u2029]/);
    assert.ok(sorted(back.target ?? {}), enc.text);
  }
});

function wellFormed(v) {
  if (typeof v === "string") return v.toWellFormed();
  if (Array.isArray(v)) return v.map(wellFormed);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, e]) => [k.toWellFormed(), wellFormed(e)]));
  return v;
}

function sorted(v) {
  if (Array.isArray(v)) return v.every(sorted);
  if (v && typeof v === "object") {
    const ks = Object.keys(v);
    // JSON.parse keeps insertion order except for integer-like keys.
    const plain = ks.filter((k) => !/^(0|[1-9][0-9]*)$/.test(k));
    return plain.every((k, j) => j === 0 || compareUTF8(plain[j - 1], k) < 0) && Object.values(v).every(sorted);
  }
  return true;
}

test(`statusUpdate reads or refuses with a StatusError (seed ${seed})`, () => {
  const r = rng(seed + 5);
  const corpus = vectors("statuses.json").cases.map((c) => c.message);
  for (let i = 0; i < rounds; i++) {
    const text = mutate(r, corpus[Math.floor(r() * corpus.length)]);
    let st;
    try {
      st = statusUpdate("acme", "p-1", text);
    } catch (err) {
      assert.ok(err instanceof StatusError, `untyped error for ${JSON.stringify(text)}: ${err?.stack ?? err}`);
      continue;
    }
    assert.equal(st.tenant, "acme");
    assert.equal(st.id, "p-1");
    assert.equal(st.stage === "decided", st.verdict !== undefined, JSON.stringify(text));
  }
});

test(`traceHeaders passes on only a well-formed traceparent, or refuses a call's with InvalidConfigError (seed ${seed})`, () => {
  const r = rng(seed);
  const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const shape = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
  for (let i = 0; i < rounds; i++) {
    const tp = mutate(r, good);
    const state = mutate(r, "vendor=1,other=2");
    // From a hook: a well-formed one or nothing, never a throw.
    const hooked = traceHeaders(undefined, (c) => {
      c.traceparent = tp;
      c.tracestate = state;
    });
    if (hooked.traceparent !== undefined) {
      assert.ok(shape.test(hooked.traceparent) && validTraceparent(hooked.traceparent), `hook passed on ${JSON.stringify(tp)}`);
    } else {
      assert.deepEqual(hooked, {}, `tracestate without traceparent from ${JSON.stringify(tp)}`);
    }
    if (hooked.tracestate !== undefined) {
      assert.ok(!/[\r\n]/.test(hooked.tracestate), "a tracestate with a line break was passed on");
    }
    // From a call: the same answer, or InvalidConfigError.
    try {
      const own = traceHeaders({ traceparent: tp, tracestate: state }, undefined);
      assert.equal(own.traceparent, hooked.traceparent);
    } catch (e) {
      assert.ok(e instanceof InvalidConfigError, `untyped error for ${JSON.stringify(tp)}: ${e}`);
      assert.equal(validTraceparent(tp), false);
    }
  }
});
