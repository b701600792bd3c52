// scripts/sdk-roundtrip typescript ADDR SERVICE N: enqueue N retries due in about a second, run
// an executor until all N are acknowledged, print the counts (exit 0), or exit 1 after
// ROUNDTRIP_TIMEOUT seconds (default 120). REBOUND_TOKEN is sent when set.
import { Client, Executor, ItemError, Outcome } from "../src/index.js";

const [address, service, count] = process.argv.slice(2);
if (!address || !service || !count) {
  console.error("usage: roundtrip ADDR SERVICE N");
  process.exit(2);
}
const n = Number(count);
const token = process.env.REBOUND_TOKEN || undefined;
const limitMs = Number(process.env.ROUNDTRIP_TIMEOUT ?? "120") * 1000;
const prefix = `roundtrip-${Date.now().toString(16)}-`;

const client = await Client.connect(address, { token });
let enqueued = 0;
for (let start = 0; start < n; start += 500) {
  const batch = [];
  for (let i = start; i < Math.min(n, start + 500); i++) {
    batch.push({ service, transactionId: `${prefix}${i}`, payload: "x", delayMs: 1000 });
  }
  const results = await client.enqueueBatch(batch);
  enqueued += results.filter((r) => !(r instanceof ItemError)).length;
}
client.close();

const delivered = new Set<string>();
const executor = new Executor(
  address,
  service,
  (job) => {
    if (job.transactionId.startsWith(prefix)) delivered.add(job.transactionId);
    return Outcome.success();
  },
  { concurrency: 64, token },
);
const running = executor.run();
const deadline = Date.now() + limitMs;
while ((delivered.size < n || executor.acked < n) && Date.now() < deadline) {
  await new Promise((ok) => setTimeout(ok, 50));
}
executor.stop();
await running;
console.log(`roundtrip: ${enqueued} enqueued, ${delivered.size} delivered, ${executor.acked} acked`);
process.exit(enqueued === n && delivered.size === n && executor.acked >= n ? 0 : 1);
