import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { createClient, type Client as ConnectClient } from "@connectrpc/connect";
import { hostname } from "node:os";
import { ExecutorService, type AckRequest } from "./gen/rebound/v1/executor_pb.js";
import { dateOf } from "./time.js";
import { jobOf, Outcome, type Job } from "./job.js";
import { Code, ReboundError, isRetryableCode } from "./errors.js";
import { shedAware } from "./overload.js";
import { Channel, overloadRetries, type ConnectionOptions } from "./transport.js";

/** Subscribe failures that retrying cannot fix: `run()` rejects with them. */
const FATAL = new Set([
  Code.InvalidArgument,
  Code.Unimplemented,
  Code.Unauthenticated,
  Code.PermissionDenied,
]);
const MAX_ACK_BATCH = 500;
const ACK_CALLS = 4;
const RPC_TIMEOUT_MS = 10_000;

/**
 * Runs one job. It may return an Outcome (nothing means success); a thrown error becomes RETRY
 * with its message. `signal` aborts when the drain timeout passes.
 */
export type Handler = (job: Job, signal: AbortSignal) => Promise<Outcome | void> | Outcome | void;

export interface ExecutorOptions extends ConnectionOptions {
  /** Handlers at once across all nodes, and each stream's max_in_flight (default 16). */
  concurrency?: number;
  executorId?: string;
  /** Subscribe to every node GetRing lists (default true). */
  followRing?: boolean;
  /** How often the ring is asked again, jittered (default 5000 ms). */
  ringRefreshMs?: number;
  /** How long stop() lets running handlers finish and ack (default 30 000 ms). */
  drainTimeoutMs?: number;
}

