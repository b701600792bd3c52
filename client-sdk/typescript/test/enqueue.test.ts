// The enqueue requests that the client builds, and the chains that get reads (no node needed).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { CompensationChainSchema, RetryStatus } from "../src/gen/rebound/v1/types_pb.js";
import { chainFromProto, enqueueToProto } from "../src/client.js";

test("an enqueue carries its compensations in order", () => {
  const m = enqueueToProto({
    service: "saga-orders",
    transactionId: "charge-1",
    compensations: [
      {
        service: "saga-undo",
        transactionId: "refund-1",
        payload: "refund charge-1",
        attributes: { tenant: "acme" },
        policy: { maxAttempts: 7, initialBackoffMs: 1500 },
      },
      { service: "saga-undo", transactionId: "release-1", payload: new Uint8Array([1, 2, 3]) },
      { service: "saga-mail", transactionId: "apologise-1" },
    ],
  });
  assert.deepEqual(
    m.compensations.map((c) => [c.service, c.transactionId]),
    [
      ["saga-undo", "refund-1"],
      ["saga-undo", "release-1"],
      ["saga-mail", "apologise-1"],
    ],
  );
  const [refund, release, apologise] = m.compensations;
  assert.equal(new TextDecoder().decode(refund!.payload), "refund charge-1");
  assert.deepEqual(refund!.attributes, { tenant: "acme" });
  assert.equal(refund!.policy?.maxAttempts, 7);
  assert.equal(refund!.policy?.initialBackoff?.seconds, 1n);
  assert.equal(refund!.policy?.initialBackoff?.nanos, 500_000_000);
  assert.deepEqual([...release!.payload], [1, 2, 3]);
  assert.deepEqual(release!.attributes, {});
  assert.equal(release!.policy, undefined);
  assert.equal(apologise!.payload.length, 0);
  assert.equal(apologise!.policy, undefined);
  // Without compensations: none.
  assert.deepEqual(enqueueToProto({ service: "s", transactionId: "t" }).compensations, []);
});

test("a chain's unenqueued compensation has no status", () => {
  assert.equal(chainFromProto(undefined), undefined);
  const chain = chainFromProto(
    create(CompensationChainSchema, {
      sagaService: "saga-orders",
      sagaTransactionId: "charge-1",
      position: 1,
      compensations: [
        { service: "saga-undo", transactionId: "refund-1", status: RetryStatus.SCHEDULED },
        { service: "saga-undo", transactionId: "release-1", status: RetryStatus.UNSPECIFIED },
      ],
    }),
  );
  assert.deepEqual(chain, {
    sagaService: "saga-orders",
    sagaTransactionId: "charge-1",
    position: 1,
    compensations: [
      { service: "saga-undo", transactionId: "refund-1", status: RetryStatus.SCHEDULED },
      { service: "saga-undo", transactionId: "release-1", status: undefined },
    ],
  });
});

test("an enqueue counts the failed call as attempt 1 unless told", () => {
  // As the CLI and every SDK: the first delivery is then attempt 2.
  assert.equal(enqueueToProto({ service: "s", transactionId: "t" }).attempt, 1);
  assert.equal(enqueueToProto({ service: "s", transactionId: "t", attempt: 0 }).attempt, 0);
  assert.equal(enqueueToProto({ service: "s", transactionId: "t", attempt: 3 }).attempt, 3);
});
