// Writes test/vectors/grants.json: grants signed with test-only Ed25519
// seeds, each with what an executor is about to run and whether a verifier
// must accept it (and, when not, the member it fails on), and RFC 8785 cases
// whose canonical forms are written here by hand. It does not use the
// client's code: the client is checked against it.
//
//   node test/grantvectors.mjs          rewrites the file
//   node test/grantvectors.mjs --check  fails when the file differs
import { createHash, createHmac } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";

import { b64, sha256, signToken, testKey } from "./grantkeys.mjs";

const out = new URL("../../../test/vectors/grants.json", import.meta.url);

const now = 1800000000; // 2027-01-15T08:00:00Z
const ttl = 300;

const A = testKey("A"); // gated's key, retired in the rotated set
const B = testKey("B"); // gated's key after the rotation
const F = testKey("forger"); // a key gated never had

const rotatedAt = now - 120;
const keysets = {
  current: { keys: [{ kid: A.kid, kty: "OKP", crv: "Ed25519", x: A.x, created_at: now - 86400, max_ttl_s: ttl }] },
  rotated: {
    keys: [
      { kid: A.kid, kty: "OKP", crv: "Ed25519", x: A.x, created_at: now - 86400, retired_at: rotatedAt, max_ttl_s: ttl },
      { kid: B.kid, kty: "OKP", crv: "Ed25519", x: B.x, created_at: rotatedAt, max_ttl_s: ttl },
    ],
  },
};

// RFC 8785 cases: the input text and its canonical form, written by hand
// (the first two are the RFC's own examples, §3.2.2 and §3.2.3).
const jcs = [
  {
    name: "rfc 8785 3.2.2: numbers, escapes, literals",
    json: '{\n  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],\n  "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",\n  "literals": [null, true, false]\n}',
    canonical: '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
  },
  {
    name: "rfc 8785 3.2.3: member names sorted by UTF-16 code units",
    json: '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control", "\\u00f6": "Latin Small Letter O With Diaeresis"}',
    canonical:
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
  },
  {
    name: "numbers as ECMAScript prints a double",
    json: "[0, -0, 1, -1, 1.5, 1e21, 1e20, 1e-6, 1e-7, 123456789012345678901234567890, 0.1, 5e-324, 1.7976931348623157e308, 9007199254740993, 100.0, 2.50e1]",
    canonical: "[0,0,1,-1,1.5,1e+21,100000000000000000000,0.000001,1e-7,1.2345678901234568e+29,0.1,5e-324,1.7976931348623157e+308,9007199254740992,100,25]",
  },
  {
    name: "no HTML escapes, line separators as they are",
    json: '{"slash": "\\/", "ls": "\\u2028\\u2029", "html": "<a href=\\"x\\">&</a>", "tab": "\\t", "nul": "\\u0000", "del": "\\u007f"}',
    canonical: '{"del":"\u007f","html":"<a href=\\"x\\">&</a>","ls":"\u2028\u2029","nul":"\\u0000","slash":"/","tab":"\\t"}',
  },
  {
    name: "nested objects sorted at every depth, empty containers kept",
    json: '{"b": [], "a": {"d": {}, "c": [{"z": null, "y": true}]}}',
    canonical: '{"a":{"c":[{"y":true,"z":null}],"d":{}},"b":[]}',
  },
  {
    name: "a proposal's target",
    json: '{"service": "nginx", "device_id": 7, "tags": ["production"]}',
    canonical: '{"device_id":7,"service":"nginx","tags":["production"]}',
  },
  { name: "no target", json: "{}", canonical: "{}" },
].map((c) => ({ name: c.name, target: JSON.parse(c.json), json: c.json, canonical: c.canonical, sha256: sha256(c.canonical) }));

const target = jcs.find((c) => c.name === "a proposal's target");
const proposal = JSON.stringify({
  v: 1,
  id: "restart-web-7-0001",
  tenant: "acme",
  kind: "action",
  action: "host_restart_service",
  class: "write",
  target: { device_id: 7, service: "nginx", tags: ["production"] },
  reason: "nginx stopped answering health checks",
  blast_radius: "single_device",
});
const otherProposal = proposal.replace("health checks", "health checks since 09:00");

const sop = { plugin: "sop", plugin_version: "0.1.0", persona: "reviewer", model: "" };
let gids = 0;

