// The client's grant key cache on a real NATS server (a gated serve's):
// the key set is requested once, again once for a kid it does not hold (a
// rotation), and a failed request is not cached. The set is served here,
// on a subject of the test's own, so that only the client's side is tested.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, GrantError, InvalidConfigError, TransportError } from "../dist/index.js";
import { keyEntry, sha256, signToken, testKey } from "./grantkeys.mjs";
import { natsConnect, startGated } from "./gated.mjs";

let g;
let nc;
const subject = `test.grant-keys.${Date.now().toString(36)}`;
const A = testKey("A");
const B = testKey("B");
const F = testKey("forger");
const nowS = () => Math.floor(Date.now() / 1000);
const before_ = nowS() - 3600;
const rotated = nowS() - 60;
const sets = [
  { keys: [keyEntry(A, before_, 300)] },
  { keys: [keyEntry(A, before_, 300, rotated), keyEntry(B, rotated, 300)] },
];
let served = 0;

before(async () => {
  g = await startGated();
  nc = await natsConnect(g.natsURL);
  // Serves the set before the rotation first, then the one after it.
  nc.subscribe(subject, { callback: (_err, m) => m.respond(JSON.stringify(sets[Math.min(served++, 1)])) });
  await nc.flush();
});

after(async () => {
  await nc?.close();
  await g?.stop();
});

const target = { device_id: 7, service: "nginx" };
const proposal = '{"v":1,"id":"p-1"}';
const expect = { tenant: "acme", proposal_id: "p-1", proposal_sha256: sha256(proposal), action: "host_restart_service", target };

function grant(key, iat) {
  return signToken(
    { alg: "EdDSA", typ: "gated-grant+jwt", kid: key.kid },
    {
      v: 1, gid: "C2VbrarSPjau75BJujMcpw", iss: "gated", tenant: "acme", proposal_id: "p-1", proposal_sha256: sha256(proposal),
      action: "host_restart_service", target_sha256: sha256('{"device_id":7,"service":"nginx"}'), policy_revision: "r", reviewers: [],
      iat, exp: iat + 300,
    },
    key,
  );
}

test("the key set is fetched once, again once for an unknown kid, and a rotation keeps the old key's grants valid", async () => {
  const client = new Client(nc, { grantKeysSubject: subject });
  const before = grant(A, rotated - 30);
  assert.equal((await client.verifyGrant(before, expect)).proposal_id, "p-1");
  assert.equal((await client.verifyGrant(before, expect)).proposal_id, "p-1");
  assert.equal(served, 1, "the cached set was requested again");
  // Signed by the new key: unknown to the cached set, so fetched again once.
  assert.equal((await client.verifyGrant(grant(B, nowS() - 5), expect)).proposal_id, "p-1");
  assert.equal(served, 2);
  // The old key's grant still verifies with the set after the rotation; its forgery after the retirement does not.
  assert.equal((await client.verifyGrant(before, expect)).proposal_id, "p-1");
  await assert.rejects(client.verifyGrant(grant(A, nowS() - 5), expect), (err) => err instanceof GrantError && err.member === "retired");
  // A kid no set holds: one more request, then the refusal.
  await assert.rejects(client.verifyGrant(grant(F, nowS() - 5), expect), (err) => err instanceof GrantError && err.member === "kid");
  assert.equal(served, 3, "not one request for the unknown kid");
});

test("a key set given to the client is never fetched", async () => {
  const n = served;
  const client = new Client(nc, { grantKeySet: JSON.stringify(sets[0]), grantKeysSubject: subject });
  assert.equal((await client.verifyGrant(grant(A, nowS() - 5), expect)).proposal_id, "p-1");
  await assert.rejects(client.verifyGrant(grant(B, nowS() - 5), expect), (err) => err instanceof GrantError && err.member === "kid");
  assert.equal(served, n);
  assert.throws(() => new Client(nc, { grantKeySet: '{"keys":[{"kid":"x"}]}' }), InvalidConfigError);
  assert.throws(() => new Client(nc, { grantKeysSubject: "gated.grants.*" }), InvalidConfigError);
});

test("a key set request nobody answers is a TransportError, and is asked again next time", async () => {
  const lonely = `${subject}.nobody`;
  const client = new Client(nc, { grantKeysSubject: lonely });
  await assert.rejects(client.verifyGrant(grant(A, nowS() - 5), expect), TransportError);
  let answered = 0;
  const sub = nc.subscribe(lonely, { callback: (_err, m) => (answered++, m.respond(JSON.stringify(sets[0]))) });
  await nc.flush();
  assert.equal((await client.verifyGrant(grant(A, nowS() - 5), expect)).proposal_id, "p-1");
  assert.equal(answered, 1);
  sub.unsubscribe();
});
