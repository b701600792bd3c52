// The scenarios of client-sdk/CONFORMANCE.md, against live nodes (named as there).
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import {
  AttemptOutcome,
  Client,
  Code,
  Executor,
  ItemError,
  Outcome,
  ReboundError,
  RetryStatus,
  type Job,
  type TlsOptions,
} from "../src/index.js";
import { join } from "node:path";
import { writeFileSync } from "node:fs";
import { Cluster, freePort, testCerts } from "./node.js";

const SERVICE = "tssdk";
let cluster: Cluster | undefined;
const clients: Client[] = [];

async function start(env: Record<string, string> = {}) {
  cluster ??= new Cluster();
  return cluster.start(env);
}

async function connect(address: string, token?: string): Promise<Client> {
  const c = await Client.connect(address, { token });
  clients.push(c);
  return c;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await cluster?.stop();
  cluster = undefined;
});

/** Runs ex until done() holds (failing after withinMs), then stops it and waits. */
async function runUntil(ex: Executor, done: () => boolean, withinMs = 30_000): Promise<void> {
  let failed: unknown;
  const running = ex.run().catch((e) => {
    failed = e;
  });
  const deadline = Date.now() + withinMs;
  try {
    while (!done()) {
      if (failed !== undefined) throw failed;
      if (Date.now() > deadline) throw new Error("timed out");
      await new Promise((ok) => setTimeout(ok, 50));
    }
  } finally {
    ex.stop();
    await running;
  }
  if (failed !== undefined) throw failed;
}

async function rejection(p: Promise<unknown>): Promise<ReboundError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ReboundError, `not a ReboundError: ${e}`);
    return e;
  }
  assert.fail("no error");
}

test("enqueue get cancel", async () => {
  const node = await start();
  const c = await connect(node.address);
  const e = await c.enqueue({
    service: SERVICE,
    transactionId: "tx-1",
    payload: "charge 7f3a",
    delayMs: 300_000,
    attributes: { tenant: "acme" },
    attempt: 2,
    lastError: "card processor timed out",
    policy: { maxAttempts: 8, initialBackoffMs: 30_000 },
  });
  assert.equal(e.transactionId, "tx-1");
  assert.equal(e.deduplicated, false);
  assert.ok(e.dueTime && e.dueTime.getTime() > Date.now());
  const r = await c.get(SERVICE, "tx-1");
  assert.equal(r.status, RetryStatus.SCHEDULED);
  assert.equal(r.attempt, 2);
  assert.equal(new TextDecoder().decode(r.payload), "charge 7f3a");
  assert.deepEqual(r.attributes, { tenant: "acme" });
  assert.equal(r.lastError, "card processor timed out");
  assert.equal(r.policy.maxAttempts, 8);
  assert.equal(r.policy.initialBackoffMs, 30_000);
  assert.deepEqual(await c.cancel(SERVICE, "tx-1"), { status: RetryStatus.CANCELLED, cancelled: true });
  assert.deepEqual(await c.cancel(SERVICE, "tx-1"), { status: RetryStatus.CANCELLED, cancelled: false });
});

test("deduplicated reenqueue", async () => {
  const node = await start();
  const c = await connect(node.address);
  const dueTime = new Date(Date.now() + 600_000);
  const first = await c.enqueue({ service: SERVICE, transactionId: "tx-dup", dueTime });
  const second = await c.enqueue({ service: SERVICE, transactionId: "tx-dup", dueTime });
  assert.equal(first.deduplicated, false);
  assert.equal(second.deduplicated, true);
  assert.equal((await c.get(SERVICE, "tx-dup")).enqueueCount, 2);
  const results = await c.enqueueBatch([
    { service: SERVICE, transactionId: "tx-dup", dueTime },
    { service: SERVICE, transactionId: "tx-new" },
  ]);
  assert.deepEqual(
    results.map((r) => (r instanceof ItemError ? "error" : r.deduplicated)),
    [true, false],
  );
});