/** The payload of a grant for the proposal above, with changes. */
function claims(changes = {}) {
  const gid = b64(createHash("sha256").update(`gid ${++gids}`).digest().subarray(0, 16));
  const iat = changes.iat ?? now - 10;
  return {
    v: 1,
    gid,
    iss: "gated",
    tenant: "acme",
    proposal_id: "restart-web-7-0001",
    proposal_sha256: sha256(proposal),
    action: "host_restart_service",
    target_sha256: target.sha256,
    policy_revision: "rev-3f2a9c",
    reviewers: [sop],
    ...changes,
    iat,
    exp: changes.exp ?? iat + ttl,
  };
}

const header = (kid, changes = {}) => ({ alg: "EdDSA", typ: "gated-grant+jwt", kid, ...changes });

const token = (h, p, key = A) => signToken(h, p, key);

const expect = (changes = {}) => ({
  tenant: "acme",
  proposal_id: "restart-web-7-0001",
  proposal_sha256: sha256(proposal),
  action: "host_restart_service",
  target_json: target.json,
  ...changes,
});

const grants = [];
function valid(name, tok, c, opts = {}) {
  grants.push({ name, keyset: opts.keyset ?? "current", ...(opts.now ? { now: opts.now } : {}), token: tok, expect: opts.expect ?? expect(), valid: true, claims: c });
}
function invalid(name, member, tok, opts = {}) {
  grants.push({ name, keyset: opts.keyset ?? "current", ...(opts.now ? { now: opts.now } : {}), token: tok, expect: opts.expect ?? expect(), valid: false, error_member: member });
}

// Accepted.
{
  const c = claims();
  valid("a reviewed approval", token(header(A.kid), c), c);
}
{
  const c = claims();
  valid("the target as the executor holds it, members in another order", token(header(A.kid), c), c, {
    expect: expect({ target_json: '{"tags":["production"],"device_id":7.0,"service":"nginx"}' }),
  });
}
{
  const read = JSON.stringify({ v: 1, id: "list-web-7", tenant: "acme", kind: "action", action: "host_list_services", class: "read" });
  const c = claims({ proposal_id: "list-web-7", proposal_sha256: sha256(read), action: "host_list_services", target_sha256: sha256("{}"), reviewers: [] });
  valid("an approval of the policy alone, no target, no reviewers", token(header(A.kid), c), c, {
    expect: expect({ proposal_id: "list-web-7", proposal_sha256: sha256(read), action: "host_list_services", target_json: "{}" }),
  });
}
{
  const c = claims({ reviewers: [{ plugin: "operator", plugin_version: "", persona: "alice", model: "" }] });
  valid("an operator's approval of a held action", token(header(A.kid), c), c);
}
{
  const c = claims({ reviewers: [sop, { plugin: "llm", plugin_version: "0.3.1", persona: "dba", model: "anthropic/claude-sonnet" }] });
  valid("a quorum of two reviewers", token(header(A.kid), c), c);
}
{
  const c = claims({ iat: rotatedAt - 30 });
  valid("signed by a key retired since, before its retirement, still unexpired", token(header(A.kid), c), c, { keyset: "rotated" });
}
{
  const c = claims({ iat: now - 5 });
  valid("signed by the key that replaced it", token(header(B.kid), c, B), c, { keyset: "rotated" });
}
{
  const c = claims({ iat: now + 60 });
  valid("issued up to 60 s ahead of the verifier's clock", token(header(A.kid), c), c);
}
{
  const c = claims();
  valid("checked one second before it expires", token(header(A.kid), c), c, { now: c.exp - 1 });
}
{
  const c = claims();
  const text = `{ "exp": ${c.exp}, "iat": ${c.iat}, "reviewers": [ {"model": "", "persona": "reviewer", "plugin_version": "0.1.0", "plugin": "sop"} ],\n "policy_revision": "rev-3f2a9c", "target_sha256": "${c.target_sha256}", "action": "host_restart_service", "proposal_sha256": "${c.proposal_sha256}", "proposal_id": "restart-web-7-0001", "tenant": "acme", "iss": "gated", "gid": "${c.gid}", "v": 1 }`;
  valid("payload members in another order, with white space", token(`{"kid":"${A.kid}", "typ":"gated-grant+jwt", "alg":"EdDSA"}`, text), c);
}

