// The retry rule for calls a node sheds under load (no node needed).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { overloadWaitMs, pushbackMs, shedAware } from "../src/overload.js";

function shed(hint?: string, code = Code.ResourceExhausted): ConnectError {
  const md = new Headers(hint === undefined ? {} : { "grpc-retry-pushback-ms": hint });
  return new ConnectError("full", code, md);
}

/** A call that answers `answers` in turn (the last one from then on), and its count. */
function calls<T>(answers: (T | Error)[]): { call: () => Promise<T>; made: () => number } {
  let n = 0;
  return {
    call: async () => {
      const a = answers[Math.min(n++, answers.length - 1)]!;
      if (a instanceof Error) throw a;
      return a;
    },
    made: () => n,
  };
}

test("the hint is followed with up to half again", () => {
  assert.equal(pushbackMs(shed("250")), 250);
  assert.equal(overloadWaitMs(0, 250, 0), 250);
  assert.equal(overloadWaitMs(5, 250, 0.999), 374.875);
  // Malformed or negative hints are ignored: the backoff applies.
  for (const bad of ["-5", "soon", "", "1.5"]) assert.equal(pushbackMs(shed(bad)), undefined, bad);
  assert.equal(pushbackMs(shed()), undefined);
  assert.equal(pushbackMs(new Error("not a ConnectError")), undefined);
  assert.equal(overloadWaitMs(0, undefined, 0.5), 100);
  assert.ok(Math.abs(overloadWaitMs(3, undefined, 0) - 640) < 1e-9);
  assert.ok(Math.abs(overloadWaitMs(3, undefined, 0.999) - 959.68) < 1e-9);
  assert.equal(overloadWaitMs(20, undefined, 0.5), 5000);
});

test("a shed call is made again and other errors are not", async () => {
  let c = calls<number>([shed("10"), shed("0"), 7]);
  assert.equal(await shedAware(c.call, { retries: 9 }), 7);
  assert.equal(c.made(), 3);

  c = calls<number>([shed("0", Code.Unavailable)]);
  await assert.rejects(shedAware(c.call, { retries: 9 }), (e: ConnectError) => e.code === Code.Unavailable);
  assert.equal(c.made(), 1);

  // Shed every time: given up after the bound, with the node's error.
  c = calls<number>([shed("0")]);
  await assert.rejects(
    shedAware(c.call, { retries: 9 }),
    (e: ConnectError) => e.code === Code.ResourceExhausted,
  );
  assert.equal(c.made(), 10);
  c = calls<number>([shed("0")]);
  await assert.rejects(shedAware(c.call, { retries: 0 }));
  assert.equal(c.made(), 1);
  // No wait past the call's deadline, nor beyond 30 s in all, nor after the signal.
  c = calls<number>([shed("250")]);
  await assert.rejects(shedAware(c.call, { retries: 9, deadline: Date.now() + 100 }));
  assert.equal(c.made(), 1);
  c = calls<number>([shed("40000")]);
  await assert.rejects(shedAware(c.call, { retries: 9 }));
  assert.equal(c.made(), 1);
  const stop = new AbortController();
  setTimeout(() => stop.abort(), 50);
  c = calls<number>([shed("10000")]);
  const t = Date.now();
  await assert.rejects(shedAware(c.call, { retries: 9, signal: stop.signal }));
  assert.ok(Date.now() - t < 5000);
  assert.equal(c.made(), 1);
});