test("bad input names field", async () => {
  const node = await start();
  const c = await connect(node.address);
  let e = await rejection(c.enqueue({ service: SERVICE, transactionId: "x".repeat(300) }));
  assert.equal(e.code, Code.InvalidArgument);
  assert.match(e.serverMessage, /transaction_id/);
  assert.match(e.serverMessage, /256/);
  assert.equal(e.retryable, false);
  e = await rejection(c.enqueue({ service: SERVICE, transactionId: "tx-bad", policy: { multiplier: 0.5 } }));
  assert.match(e.serverMessage, /multiplier/);
  e = await rejection(c.get(SERVICE, "tx-bad"));
  assert.equal(e.code, Code.NotFound);
  const results = await c.enqueueBatch([
    { service: "bad service!", transactionId: "tx-a" },
    { service: SERVICE, transactionId: "tx-b" },
  ]);
  assert.ok(results[0] instanceof ItemError);
  assert.equal(results[0].code, Code.InvalidArgument);
  assert.match(results[0].serverMessage, /service/);
  assert.ok(!(results[1] instanceof ItemError));
  await assert.rejects(
    c.enqueue({ service: SERVICE, transactionId: "tx-c", delayMs: 1, dueTime: new Date() }),
    TypeError,
  );
});

test("delivery and ack", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({
    service: SERVICE,
    transactionId: "tx-d",
    payload: "p",
    attributes: { k: "v" },
    delayMs: 0,
  });
  const jobs: Job[] = [];
  const ex = new Executor(node.address, SERVICE, (job) => {
    jobs.push(job);
    return Outcome.success();
  });
  await runUntil(ex, () => ex.acked >= 1);
  assert.equal(jobs.length, 1);
  const job = jobs[0]!;
  assert.equal(job.transactionId, "tx-d");
  assert.equal(new TextDecoder().decode(job.payload), "p");
  assert.deepEqual(job.attributes, { k: "v" });
  assert.equal(job.attempt, 2);
  assert.equal(job.node, node.address);
  assert.equal((await c.get(SERVICE, "tx-d")).status, RetryStatus.SUCCEEDED);
});

test("retry after reschedules", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({ service: SERVICE, transactionId: "tx-r", delayMs: 0 });
  const seen: [number, number][] = [];
  const ex = new Executor(node.address, SERVICE, (job) => {
    seen.push([job.attempt, Date.now()]);
    return seen.length === 1 ? Outcome.retry("busy", { afterMs: 2000 }) : Outcome.success();
  });
  await runUntil(ex, () => ex.acked >= 2);
  const [[a1, t1], [a2, t2]] = seen as [[number, number], [number, number]];
  assert.equal(a2, a1 + 1);
  assert.ok(t2 - t1 >= 2000, `${t2 - t1} ms between the attempts`);
  const r = await c.get(SERVICE, "tx-r");
  assert.equal(r.status, RetryStatus.SUCCEEDED);
  // attempt_history: each attempt, as its ack ended it.
  assert.deepEqual(
    r.attempts.map((a) => [a.attempt, a.outcome]),
    [
      [a1, AttemptOutcome.RETRY],
      [a2, AttemptOutcome.SUCCEEDED],
    ],
  );
  const first = r.attempts[0]!;
  assert.equal(first.error, "busy");
  assert.equal(first.retryAfterMs, 2000);
  assert.ok(first.executorId && first.nodeId && first.deliveredAt && first.endedAt);
  assert.equal(first.deliveries, 1);
  assert.equal(r.attempts[1]!.retryAfterMs, undefined);
  assert.equal(r.attemptsDropped, 0);
});

