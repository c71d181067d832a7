// Grants against a real `gated serve`: its signing key, its key set on
// gated.grants.keys, its single-use records, its outcomes stream and its
// audit stream.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { jetstream } from "@nats-io/jetstream";
import { decompress } from "fzstd";

import {
  Client,
  GrantError,
  GrantUseError,
  ToolGate,
  acceptGrant,
  decodeGrant,
  decodeGrantKeySet,
  encodeProposal,
  gate,
  grantWire,
  proposalDigest,
} from "../dist/index.js";
import { example, natsConnect, startGated } from "./gated.mjs";

let g;
let nc;
let client;
const run = Date.now().toString(36);

before(async () => {
  g = await startGated();
  nc = await natsConnect(g.natsURL);
  client = new Client(nc);
});

after(async () => {
  await nc?.close();
  await g?.stop();
});

/**
 * The events of an audit record: a record of version 3 holds several, each
 * whole; one of version 2 several under one envelope, and folds grant.issued
 * into its verdict's grant member (docs/AUDIT.md); one of version 1 is its
 * event.
 */
function recordEvents(r) {
  if (r.v === 3) {
    return r.events;
  }
  if (r.v !== 2) {
    return [r];
  }
  const out = [];
  for (const e of r.events) {
    const env = { tenant: r.tenant, proposal_id: r.proposal_id };
    if (e.grant) {
      out.push({ ...env, event: "grant.issued", at: e.at, data: e.grant });
    }
    out.push({ ...env, ...e });
  }
  return out;
}

const zstdMagic = [0x28, 0xb5, 0x2f, 0xfd];

/** The JSON of an audit record's body: gated stores a record as one zstd frame of its JSON unless serve runs with --audit-compress=false (docs/AUDIT.md). */
function recordJSON(data) {
  const compressed = zstdMagic.every((b, i) => data[i] === b);
  return JSON.parse(new TextDecoder().decode(compressed ? decompress(data) : data));
}

/** Reads gated's audit events of tenant's grants (and of the verdicts that carry them) until want(events) holds, or 20 s pass. */
async function grantAudit(id, want) {
  const c = await jetstream(nc).consumers.get("GATED_AUDIT", {
    filter_subjects: ["gated.audit.acme.grant.>", "gated.audit.acme.verdict.decided"],
  });
  const records = [];
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const batch = await c.fetch({ max_messages: 256, expires: 1000 });
    for await (const m of batch) {
      records.push(...recordEvents(recordJSON(m.data)).filter((e) => e.proposal_id === id && e.event.startsWith("grant.")));
    }
    if (want(records)) {
      return records;
    }
  }
  assert.fail(`gated's audit has not the grant events wanted for ${id}: ${JSON.stringify(records.map((r) => [r.event, r.data?.status]))}`);
}

test("gated publishes a key set that verifies its grants", async () => {
  const keys = await client.fetchGrantKeys();
  assert.ok(keys.keys.length >= 1);
  assert.ok(keys.keys.some((k) => k.retired_at === undefined), "no active key");
  const raw = await nc.request(grantWire.keysSubject, new Uint8Array(0), { timeout: 5000 });
  assert.deepEqual(decodeGrantKeySet(raw.data), keys);
});

test("an approved proposal's tool runs once, with its grant used, and its outcomes reach gated", async () => {
  const id = `ts-grant-run-${run}`;
  const verdicts = [];
  const tg = new ToolGate(client, { tenant: "acme", agent: "ts-grant-agent", session: "s-1", operator: { id: "alice", roles: ["sre"] } }, {
    newId: () => id,
    reviewTimeoutMs: 60_000,
    observe: (p, v) => verdicts.push({ p, v }),
  });
  // The outcomes as published, read off the subject before they are sent.
  const published = [];
  const sub = nc.subscribe(`gated.outcomes.acme.${id}`, { callback: (err, m) => !err && published.push({ id: m.headers?.get("Nats-Msg-Id"), body: m.json() }) });
  await nc.flush();
  let runs = 0;
  const restart = gate(
    tg,
    { action: "host_restart_service", class: "write", describe: (target) => ({ target, reason: "nginx stopped answering health checks", blast_radius: "single_device" }) },
    async (target) => {
      runs++;
      return `restarted ${target.service}`;
    },
  );
  const target = { device_id: 901, service: "nginx", tags: ["production"] };
  assert.equal(await restart(target), "restarted nginx");
  assert.equal(runs, 1);
  sub.unsubscribe();

  const { p, v } = verdicts.at(-1);
  assert.equal(v.outcome, "approved");
  assert.deepEqual(p.arguments, target, "the proposal gated approved carries the call's arguments");
  assert.equal(typeof v.grant, "string", "an approval carries a grant");
  const { claims } = decodeGrant(v.grant);
  assert.equal(claims.tenant, "acme");
  assert.equal(claims.proposal_id, id);
  assert.equal(claims.proposal_sha256, proposalDigest(encodeProposal(p).bytes));
  assert.equal(claims.proposal_sha256, v.proposal_sha256);

  // The grant is used: a second use is refused with gated's reason.
  await assert.rejects(client.useGrant(v.grant, "ts-second-use"), (err) => {
    assert.ok(err instanceof GrantUseError, `${err?.stack ?? err}`);
    assert.match(err.reason, /already used/);
    return true;
  });

  // Each report's Nats-Msg-Id is <tenant>.<id>.<status> and a random nonce of its own.
  assert.deepEqual(
    published.map((o) => [o.id.split(".").slice(0, 3).join("."), o.body.status, o.body.gid]),
    [
      [`acme.${id}.started`, "started", claims.gid],
      [`acme.${id}.succeeded`, "succeeded", claims.gid],
    ],
  );
  const nonces = published.map((o) => o.id.split(".")[3]);
  assert.ok(nonces.every((n) => /^[A-Za-z0-9_-]{22}$/.test(n)) && new Set(nonces).size === nonces.length, nonces.join(", "));
  const records = await grantAudit(id, (rs) => rs.filter((r) => r.event === "grant.outcome").length >= 2 && rs.some((r) => r.event === "grant.refused"));
  const events = records.map((r) => r.event);
  assert.ok(events.includes("grant.issued") && events.includes("grant.used"), events.join(", "));
  assert.deepEqual(
    records.filter((r) => r.event === "grant.outcome").map((r) => r.data.status).sort(),
    ["started", "succeeded"],
  );
});

