// The ack requests that handler outcomes build (no node needed).
import assert from "node:assert/strict";
import { test } from "node:test";
import { AckOutcome } from "../src/gen/rebound/v1/executor_pb.js";
import { Outcome } from "../src/job.js";

test("a hold is a retry ack carrying the hold", () => {
  const a = Outcome.hold(30_000, "Retry-After: 30").toAck("d");
  assert.equal(a.deliveryId, "d");
  assert.equal(a.outcome, AckOutcome.RETRY);
  assert.equal(a.snooze, false);
  assert.equal(a.retryAfter, undefined);
  assert.equal(a.error, "Retry-After: 30");
  assert.equal(a.hold?.duration?.seconds, 30n);
  assert.equal(a.hold?.duration?.nanos, 0);
  assert.equal(a.hold?.reason, "Retry-After: 30");
  // The reason is cut to the server's 1 KiB, at a character boundary; the error to 8 KiB.
  const long = "é".repeat(1000);
  const cut = Outcome.hold(1500, long).toAck("d");
  assert.equal(cut.hold?.reason, "é".repeat(512));
  assert.equal(cut.hold?.duration?.nanos, 500_000_000);
  assert.equal(cut.error, long);
  // No other outcome carries a hold.
  for (const o of [
    Outcome.success(),
    Outcome.retry("x"),
    Outcome.retry("x", { afterMs: 1000 }),
    Outcome.snooze(1000, "x"),
    Outcome.fail("x"),
  ]) {
    assert.equal(o.toAck("d").hold, undefined);
  }
});