// Refused: forged, altered, replayed, misdirected.
{
  const c = claims();
  invalid("forged: signed by another key, naming gated's kid", "signature", token(header(A.kid), c, F));
}
{
  const c = claims();
  const t = token(header(A.kid), c).split(".");
  t[1] = b64(JSON.stringify({ ...c, tenant: "globex" }));
  invalid("altered: tenant changed after signing", "signature", t.join("."), { expect: expect({ tenant: "globex" }) });
}
{
  const c = claims();
  const t = token(header(A.kid), c).split(".");
  const other = '{"device_id":8,"service":"nginx","tags":["production"]}';
  t[1] = b64(JSON.stringify({ ...c, target_sha256: sha256(other), exp: c.iat + ttl - 1 }));
  invalid("altered: target and exp changed after signing", "signature", t.join("."), { expect: expect({ target_json: other }) });
}
{
  const t = token(header(A.kid), claims()).split(".");
  const sig = Buffer.from(t[2], "base64url");
  sig[10] ^= 0x01;
  t[2] = b64(sig);
  invalid("altered: one bit of the signature flipped", "signature", t.join("."));
}
{
  const t = token(header(A.kid), claims()).split(".");
  t[2] = b64(Buffer.from(t[2], "base64url").subarray(0, 63));
  invalid("signature one byte short", "signature", t.join("."));
}
invalid("expired", "exp", token(header(A.kid), claims({ iat: now - 400, exp: now - 100 })));
{
  const c = claims();
  invalid("checked at the second it expires", "exp", token(header(A.kid), c), { now: c.exp });
}
invalid("replayed for another proposal", "proposal_id", token(header(A.kid), claims()), {
  expect: expect({ proposal_id: "restart-web-7-0002" }),
});
invalid("the same id, other proposal bytes", "proposal_sha256", token(header(A.kid), claims()), {
  expect: expect({ proposal_sha256: sha256(otherProposal) }),
});
invalid("another tenant's grant", "tenant", token(header(A.kid), claims()), { expect: expect({ tenant: "globex" }) });
invalid("another action", "action", token(header(A.kid), claims()), { expect: expect({ action: "kill_process" }) });
invalid("another target", "target_sha256", token(header(A.kid), claims()), {
  expect: expect({ target_json: '{"device_id": 8, "service": "nginx", "tags": ["production"]}' }),
});

// Refused: the header.
{
  const c = claims();
  const enc = (v) => b64(JSON.stringify(v));
  invalid("alg none, no signature", "alg", enc(header(A.kid, { alg: "none" })) + "." + enc(c) + ".");
  const input = enc(header(A.kid, { alg: "HS256" })) + "." + enc(c);
  const mac = createHmac("sha256", Buffer.from(A.x, "base64url")).update(input).digest();
  invalid("alg HS256 keyed with gated's public key", "alg", input + "." + b64(mac));
  invalid("alg missing", "alg", token({ typ: "gated-grant+jwt", kid: A.kid }, c));
  invalid("typ JWT", "typ", token(header(A.kid, { typ: "JWT" }), c));
  invalid("a key embedded in the header (jwk)", "jwk", token(header(A.kid, { jwk: { kty: "OKP", crv: "Ed25519", x: F.x } }), claims(), F));
  invalid("a key URL in the header (jku)", "jku", token(header(A.kid, { jku: "https://keys.example.org/set.json" }), c));
  invalid("crit in the header", "crit", token(header(A.kid, { crit: ["exp"] }), c));
  invalid("kid missing", "kid", token({ alg: "EdDSA", typ: "gated-grant+jwt" }, c));
  invalid("kid unknown", "kid", token(header(F.kid), c, F));
  invalid("kid of the replacing key, checked with the set from before the rotation", "kid", token(header(B.kid), claims(), B));
}

