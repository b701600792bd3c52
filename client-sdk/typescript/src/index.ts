/**
 * TypeScript client and executor for Rebound, retry-as-a-service over gRPC (Node 20+, ESM).
 *
 * ```ts
 * import { Client, Executor, Outcome } from "@rebound/client";
 *
 * const client = await Client.connect("127.0.0.1:50051");
 * await client.enqueue({ service: "payments", transactionId: "charge-7f3a", delayMs: 30_000 });
 *
 * const executor = new Executor("127.0.0.1:50051", "payments", async (job) => Outcome.success());
 * await executor.run(); // until executor.stop()
 * ```
 *
 * The generated messages and service descriptors are under `@rebound/client/gen/rebound/v1/*_pb`.
 */
export {
  AttemptOutcome,
  Client,
  RetryStatus,
  type Attempt,
  type Chain,
  type ChainStep,
  type Compensation,
  type Enqueued,
  type EnqueueRequest,
  type ListFilter,
  type Retry,
  type RetrySummary,
  type RetryPolicy,
} from "./client.js";
export { Code, ItemError, ReboundError } from "./errors.js";
export { Executor, backoffMs, type ExecutorOptions, type Handler } from "./executor.js";
export { Outcome, type Job } from "./job.js";
export type { ConnectionOptions, TlsOptions } from "./transport.js";
