// The shared status vectors (test/vectors/statuses.json) hold the
// TypeScript watch to what the Go client makes of a status message.
import assert from "node:assert/strict";
import { test } from "node:test";

import { GatedError, StatusError, decodeStatus, statusUpdate } from "../dist/index.js";
import { vectors } from "./vectorfiles.mjs";

test("status vectors", async (t) => {
  const doc = vectors("statuses.json");
  assert.ok(doc.cases.length >= 40);
  for (const c of doc.cases) {
    await t.test(c.name, () => {
      const data = new TextEncoder().encode(c.message);
      if (c.status === null) {
        assert.throws(
          () => statusUpdate("acme", "p-1", data),
          (err) => err instanceof StatusError && err instanceof GatedError && err.code === "bad_status" && err.field === c.field,
        );
        return;
      }
      const st = statusUpdate("acme", "p-1", data);
      assert.deepEqual(
        {
          stage: st.stage,
          reviewer: st.reviewer ?? "",
          reason: st.reason ?? "",
          outcome: st.verdict?.outcome ?? "",
          deadline: st.deadline !== undefined,
        },
        c.status,
      );
      assert.equal(st.tenant, "acme");
      assert.equal(st.id, "p-1");
    });
  }
});

test("bytes that are not UTF-8 are refused, not read as U+FFFD", () => {
  const bad = new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]);
  assert.throws(() => decodeStatus(bad), (err) => err instanceof StatusError && err.field === "");
});