test("list filters and pages", async () => {
  const node = await start();
  const c = await connect(node.address);
  for (let i = 0; i < 7; i++) {
    await c.enqueue({
      service: "tslist",
      transactionId: `l-${i}`,
      delayMs: 3_600_000,
      attributes: { customer: i % 2 === 0 ? "42" : "7" },
      lastError: i < 3 ? "card declined" : "gateway: 503",
    });
  }
  const all: string[] = [];
  for await (const r of c.listRetries("tslist", { pageSize: 2 })) all.push(r.transactionId);
  assert.deepEqual(all.sort(), ["l-0", "l-1", "l-2", "l-3", "l-4", "l-5", "l-6"]);
  const mine = [];
  for await (const r of c.listRetries("tslist", {
    attributes: { customer: "42" },
    errorContains: "declined",
  }))
    mine.push(r);
  assert.deepEqual(mine.map((r) => r.transactionId).sort(), ["l-0", "l-2"]);
  assert.ok(mine.every((r) => r.status === RetryStatus.SCHEDULED && r.attempt === 1 && r.dueTime));
  // Other statuses: none of these is in flight or dead.
  const others = [];
  for await (const r of c.listRetries("tslist", { statuses: [RetryStatus.IN_FLIGHT, RetryStatus.DEAD] }))
    others.push(r);
  assert.deepEqual(others, []);
  await assert.rejects(
    async () => {
      for await (const _ of c.listRetries("tslist", { pageSize: 501 })) void _;
    },
    (e: unknown) => e instanceof ReboundError && e.code === Code.InvalidArgument,
  );
});

test("snooze uses no attempt", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({ service: SERVICE, transactionId: "tx-s", delayMs: 0, policy: { maxAttempts: 2 } });
  const attempts: number[] = [];
  const ex = new Executor(node.address, SERVICE, (job) => {
    attempts.push(job.attempt);
    return attempts.length < 3 ? Outcome.snooze(1000, "dependency in maintenance") : Outcome.success();
  });
  await runUntil(ex, () => ex.acked >= 3);
  assert.deepEqual(attempts, [2, 2, 2]);
  assert.equal((await c.get(SERVICE, "tx-s")).status, RetryStatus.SUCCEEDED);
});

test("dependency hold defers without using attempts", async () => {
  const node = await start();
  const c = await connect(node.address);
  const other = `${SERVICE}-other`;
  const gateway = "payments-gateway";
  const oneRetry = { maxAttempts: 2 };
  await c.enqueue({
    service: SERVICE,
    transactionId: "tx-h1",
    delayMs: 0,
    policy: oneRetry,
    dependency: gateway,
  });
  const seen: { tx: string; attempt: number; dependency: string; at: number }[] = [];
  const handler = async (job: Job) => {
    seen.push({ tx: job.transactionId, attempt: job.attempt, dependency: job.dependency, at: Date.now() });
    if (seen.length === 1) {
      // The first answer holds the gateway for 2 s; the second retry naming it is enqueued,
      // in another service, while the hold lasts.
      await c.enqueue({
        service: other,
        transactionId: "tx-h2",
        delayMs: 0,
        policy: oneRetry,
        dependency: gateway,
      });
      return Outcome.hold(2000, "503, Retry-After: 2");
    }
    return Outcome.success();
  };
  const ex = new Executor(node.address, SERVICE, handler);
  const otherEx = new Executor(node.address, other, handler);
  let otherFailed: unknown;
  const otherRunning = otherEx.run().catch((e) => {
    otherFailed = e;
  });
  try {
    await runUntil(ex, () => otherFailed !== undefined || (ex.acked >= 2 && otherEx.acked >= 1), 60_000);
  } finally {
    otherEx.stop();
    await otherRunning;
  }
  if (otherFailed !== undefined) throw otherFailed;
  const heldAt = seen[0]!.at;
  assert.equal(seen.filter((d) => d.tx === "tx-h1").length, 2, JSON.stringify(seen));
  // Nothing naming the gateway during the hold, and no attempt used by it.
  assert.ok(
    seen.slice(1).every((d) => d.at - heldAt >= 1900),
    JSON.stringify(seen),
  );
  assert.deepEqual(
    seen.map((d) => [d.attempt, d.dependency]),
    seen.map(() => [2, gateway]),
  );
  assert.equal((await c.get(SERVICE, "tx-h1")).status, RetryStatus.SUCCEEDED);
  assert.equal((await c.get(other, "tx-h2")).status, RetryStatus.SUCCEEDED);
});