test("acceptGrant, in a service handed a grant, accepts it once, and refuses a tampered one, another target's and a replay", async () => {
  const id = `ts-grant-accept-${run}`;
  const p = example("approved.json", { id, target: { device_id: 902, service: "nginx", tags: ["production"] } });
  const { bytes } = encodeProposal(p);
  const v = await client.propose(p, { timeoutMs: 60_000 });
  assert.equal(typeof v.grant, "string", "an approval carries a grant");
  const expect = { tenant: "acme", proposal_id: id, proposal: bytes, action: p.action, target: p.target };

  // Tampered: the payload names another target; the signature no longer holds.
  const [h, payload, sig] = v.grant.split(".");
  const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  const tampered = [h, Buffer.from(JSON.stringify({ ...claims, target_sha256: "0".repeat(64) })).toString("base64url"), sig].join(".");
  await assert.rejects(acceptGrant(client, tampered, { ...expect, target_sha256: "0".repeat(64), target: undefined }, { by: "restarter" }), (err) => {
    assert.ok(err instanceof GrantError && err.member === "signature", `${err?.stack ?? err}`);
    return true;
  });
  // gated refuses it too, when it is sent for use without a check.
  await assert.rejects(client.useGrant(tampered, "restarter"), GrantUseError);

  // Genuine, but for another target than the one the service is about to touch.
  await assert.rejects(acceptGrant(client, v.grant, { ...expect, target: { device_id: 903, service: "nginx" } }, { by: "restarter" }), (err) => {
    assert.ok(err instanceof GrantError && err.member === "target_sha256", `${err?.stack ?? err}`);
    return true;
  });

  // Genuine and for this target: accepted once, then a replay is refused.
  const ok = await acceptGrant(client, v.grant, expect, { by: "restarter" });
  assert.equal(ok.proposal_id, id);
  await assert.rejects(acceptGrant(client, v.grant, expect, { by: "restarter-again" }), (err) => {
    assert.ok(err instanceof GrantUseError, `${err?.stack ?? err}`);
    assert.match(err.reason, /already used/);
    return true;
  });
  // The replay is refused and audited (the tampered grant's refusal names no trusted proposal).
  const records = await grantAudit(id, (rs) => rs.some((r) => r.event === "grant.refused") && rs.some((r) => r.event === "grant.used"));
  assert.equal(records.filter((r) => r.event === "grant.used").length, 1);
});

test("a failed tool is reported failed with its error", async () => {
  const id = `ts-grant-failed-${run}`;
  const tg = new ToolGate(client, { tenant: "acme", agent: "ts-grant-agent", operator: { id: "alice", roles: ["sre"] } }, { newId: () => id, reviewTimeoutMs: 60_000 });
  const restart = gate(
    tg,
    { action: "host_restart_service", class: "write", describe: (target) => ({ target, reason: "nginx stopped answering health checks", blast_radius: "single_device" }) },
    async () => {
      throw new Error("systemctl: unit nginx.service not found");
    },
  );
  await assert.rejects(restart({ device_id: 904, service: "nginx", tags: ["production"] }), /unit nginx.service not found/);
  const records = await grantAudit(id, (rs) => rs.some((r) => r.event === "grant.outcome" && r.data.status === "failed"));
  const failed = records.find((r) => r.event === "grant.outcome" && r.data.status === "failed");
  assert.match(failed.data.error, /unit nginx.service not found/);
});