// Refused: the keys' rules.
invalid("retired key's forgery: signed after its retirement", "retired", token(header(A.kid), claims({ iat: now - 10 })), { keyset: "rotated" });
invalid("retired key's forgery: signed after its retirement, expiring within its last grants' lifetime", "retired", token(header(A.kid), claims({ iat: now - 10, exp: now + 50 })), {
  keyset: "rotated",
});
invalid("exp beyond the key's max_ttl", "max_ttl", token(header(A.kid), claims({ iat: now - 10, exp: now - 10 + ttl + 1 })));
{
  const created = keysets.current.keys[0].created_at;
  invalid("issued before its key was created", "iat", token(header(A.kid), claims({ iat: created - 10 })), { now: created + 100 });
}
invalid("issued more than 60 s ahead of the verifier's clock", "iat", token(header(A.kid), claims({ iat: now + 61 })));
invalid("exp before iat", "exp", token(header(A.kid), claims({ iat: now - 10, exp: now - 20 })));

// Refused: the payload's form.
invalid("v 2", "v", token(header(A.kid), claims({ v: 2 })));
invalid("iss another issuer", "iss", token(header(A.kid), claims({ iss: "not-gated" })));
invalid("an unknown payload member", "scope", token(header(A.kid), { ...claims(), scope: "admin" }));
{
  const { exp: _exp, ...c } = claims();
  invalid("exp missing", "exp", token(header(A.kid), c));
  const { tenant: _tenant, ...d } = claims();
  invalid("tenant missing", "tenant", token(header(A.kid), d));
}
invalid("iat a string", "iat", token(header(A.kid), { ...claims(), iat: String(now - 10) }));
invalid("iat a fraction", "iat", token(header(A.kid), `{"v":1,"gid":"${claims().gid}","iss":"gated","tenant":"acme","proposal_id":"restart-web-7-0001","proposal_sha256":"${sha256(proposal)}","action":"host_restart_service","target_sha256":"${target.sha256}","policy_revision":"r","reviewers":[],"iat":${now - 10}.5,"exp":${now + 100}}`));
invalid("tenant a number", "tenant", token(header(A.kid), { ...claims(), tenant: 7 }));
invalid("gid too short", "gid", token(header(A.kid), claims({ gid: "c2hvcnQ" })));
invalid("reviewers not a list", "reviewers", token(header(A.kid), claims({ reviewers: "sop" })));
invalid("a reviewer with an unknown member", "reviewers", token(header(A.kid), claims({ reviewers: [{ ...sop, approved: true }] })));
invalid("proposal_sha256 in upper case", "proposal_sha256", token(header(A.kid), claims({ proposal_sha256: sha256(proposal).toUpperCase() })));
{
  const c = claims();
  const text = JSON.stringify(c).replace('"tenant":"acme"', '"tenant":"globex","tenant":"acme"');
  invalid("a payload member named twice", "format", token(header(A.kid), text));
}

// Refused: not a compact JWS.
{
  const t = token(header(A.kid), claims());
  const [h, p, s] = t.split(".");
  invalid("two segments", "format", h + "." + p);
  invalid("four segments", "format", t + ".");
  invalid("empty", "format", "");
  // A payload whose length is not a multiple of three, so that base64 pads it.
  for (let k = 0; ; k++) {
    const pp = b64(JSON.stringify(claims({ policy_revision: "rev-" + "x".repeat(k) })));
    const padded = Buffer.from(pp, "base64url").toString("base64");
    if (padded.endsWith("=")) {
      invalid("padded base64", "format", h + "." + padded + "." + s);
      break;
    }
  }
  invalid("the header is not JSON", "format", b64("alg=EdDSA") + "." + p + "." + s);
  invalid("the header is a JSON array", "format", b64("[]") + "." + p + "." + s);
  invalid("the payload is not JSON", "format", h + "." + b64("{tenant: acme}") + "." + s);
  invalid("white space around the token's segments", "format", h + " ." + p + "." + s);
}

const doc = {
  comment:
    "Grant vectors (docs/GRANTS.md). Every verifier accepts exactly the valid cases (returning claims) and refuses each invalid one with an error naming error_member; keysets and seeds are TEST ONLY. jcs: the RFC 8785 canonical form of json and its SHA-256. Each case is checked at now unless it gives its own.",
  now,
  keysets,
  seeds: { [A.kid]: A.seed, [B.kid]: B.seed, [F.kid]: F.seed },
  jcs,
  grants,
};
const text = JSON.stringify(doc, null, 2) + "\n";
if (process.argv.includes("--check")) {
  if (readFileSync(out, "utf8") !== text) {
    console.error("test/vectors/grants.json differs from what test/grantvectors.mjs writes");
    process.exit(1);
  }
} else {
  writeFileSync(out, text);
}