test("compensation chain runs in reverse on exhaustion", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({
    service: "saga-orders",
    transactionId: "charge-1",
    attempt: 1,
    policy: { maxAttempts: 2, initialBackoffMs: 100 },
    delayMs: 0,
    // In the order they must run: the reverse of the steps they undo.
    compensations: [
      { service: "saga-undo", transactionId: "refund-1", payload: "refund charge-1" },
      { service: "saga-undo", transactionId: "release-1", payload: "release stock" },
    ],
  });
  const undone: [string, string][] = [];
  const orders = new Executor(node.address, "saga-orders", () => Outcome.retry("card declined"));
  const undo = new Executor(node.address, "saga-undo", (job) => {
    undone.push([job.transactionId, new TextDecoder().decode(job.payload)]);
    return Outcome.success();
  });
  let failed: unknown;
  const running = [orders, undo].map((ex) =>
    ex.run().catch((e) => {
      failed ??= e;
    }),
  );
  try {
    const deadline = Date.now() + 40_000;
    for (;;) {
      if (failed !== undefined) throw failed;
      const chain = (await c.get("saga-orders", "charge-1")).chain;
      if (chain && chain.compensations.every((m) => m.status === RetryStatus.SUCCEEDED)) break;
      assert.ok(Date.now() < deadline, `both compensations to succeed: ${JSON.stringify(undone)}`);
      await new Promise((ok) => setTimeout(ok, 100));
    }
    // Each ran once: nothing more arrives.
    await new Promise((ok) => setTimeout(ok, 3000));
  } finally {
    orders.stop();
    undo.stop();
    await Promise.all(running);
  }
  if (failed !== undefined) throw failed;
  assert.deepEqual(undone, [
    ["refund-1", "refund charge-1"],
    ["release-1", "release stock"],
  ]);
  const step = await c.get("saga-orders", "charge-1");
  assert.equal(step.status, RetryStatus.DEAD);
  assert.equal(step.attempt, 2);
  assert.equal(step.chain?.position, 0);
  assert.equal(step.chain?.compensations.length, 2);
  const last = await c.get("saga-undo", "release-1");
  assert.equal(last.chain?.sagaService, "saga-orders");
  assert.equal(last.chain?.sagaTransactionId, "charge-1");
  assert.equal(last.chain?.position, 2);
});

test("failed goes to dead letters", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({ service: SERVICE, transactionId: "tx-f", delayMs: 0 });
  const ex = new Executor(node.address, SERVICE, () =>
    Outcome.fail("card declined").withErrorClass("card.declined"),
  );
  await runUntil(ex, () => ex.acked >= 1);
  const r = await c.get(SERVICE, "tx-f");
  assert.equal(r.status, RetryStatus.DEAD);
  assert.equal(r.lastError, "card declined");
});

test("handler exception retries", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({ service: SERVICE, transactionId: "tx-e", delayMs: 0, policy: { initialBackoffMs: 0 } });
  const jobs: Job[] = [];
  const ex = new Executor(node.address, SERVICE, async (job) => {
    jobs.push(job);
    if (jobs.length === 1) throw new Error("inventory service unreachable");
  });
  await runUntil(ex, () => ex.acked >= 2);
  assert.equal(jobs[1]!.attempt, jobs[0]!.attempt + 1);
  assert.match(jobs[1]!.lastError, /Error: inventory service unreachable/);
  assert.equal((await c.get(SERVICE, "tx-e")).status, RetryStatus.SUCCEEDED);
});

test("two nodes one address", async () => {
  const a = await start();
  const b = await start();
  const n = 40;
  const ca = await connect(a.address);
  const cb = await connect(b.address);
  for (let i = 0; i < n; i++) {
    await (i % 2 === 0 ? ca : cb).enqueue({ service: SERVICE, transactionId: `tx-${i}`, delayMs: 0 });
  }
  const done = new Set<string>();
  const ex = new Executor(
    a.address,
    SERVICE,
    (job) => {
      done.add(job.transactionId);
    },
    { ringRefreshMs: 500 },
  );
  const both = [a.address, b.address].sort();
  await runUntil(ex, () => done.size === n && JSON.stringify(ex.nodes) === JSON.stringify(both), 60_000);
});