test("a grant refused by the executor itself is reported to gated and audited", async () => {
  // The ToolGate handed another proposal's grant: refused here, before any use.
  const otherID = `ts-grant-refused-other-${run}`;
  const other = await client.propose(example("approved.json", { id: otherID, target: { device_id: 905, service: "nginx", tags: ["production"] } }), {
    timeoutMs: 60_000,
  });
  const id = `ts-grant-refused-${run}`;
  const tampering = {
    propose: async (p, opts) => ({ ...(await client.propose(p, opts)), grant: other.grant }),
    verifyGrant: (...a) => client.verifyGrant(...a),
    useGrant: (...a) => client.useGrant(...a),
    reportOutcome: (...a) => client.reportOutcome(...a),
  };
  const tg = new ToolGate(tampering, { tenant: "acme", agent: "ts-grant-agent", operator: { id: "alice", roles: ["sre"] } }, { newId: () => id, reviewTimeoutMs: 60_000 });
  let ran = 0;
  const restart = gate(
    tg,
    { action: "host_restart_service", class: "write", describe: (target) => ({ target, reason: "nginx stopped answering health checks", blast_radius: "single_device" }) },
    async () => {
      ran++;
    },
  );
  await assert.rejects(restart({ device_id: 906, service: "nginx", tags: ["production"] }), GrantError);
  assert.equal(ran, 0);
  let records = await grantAudit(id, (rs) => rs.some((r) => r.event === "grant.refused"));
  let refused = records.find((r) => r.event === "grant.refused");
  assert.equal(refused.data.by, "executor");
  assert.match(refused.data.reason, /proposal_id/);

  // acceptGrant, handed a grant for another target.
  const sid = `ts-grant-refused-svc-${run}`;
  const p = example("approved.json", { id: sid, target: { device_id: 907, service: "nginx", tags: ["production"] } });
  const v = await client.propose(p, { timeoutMs: 60_000 });
  await assert.rejects(
    acceptGrant(client, v.grant, { tenant: "acme", proposal_id: sid, proposal: encodeProposal(p).bytes, action: p.action, target: { device_id: 1 } }, { by: "restarter" }),
    (err) => err instanceof GrantError && err.member === "target_sha256",
  );
  records = await grantAudit(sid, (rs) => rs.some((r) => r.event === "grant.refused"));
  refused = records.find((r) => r.event === "grant.refused");
  assert.equal(refused.data.by, "executor");
  assert.match(refused.data.reason, /target_sha256/);
});

test("a client of an agent uses and reports on the agent's own subjects, and another agent's cannot", async () => {
  assert.throws(() => new Client(nc, { agent: "ts.grant.agent" }), /agent/);
  const mine = new Client(nc, { agent: "ts-grant-agent" });
  const other = new Client(nc, { agent: "ts-other-agent" });
  const published = [];
  const sub = nc.subscribe("gated.outcomes.acme.>", { callback: (err, m) => !err && published.push(m.subject) });
  await nc.flush();

  // The proposal names ts-grant-agent; the other agent's client cannot use its grant.
  const id = `ts-grant-agent-${run}`;
  const p = example("approved.json", { id, target: { device_id: 911, service: "nginx", tags: ["production"] }, requested_by: { agent: "ts-grant-agent", session: "s-1" } });
  const v = await other.propose(p, { timeoutMs: 60_000 });
  await assert.rejects(other.useGrant(v.grant, "ts-other-agent"), (err) => {
    assert.ok(err instanceof GrantUseError, `${err?.stack ?? err}`);
    assert.match(err.reason, /not issued to agent "ts-other-agent"/);
    return true;
  });
  const { gid } = await mine.useGrant(v.grant, "ts-grant-agent");
  await other.reportOutcome({ tenant: "acme", proposal_id: id, gid, status: "failed", error: "made up" });
  await mine.reportOutcome({ tenant: "acme", proposal_id: id, gid, status: "failed", error: "nginx did not come back" });
  const records = await grantAudit(id, (rs) => rs.some((r) => r.event === "grant.outcome") && rs.some((r) => r.event === "grant.outcome_refused"));
  const as = (event) => records.filter((r) => r.event === event).map((r) => r.data.as);
  assert.deepEqual(as("grant.used"), ["ts-grant-agent"]);
  assert.deepEqual(as("grant.refused"), ["ts-other-agent"]);
  assert.deepEqual(as("grant.outcome_refused"), ["ts-other-agent"]);
  assert.deepEqual(as("grant.outcome"), ["ts-grant-agent"]);
  assert.equal(records.find((r) => r.event === "grant.outcome").data.error, "nginx did not come back");
  sub.unsubscribe();
  assert.deepEqual(published.sort(), [`gated.outcomes.acme.${id}.ts-grant-agent`, `gated.outcomes.acme.${id}.ts-other-agent`]);
});
