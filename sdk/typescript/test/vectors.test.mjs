// The shared vectors in test/vectors hold this client to what the Go
// client does: the exact bytes of a proposal, its address, and what the
// client makes of every kind of verdict message.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AwaitingOperatorError,
  BadProposalError,
  GatedError,
  IdReusedError,
  NoVerdictError,
  NotFoundError,
  ServiceError,
  ServiceUnavailableError,
  TenantMismatchError,
  addressOf,
  answer,
  checkVerdict,
  confirmApproval,
  decodeReviewReply,
  isFinal,
  decodeStoredVerdict,
  encodeProposal,
  proposalDigest,
  verdictMessage,
} from "../dist/index.js";
import { vectors } from "./vectorfiles.mjs";


test("proposal vectors", async (t) => {
  const doc = vectors("proposals.json");
  assert.ok(doc.cases.length > 0, "no proposal vectors");
  for (const c of doc.cases) {
    await t.test(c.name, () => {
      const { address, text, bytes } = encodeProposal(c.input);
      assert.equal(text, c.wire, "the bytes sent");
      assert.equal(proposalDigest(bytes), c.sha256, "digest of the bytes sent");
      assert.equal(proposalDigest(new TextEncoder().encode(c.wire)), c.sha256, "digest of the wire bytes");
      assert.deepEqual(address, c.address);
      assert.deepEqual(addressOf(new TextEncoder().encode(c.wire)), c.address);
    });
  }
});

test("address vectors", async (t) => {
  const doc = vectors("addresses.json");
  let refused = 0;
  for (const c of doc.cases) {
    if (c.address === null) refused++;
    await t.test(c.name, () => {
      if (c.address === null) {
        assert.throws(() => addressOf(c.proposal), BadProposalError);
        assert.throws(() => addressOf(new TextEncoder().encode(c.proposal)), BadProposalError);
      } else {
        assert.deepEqual(addressOf(c.proposal), c.address);
      }
    });
  }
  assert.ok(refused > 0 && refused < doc.cases.length, "the file must hold both kinds");
});

/** The vector's name of an error. */
function errorKind(err) {
  assert.ok(err instanceof GatedError, `not a typed error: ${err}`);
  return err.code;
}

function storedReply(stored) {
  if (stored === null) {
    return { data: new Uint8Array(0), status: "404", description: "Message Not Found", header: () => undefined };
  }
  return { data: new TextEncoder().encode(stored), status: "", header: () => undefined };
}

/** What the client makes of one vector, by the client's own code. */
async function judge(doc, via, message, stored) {
  const a = addressOf(doc.proposal);
  const digest = proposalDigest(doc.proposal);
  const lookup = async () => decodeStoredVerdict(a.tenant, a.id, storedReply(stored));
  let v;
  try {
    switch (via) {
      case "subject": {
        const m = verdictMessage(a, new TextEncoder().encode(message));
        if (m === null) return { result: "skip" };
        v = await confirmApproval(a, digest, m, lookup);
        break;
      }
      case "service": {
        const m = decodeReviewReply(() => undefined, new TextEncoder().encode(message));
        v = await confirmApproval(a, digest, m, lookup);
        break;
      }
      case "stored": {
        let s;
        try {
          s = await lookup();
        } catch {
          return { result: "pending" };
        }
        v = answer(a, digest, s);
        break;
      }
      default:
        return { result: "unknown via " + via };
    }
  } catch (err) {
    return { result: "error", error: errorKind(err) };
  }
  try {
    checkVerdict(v);
  } catch (err) {
    assert.equal(err instanceof AwaitingOperatorError, !isFinal(v));
    return { result: isFinal(v) ? "not_approved" : "held", outcome: v.outcome };
  }
  return { result: "approved" };
}

test("verdict vectors", async (t) => {
  const doc = vectors("verdicts.json");
  assert.equal(proposalDigest(doc.proposal), doc.proposal_sha256);
  const results = {};
  for (const c of doc.cases) {
    results[c.expect.result] = (results[c.expect.result] ?? 0) + 1;
    await t.test(c.name, async () => {
      assert.deepEqual(await judge(doc, c.via, c.message, c.stored), c.expect);
    });
  }
  for (const r of ["skip", "pending", "approved", "not_approved", "held", "error"]) {
    assert.ok(results[r] > 0, `no vector expects ${r}`);
  }
  for (const c of doc.service_errors) {
    await t.test(`service error ${c.code}`, () => {
      const h = { "Nats-Service-Error-Code": c.code, "Nats-Service-Error": c.description };
      let err;
      try {
        decodeReviewReply((name) => h[name], new Uint8Array(0));
      } catch (e) {
        err = e;
      }
      assert.ok(err instanceof ServiceError, `no ServiceError for code ${c.code}: ${err}`);
      assert.equal(errorKind(err), c.error);
      // instanceof matches the class of the kind, as Go's errors.Is does.
      const classes = {
        bad_proposal: BadProposalError,
        tenant_mismatch: TenantMismatchError,
        id_reused: IdReusedError,
        service_unavailable: ServiceUnavailableError,
        no_verdict: NoVerdictError,
      };
      for (const [kind, cls] of Object.entries(classes)) {
        assert.equal(err instanceof cls, kind === c.error, `${kind} instanceof for code ${c.code}`);
      }
    });
  }
});

test("a stored delete marker is not found", () => {
  const reply = { data: new Uint8Array(0), status: "", header: (n) => (n === "KV-Operation" ? "DEL" : undefined) };
  assert.throws(() => decodeStoredVerdict("acme", "p-1", reply), NotFoundError);
});