test("stop drains in flight", async () => {
  const node = await start();
  const c = await connect(node.address);
  for (let i = 0; i < 3; i++) await c.enqueue({ service: SERVICE, transactionId: `tx-${i}`, delayMs: 0 });
  const started = new Set<string>();
  const finished = new Set<string>();
  const ex = new Executor(
    node.address,
    SERVICE,
    async (job) => {
      started.add(job.transactionId);
      await new Promise((ok) => setTimeout(ok, 1500));
      finished.add(job.transactionId);
    },
    { concurrency: 3 },
  );
  const running = ex.run();
  const deadline = Date.now() + 30_000;
  while (started.size < 3) {
    assert.ok(Date.now() < deadline, "not all three started");
    await new Promise((ok) => setTimeout(ok, 20));
  }
  ex.stop();
  await running;
  assert.deepEqual([...finished].sort(), [...started].sort());
  assert.equal(ex.acked, 3);
  for (let i = 0; i < 3; i++) assert.equal((await c.get(SERVICE, `tx-${i}`)).status, RetryStatus.SUCCEEDED);
});

test("token refused and accepted", async () => {
  cluster = new Cluster();
  const node = await cluster.start({
    REBOUND_CREDENTIALS_FILE: cluster.credentials("payments", "s3cret", [SERVICE]),
  });
  for (const token of [undefined, "wrong"]) {
    const c = await connect(node.address, token);
    const e = await rejection(c.enqueue({ service: SERVICE, transactionId: "tx-t", delayMs: 0 }));
    assert.equal(e.code, Code.Unauthenticated);
  }
  const c = await connect(node.address, "s3cret");
  await c.enqueue({ service: SERVICE, transactionId: "tx-t", delayMs: 0 });
  const denied = await rejection(c.enqueue({ service: "other", transactionId: "tx-t" }));
  assert.equal(denied.code, Code.PermissionDenied);
  const refused = new Executor(node.address, SERVICE, () => Outcome.success(), { token: "wrong" });
  const e = await rejection(refused.run());
  assert.equal(e.code, Code.Unauthenticated);
  const ex = new Executor(node.address, SERVICE, () => Outcome.success(), { token: "s3cret" });
  await runUntil(ex, () => ex.acked >= 1);
});

test("long handler extends deadline", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({ service: SERVICE, transactionId: "tx-l", delayMs: 0, policy: { ackTimeoutMs: 1000 } });
  let deliveries = 0;
  const ex = new Executor(node.address, SERVICE, async () => {
    deliveries++;
    await new Promise((ok) => setTimeout(ok, 3500));
  });
  await runUntil(ex, () => ex.acked >= 1);
  const r = await c.get(SERVICE, "tx-l");
  assert.equal(deliveries, 1);
  assert.equal(r.status, RetryStatus.SUCCEEDED);
  assert.equal(r.deliveryCount, 1);
});

test("deliveries as an async iterator", async () => {
  const node = await start();
  const c = await connect(node.address);
  await c.enqueue({ service: SERVICE, transactionId: "tx-it", delayMs: 0 });
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), 30_000);
  let got: Job | undefined;
  for await (const job of c.deliveries(SERVICE, { signal: stop.signal })) {
    got = job;
    await c.ack(job, Outcome.success());
    break;
  }
  clearTimeout(timer);
  assert.equal(got?.transactionId, "tx-it");
  assert.equal((await c.get(SERVICE, "tx-it")).status, RetryStatus.SUCCEEDED);
});

