// A gated whose server goes away mid-wait: the client ends the wait with
// a typed error, never an approval, never later than its deadline.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { Client, NoVerdictError, ServiceUnavailableError, TransportError, VerdictError } from "../dist/index.js";
import { natsConnect, repoRoot, startGated } from "./gated.mjs";

const approved = JSON.parse(readFileSync(`${repoRoot}/examples/proposals/approved.json`, "utf8"));

test("the server dies while a proposal waits", { timeout: 60_000 }, async () => {
  const g = await startGated();
  const nc = await natsConnect(g.natsURL, { maxReconnectAttempts: -1, reconnectTimeWait: 200 });
  const watcher = await natsConnect(g.natsURL);
  try {
    const client = new Client(nc);
    // gated dies the moment the proposal reaches the server.
    let killed;
    watcher.subscribe("gated.proposals.acme.>", {
      max: 1,
      callback: () => {
        killed = g.kill();
      },
    });
    await watcher.flush();
    const started = Date.now();
    const outcome = await client
      .propose({ ...approved, id: `ts-outage-${Date.now().toString(36)}` }, { timeoutMs: 3000 })
      .then((v) => ({ v }), (err) => ({ err }));
    const took = Date.now() - started;
    await killed;
    process.stdout.write(`# the wait ended after ${took} ms with ${outcome.err ? outcome.err.name : "a verdict"}\n`);
    if (outcome.v) {
      // The verdict got out before gated died: it must be the real one.
      assert.equal(outcome.v.outcome, "approved");
    } else {
      assert.ok(outcome.err instanceof NoVerdictError || outcome.err instanceof VerdictError, `${outcome.err}`);
      assert.ok(!(outcome.err instanceof VerdictError) || outcome.err.verdict.approved !== true);
    }
    // With gated gone, a new proposal cannot even be sent (TransportError)
    // or gets no verdict before its deadline (NoVerdictError).
    const err = await client
      .propose({ ...approved, id: `ts-outage-2-${Date.now().toString(36)}` }, { timeoutMs: 1500 })
      .then(assert.fail, (e) => e);
    assert.ok(err instanceof TransportError || err instanceof NoVerdictError, `${err}`);
    process.stdout.write(`# a proposal with gated gone: ${err.name}: ${err.message}\n`);
  } finally {
    await nc.close().catch(() => {});
    await watcher.close().catch(() => {});
    await g.stop();
  }
});

test("no review service: ServiceUnavailableError", { timeout: 60_000 }, async () => {
  const g = await startGated("--review-service=false");
  const nc = await natsConnect(g.natsURL);
  try {
    const client = new Client(nc);
    const raw = JSON.stringify({ ...approved, id: "ts-no-service" });
    await assert.rejects(client.requestReview(raw, { timeoutMs: 5000 }), ServiceUnavailableError);
  } finally {
    await nc.close();
    await g.stop();
  }
});
