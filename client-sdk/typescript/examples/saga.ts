// A three-step order saga: reserve stock (done), charge the card (always declined here), ship
// (never reached). The charge is retried three times; then its compensations run in reverse
// order of the steps: void the card authorisation, then release the stock, each once.
//
//   npm run saga -- 127.0.0.1:50051        (from client-sdk/typescript)
import { randomBytes } from "node:crypto";
import { Client, Executor, Outcome, RetryStatus, type Job } from "../src/index.js";

const address = process.argv[2] ?? "127.0.0.1:50051";
const client = await Client.connect(address);
const order = `order-${randomBytes(4).toString("hex")}`;
// Step 1 reserved the stock; step 2, the charge, failed: retry it, and name what undoes the
// steps before it, in the order to run them.
await client.enqueue({
  service: "checkout",
  transactionId: `${order}/charge`,
  payload: JSON.stringify({ order, cents: 1200 }),
  lastError: "card network timeout",
  policy: { maxAttempts: 3, initialBackoffMs: 200 },
  delayMs: 0,
  compensations: [
    { service: "checkout", transactionId: `${order}/void-authorisation` },
    { service: "stock", transactionId: `${order}/release`, payload: order },
  ],
});

// Each service's executor: the charge is declined every time; a compensation succeeds.
const ran: string[] = [];
const handler = (job: Job): Outcome => {
  if (job.transactionId.endsWith("/charge")) {
    console.log(`charge attempt ${job.attempt}: declined`);
    return Outcome.retry("card declined");
  }
  console.log(`compensating: ${job.transactionId}`);
  ran.push(job.transactionId);
  return Outcome.success();
};
const executors = ["checkout", "stock"].map((service) => new Executor(address, service, handler));
const running = Promise.all(executors.map((e) => e.run()));
running.catch(() => {}); // awaited below, after the executors are stopped

try {
  // Wait until the charge's chain says every compensation succeeded.
  const deadline = Date.now() + 60_000;
  for (;;) {
    const charge = await client.get("checkout", `${order}/charge`);
    if (!charge.chain) throw new Error("the charge carries its compensations");
    if (charge.chain.compensations.every((c) => c.status === RetryStatus.SUCCEEDED)) {
      console.log(`charge ${RetryStatus[charge.status]} after ${charge.attempt} attempts; saga compensated`);
      break;
    }
    if (Date.now() > deadline) throw new Error("the saga did not finish");
    await new Promise((ok) => setTimeout(ok, 200));
  }
} finally {
  for (const e of executors) e.stop();
  await running;
  client.close();
}
// In order, each once.
const expected = [`${order}/void-authorisation`, `${order}/release`];
if (JSON.stringify(ran) !== JSON.stringify(expected)) {
  throw new Error(`compensations ran ${JSON.stringify(ran)}, expected ${JSON.stringify(expected)}`);
}