/** Full-jitter exponential backoff: uniform in [0, min(5 s, 100 ms * 2^attempt)]. */
export function backoffMs(attempt: number): number {
  return Math.random() * Math.min(5000, 100 * 2 ** Math.min(attempt, 30));
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

class Semaphore {
  private waiting: (() => void)[] = [];
  constructor(private permits: number) {}
  async acquire(): Promise<void> {
    if (this.permits > 0) {
      this.permits--;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }
  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.permits++;
  }
}

type ExecutorClient = ConnectClient<typeof ExecutorService>;

/** Sends one node's acks: one Ack when alone, AckBatch for those that queued meanwhile. */
class Acker {
  private queue: AckRequest[] = [];
  private inFlight = 0;
  private closed = false;
  private idle: (() => void)[] = [];
  acked = 0;
  refused = 0;

  constructor(
    private readonly client: ExecutorClient,
    private readonly overloadRetries: number,
  ) {}

  put(ack: AckRequest): void {
    if (this.closed) return; // after the drain: the node redelivers it
    this.queue.push(ack);
    this.pump();
  }

  private pump(): void {
    while (this.queue.length > 0 && this.inFlight < ACK_CALLS) {
      const batch = this.queue.splice(0, MAX_ACK_BATCH);
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
    if (this.queue.length === 0 && this.inFlight === 0) {
      for (const f of this.idle.splice(0)) f();
    }
  }

  private async send(batch: AckRequest[]): Promise<void> {
    const bound = { retries: this.overloadRetries };
    for (let attempt = 0; ; attempt++) {
      try {
        if (batch.length === 1) {
          await shedAware(() => this.client.ack(batch[0]!, { timeoutMs: RPC_TIMEOUT_MS }), bound);
          this.acked++;
        } else {
          const r = await shedAware(
            () => this.client.ackBatch({ acks: batch }, { timeoutMs: RPC_TIMEOUT_MS }),
            bound,
          );
          for (const item of r.results) {
            if (item.result.case === "response") this.acked++;
            else this.refused++;
          }
        }
        return;
      } catch (e) {
        const err = ReboundError.from(e);
        // A shed ack (RESOURCE_EXHAUSTED) was already made again after the node's hint.
        if (isRetryableCode(err.code) && err.code !== Code.ResourceExhausted && attempt < 5) {
          await sleep(backoffMs(attempt));
          continue;
        }
        // NOT_FOUND / FAILED_PRECONDITION: the delivery went to another executor.
        this.refused += batch.length;
        return;
      }
    }
  }

  /** Sends what is queued, waits for the calls out. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.queue.length === 0 && this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }
}

class NodeSubscription {
  readonly client: ExecutorClient;
  readonly acker: Acker;
  readonly stream = new AbortController();
  retiring = false;
  held = 0;
  task: Promise<void> = Promise.resolve();
  private idle: (() => void)[] = [];

  constructor(
    readonly address: string,
    readonly channel: Channel,
    overloadRetries: number,
  ) {
    this.client = createClient(ExecutorService, channel.transport);
    this.acker = new Acker(this.client, overloadRetries);
  }

  take(): void {
    this.held++;
  }
  done(): void {
    this.held--;
    if (this.held === 0) for (const f of this.idle.splice(0)) f();
  }
  async drained(): Promise<void> {
    if (this.held === 0) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }
}

/**
 * Runs a handler for every due retry of a service: subscribes to every node of the ring,
 * bounds concurrency, extends long handlers' deadlines, batches acks, reconnects with
 * jittered backoff, and drains on stop().
 */
export class Executor {
  readonly executorId: string;
  private readonly concurrency: number;
  private readonly overloadRetries: number;
  private readonly nodesByAddress = new Map<string, NodeSubscription>();
  private readonly handlers = new Set<Promise<void>>();
  private readonly stopping = new AbortController();
  private readonly aborting = new AbortController();
  private sem: Semaphore;
  private fatal: ReboundError | undefined;
  private ackedGone = 0;
  private deliveredCount = 0;

  constructor(
    readonly address: string,
    readonly service: string,
    private readonly handler: Handler,
    private readonly options: ExecutorOptions = {},
  ) {
    this.concurrency = options.concurrency ?? 16;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) {
      throw new RangeError("executor concurrency must be at least 1");
    }
    this.overloadRetries = overloadRetries(options);
    this.executorId =
      options.executorId ??
      `${hostname()}-${process.pid}-${Math.floor(Math.random() * 0x10000).toString(16)}`;
    this.sem = new Semaphore(this.concurrency);
  }

  /** Deliveries received so far. */
  get delivered(): number {
    return this.deliveredCount;
  }
  /** Acks the nodes accepted so far. */
  get acked(): number {
    let n = this.ackedGone;
    for (const s of this.nodesByAddress.values()) n += s.acker.acked;
    return n;
  }
  /** The addresses subscribed to now. */
  get nodes(): string[] {
    return [...this.nodesByAddress.values()]
      .filter((n) => !n.retiring)
      .map((n) => n.address)
      .sort();
  }

  /** No new handler starts; running ones finish and ack; then run() resolves. */
  stop(): void {
    this.stopping.abort();
  }

  /**
   * Runs until stop(). Rejects with a ReboundError when Subscribe fails in a way retrying
   * cannot fix (INVALID_ARGUMENT, UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED), after
   * draining.
   */
  async run(): Promise<void> {
    const seed = await Channel.open(this.address, this.options, false);
    const seedClient = createClient(ExecutorService, seed.transport);
    try {
      await this.refresh(seedClient);
      const ring = this.options.followRing === false ? Promise.resolve() : this.follow(seedClient);
      await new Promise<void>((resolve) => {
        if (this.stopping.signal.aborted) resolve();
        else this.stopping.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      await ring;
    } finally {
      this.stopping.abort();
      await this.drain();
      seed.close();
    }
    if (this.fatal) throw this.fatal;
  }

  private async ring(client: ExecutorClient): Promise<string[] | undefined> {
    try {
      const r = await client.getRing({}, { timeoutMs: RPC_TIMEOUT_MS });
      const addrs = [...new Set(r.nodes.map((n) => n.address).filter((a) => a !== ""))].sort();
      return addrs.length > 0 ? addrs : undefined;
    } catch {
      return undefined;
    }
  }

  private async refresh(seed: ExecutorClient): Promise<void> {
    let addrs = this.options.followRing === false ? undefined : await this.ring(seed);
    if (addrs === undefined && this.options.followRing !== false) {
      for (const n of this.nodesByAddress.values()) {
        if (!n.retiring && (addrs = await this.ring(n.client)) !== undefined) break;
      }
    }
    if (addrs === undefined) {
      if (this.nodesByAddress.size > 0) return; // a failed GetRing leaves things as they are
      addrs = [this.address];
    }
    for (const a of addrs) {
      if (!this.nodesByAddress.has(a) && !this.stopping.signal.aborted) await this.subscribe(a);
    }
    for (const [a, n] of this.nodesByAddress) {
      if (!addrs.includes(a) && !n.retiring) {
        n.retiring = true;
        void this.retire(n);
      }
    }
  }

  private async follow(seed: ExecutorClient): Promise<void> {
    const every = this.options.ringRefreshMs ?? 5000;
    while (!this.stopping.signal.aborted) {
      await sleep(every * (0.8 + 0.4 * Math.random()), this.stopping.signal);
      if (!this.stopping.signal.aborted) await this.refresh(seed);
    }
  }

  private async subscribe(address: string): Promise<void> {
    const channel = await Channel.open(address, this.options, false);
    const node = new NodeSubscription(address, channel, this.overloadRetries);
    this.nodesByAddress.set(address, node);
    node.task = this.subscription(node);
  }

  private async retire(node: NodeSubscription): Promise<void> {
    await node.drained();
    await node.acker.close();
    node.stream.abort();
    await node.task;
    node.channel.close();
    if (this.nodesByAddress.get(node.address) === node) {
      this.nodesByAddress.delete(node.address);
      this.ackedGone += node.acker.acked;
    }
  }

  private async subscription(node: NodeSubscription): Promise<void> {
    let attempt = 0;
    const request = { service: this.service, executorId: this.executorId, maxInFlight: this.concurrency };
    while (!this.stopping.signal.aborted && !node.retiring) {
      try {
        for await (const d of node.client.subscribe(request, { signal: node.stream.signal, timeoutMs: 0 })) {
          attempt = 0;
          if (this.stopping.signal.aborted || node.retiring) continue; // redelivered once closed
          const received = Date.now();
          node.take();
          this.deliveredCount++;
          await this.sem.acquire();
          if (this.stopping.signal.aborted) {
            this.sem.release();
            node.done();
            continue;
          }
          const p = this.handle(node, jobOf(d, node.address), received);
          this.handlers.add(p);
          void p.finally(() => this.handlers.delete(p));
        }
      } catch (e) {
        if (node.stream.signal.aborted) return;
        const err = ReboundError.from(e);
        if (FATAL.has(err.code)) {
          this.fatal ??= err;
          this.stop();
          return;
        }
      }
      if (node.stream.signal.aborted) return;
      attempt++;
      await sleep(backoffMs(attempt), this.stopping.signal);
    }
  }

  private async handle(node: NodeSubscription, job: Job, received: number): Promise<void> {
    const extension = new AbortController();
    const extending = this.keepExtended(node, job, received, extension.signal);
    let outcome: Outcome;
    try {
      const o = await this.handler(job, this.aborting.signal);
      outcome =
        o === undefined
          ? Outcome.success()
          : o instanceof Outcome
            ? o
            : Outcome.retry("handler returned no Outcome");
    } catch (e) {
      outcome = Outcome.retry(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
    } finally {
      extension.abort();
      this.sem.release();
    }
    await extending;
    node.acker.put(outcome.toAck(job.deliveryId));
    node.done();
  }

  /** ExtendDeadline when half of the time left has passed, by the observed ack timeout. */
  private async keepExtended(
    node: NodeSubscription,
    job: Job,
    received: number,
    signal: AbortSignal,
  ): Promise<void> {
    if (!job.ackDeadline) return;
    let deadline = job.ackDeadline.getTime();
    const span = Math.max(1000, deadline - received);
    while (!signal.aborted) {
      await sleep(Math.max(50, (deadline - Date.now()) / 2), signal);
      if (signal.aborted) return;
      try {
        // A shed extension is made again, but not past the deadline it would extend.
        const r = await shedAware(
          () =>
            node.client.extendDeadline(
              { deliveryId: job.deliveryId, extension: durationFromMs(span) },
              { timeoutMs: RPC_TIMEOUT_MS },
            ),
          { retries: this.overloadRetries, deadline, signal },
        );
        const next = dateOf(r.ackDeadline);
        if (next) deadline = next.getTime();
      } catch (e) {
        if (!isRetryableCode(ReboundError.from(e).code) || Date.now() > deadline) return;
      }
    }
  }

  private async drain(): Promise<void> {
    const timeout = this.options.drainTimeoutMs ?? 30_000;
    if (this.handlers.size > 0) {
      const all = Promise.allSettled([...this.handlers]);
      const cut = new AbortController();
      const finished = await Promise.race([
        all.then(() => true),
        sleep(timeout, cut.signal).then(() => false),
      ]);
      cut.abort();
      if (!finished) {
        this.aborting.abort();
        const grace = new AbortController();
        await Promise.race([all, sleep(1000, grace.signal)]);
        grace.abort();
      }
    }
    const nodes = [...this.nodesByAddress.values()];
    await Promise.all(nodes.map((n) => n.acker.close()));
    for (const n of nodes) n.stream.abort();
    await Promise.all(nodes.map((n) => n.task));
    for (const n of nodes) n.channel.close();
  }
}