test("tls mutual auth", async () => {
  const certs = testCerts();
  const creds = join(certs, "credentials.toml");
  writeFileSync(creds, `[[credential]]\nname = "sdk-client"\nservices = ["${SERVICE}"]\n`);
  const node = await start({
    REBOUND_TLS_CERT_FILE: join(certs, "node.pem"),
    REBOUND_TLS_KEY_FILE: join(certs, "node.key"),
    REBOUND_TLS_CLIENT_CA_FILE: join(certs, "ca.pem"),
    REBOUND_CREDENTIALS_FILE: creds,
  });
  const tls: TlsOptions = {
    caFile: join(certs, "ca.pem"),
    certFile: join(certs, "client.pem"),
    keyFile: join(certs, "client.key"),
  };
  const c = await Client.connect(node.address, { tls });
  clients.push(c);
  await c.enqueue({
    service: SERVICE,
    transactionId: "tx-tls",
    delayMs: 0,
    payload: new TextEncoder().encode("over tls"),
  });
  const payloads: string[] = [];
  const ex = new Executor(
    node.address,
    SERVICE,
    (job) => {
      payloads.push(new TextDecoder().decode(job.payload));
      return Outcome.success();
    },
    { tls },
  );
  await runUntil(ex, () => ex.acked >= 1);
  assert.deepEqual(payloads, ["over tls"]);
  assert.equal((await c.get(SERVICE, "tx-tls")).status, RetryStatus.SUCCEEDED);
  for (const ca of ["ca.pem", "other-ca.pem"]) {
    const refused = await Client.connect(node.address, { tls: { caFile: join(certs, ca) } });
    clients.push(refused);
    const e = await rejection(
      refused.enqueue({ service: SERVICE, transactionId: "tx-tls-refused", delayMs: 0 }),
    );
    // Connect for Node reports a handshake the node refused (the TLS 1.3 alert "certificate
    // required") as INTERNAL, an untrusted node certificate as UNAVAILABLE.
    assert.ok(
      [Code.Unavailable, Code.Internal].includes(e.code),
      `trusting ${ca}, without a client certificate: ${Code[e.code]} ${e.message}`,
    );
  }
});

/** `rebound_requests_shed_total{reason="inflight_bytes"}` on a node's /metrics. */
async function shedTotal(http: string): Promise<number> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const text = await (await fetch(`http://${http}/metrics`)).text();
      const m = /^rebound_requests_shed_total\{reason="inflight_bytes"\} (\S+)$/m.exec(text);
      return m ? Number(m[1]) : 0;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((ok) => setTimeout(ok, 100));
    }
  }
}

test("overload is shed and retried", async () => {
  const http = `127.0.0.1:${await freePort()}`;
  // Room for about one of the 0.85 MiB batches below at a time: the others are shed.
  const node = await start({
    REBOUND_MAX_PAYLOAD_BYTES: "16384",
    REBOUND_MAX_INFLIGHT_BYTES: "7200000",
    REBOUND_HTTP_LISTEN: http,
  });
  const c = await connect(node.address);
  const payload = new Uint8Array(16384).fill(120);
  let round = 0;
  for (; round < 5; round++) {
    const batches = Array.from({ length: 8 }, (_, b) =>
      Array.from({ length: 50 }, (_, i) => ({
        service: SERVICE,
        transactionId: `tx-${round}-${b}-${i}`,
        payload,
        delayMs: 600_000,
      })),
    );
    // Every batch goes through, the shed ones made again by the client.
    for (const results of await Promise.all(batches.map((b) => c.enqueueBatch(b)))) {
      assert.equal(results.length, 50);
      assert.deepEqual(
        results.filter((r) => r instanceof ItemError),
        [],
      );
    }
    if ((await shedTotal(http)) > 0) break;
  }
  assert.ok((await shedTotal(http)) > 0, "8 batches at once against room for one: some were shed");
  for (const tx of [`tx-${round}-0-0`, `tx-${round}-7-49`]) {
    const r = await c.get(SERVICE, tx);
    assert.equal(r.status, RetryStatus.SCHEDULED);
    assert.deepEqual(r.payload, payload);
  }
});
