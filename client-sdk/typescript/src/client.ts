import { create } from "@bufbuild/protobuf";
import { durationFromMs, durationMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createClient, type CallOptions, type Client as ConnectClient } from "@connectrpc/connect";
import {
  EnqueueRetryBatchRequestSchema,
  EnqueueRetryRequestSchema,
  RetryService,
  type EnqueueRetryRequest,
  type EnqueueRetryResponse,
} from "./gen/rebound/v1/retry_pb.js";
import {
  AttemptOutcome,
  CompensationSchema,
  RetryPolicySchema,
  RetryStatus,
  type Attempt as AttemptMessage,
  type Compensation as CompensationMessage,
  type CompensationChain,
  type Retry as RetryMessage,
  type RetryPolicy as PolicyMessage,
} from "./gen/rebound/v1/types_pb.js";
import { ExecutorService } from "./gen/rebound/v1/executor_pb.js";
import { ItemError, ReboundError } from "./errors.js";
import { jobOf, type Job, type Outcome } from "./job.js";
import { shedAware } from "./overload.js";
import { dateOf } from "./time.js";
import { Channel, overloadRetries, type ConnectionOptions } from "./transport.js";

export { AttemptOutcome, RetryStatus };

/**
 * Overrides of the service's retry policy; an unset field keeps the service's (then the
 * node's) default: 1 s initial backoff, x2, +/-20 % jitter, 5 attempts, 30 s ack timeout.
 * Durations are in milliseconds.
 */
export interface RetryPolicy {
  maxAttempts?: number;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  multiplier?: number;
  jitter?: number;
  maxRetryDurationMs?: number;
  ackTimeoutMs?: number;
  maxDeliveriesPerAttempt?: number;
  nonRetryableErrorClasses?: string[];
  unlimitedAttempts?: boolean;
}

export function policyToProto(p: RetryPolicy): PolicyMessage {
  const d = (ms?: number) => (ms === undefined ? undefined : durationFromMs(ms));
  return create(RetryPolicySchema, {
    maxAttempts: p.maxAttempts,
    initialBackoff: d(p.initialBackoffMs),
    maxBackoff: d(p.maxBackoffMs),
    multiplier: p.multiplier,
    jitter: p.jitter,
    maxRetryDuration: d(p.maxRetryDurationMs),
    ackTimeout: d(p.ackTimeoutMs),
    maxDeliveriesPerAttempt: p.maxDeliveriesPerAttempt,
    nonRetryableErrorClasses: p.nonRetryableErrorClasses ?? [],
    unlimitedAttempts: p.unlimitedAttempts,
  });
}

export function policyFromProto(p: PolicyMessage | undefined): RetryPolicy {
  if (!p) return {};
  const d = (x?: { seconds: bigint; nanos: number }) =>
    x === undefined ? undefined : durationMs(x as Parameters<typeof durationMs>[0]);
  return {
    maxAttempts: p.maxAttempts,
    initialBackoffMs: d(p.initialBackoff),
    maxBackoffMs: d(p.maxBackoff),
    multiplier: p.multiplier,
    jitter: p.jitter,
    maxRetryDurationMs: d(p.maxRetryDuration),
    ackTimeoutMs: d(p.ackTimeout),
    maxDeliveriesPerAttempt: p.maxDeliveriesPerAttempt,
    nonRetryableErrorClasses: [...p.nonRetryableErrorClasses],
    unlimitedAttempts: p.unlimitedAttempts,
  };
}

/** One retry to schedule: `delayMs` or `dueTime` (not both); neither: the policy's backoff. */
export interface EnqueueRequest {
  service: string;
  transactionId: string;
  payload?: Uint8Array | string;
  delayMs?: number;
  dueTime?: Date;
  policy?: RetryPolicy;
  attributes?: Record<string, string>;
  /** Attempts the caller already made (default 1). */
  attempt?: number;
  lastError?: string;
  /**
   * The downstream dependency the retry waits on (e.g. "payments-gateway"): while it is held
   * (a handler's `Outcome.hold`, or AdminService.HoldDependency), no retry naming it is
   * delivered, in any service, and none uses an attempt.
   */
  dependency?: string;
  /**
   * The compensations of this saga step, in the order they must run (usually the reverse of the
   * steps they undo). When the retry ends DEAD (attempts or duration exhausted, FAILED, a
   * non-retryable class), Rebound enqueues the first, and each next one only after the one
   * before it was acknowledged SUCCEEDED; none run when it ends SUCCEEDED or CANCELLED. At most
   * 32, with at most `REBOUND_MAX_PAYLOAD_BYTES` of payloads in all.
   */
  compensations?: Compensation[];
  /** The W3C trace context of the failed call, when it is not the current one. */
  traceparent?: string;
  tracestate?: string;
}

/**
 * A compensation of a saga step ({@link EnqueueRequest.compensations}): a retry of its own, of
 * `service` with the idempotency key `transactionId`, which that service's executors run like
 * any other delivery (so its handler must be idempotent). Unless its `policy` says otherwise,
 * it is retried with unlimited attempts for at most 24 hours, then dead-lettered.
 */
export interface Compensation {
  service: string;
  transactionId: string;
  /** Opaque bytes handed to the compensation's executor (a string is sent as UTF-8). */
  payload?: Uint8Array | string;
  attributes?: Record<string, string>;
  /** Overrides of the compensation service's policy. */
  policy?: RetryPolicy;
}

/** Where a compensation chain stands ({@link Retry.chain}), as read when `get` answered. */
export interface Chain {
  /** The saga step whose retry ended DEAD and started the chain. */
  sagaService: string;
  sagaTransactionId: string;
  /** The retry's place in the chain: 0 for the step itself, k for the k-th compensation. */
  position: number;
  /** Every compensation of the chain, in order. */
  compensations: ChainStep[];
}

/** One compensation of a {@link Chain}. */
export interface ChainStep {
  service: string;
  transactionId: string;
  /** undefined: not enqueued yet (or its record has expired). */
  status: RetryStatus | undefined;
}

function bytes(payload: Uint8Array | string | undefined): Uint8Array {
  return typeof payload === "string" ? new TextEncoder().encode(payload) : (payload ?? new Uint8Array());
}

export function compensationToProto(c: Compensation): CompensationMessage {
  return create(CompensationSchema, {
    service: c.service,
    transactionId: c.transactionId,
    payload: bytes(c.payload),
    attributes: c.attributes ?? {},
    policy: c.policy ? policyToProto(c.policy) : undefined,
  });
}

export function chainFromProto(c: CompensationChain | undefined): Chain | undefined {
  if (!c) return undefined;
  return {
    sagaService: c.sagaService,
    sagaTransactionId: c.sagaTransactionId,
    position: c.position,
    compensations: c.compensations.map((m) => ({
      service: m.service,
      transactionId: m.transactionId,
      status: m.status === RetryStatus.UNSPECIFIED ? undefined : m.status,
    })),
  };
}

export function enqueueToProto(r: EnqueueRequest): EnqueueRetryRequest {
  if (r.delayMs !== undefined && r.dueTime !== undefined) {
    throw new TypeError("enqueue: set delayMs or dueTime, not both");
  }
  return create(EnqueueRetryRequestSchema, {
    service: r.service,
    transactionId: r.transactionId,
    payload: bytes(r.payload),
    attributes: r.attributes ?? {},
    attempt: r.attempt ?? 1,
    lastError: r.lastError ?? "",
    dependency: r.dependency ?? "",
    compensations: (r.compensations ?? []).map(compensationToProto),
    policy: r.policy ? policyToProto(r.policy) : undefined,
    schedule:
      r.delayMs !== undefined
        ? { case: "delay", value: durationFromMs(r.delayMs) }
        : r.dueTime !== undefined
          ? { case: "dueTime", value: timestampFromDate(r.dueTime) }
          : { case: undefined },
    traceContext: r.traceparent ? { traceparent: r.traceparent, tracestate: r.tracestate ?? "" } : undefined,
  });
}

export interface Enqueued {
  transactionId: string;
  /** When the retry first becomes eligible for delivery (the end of its window). */
  dueTime: Date | undefined;
  generation: bigint;
  /** True when the transaction was already pending and this call rescheduled or confirmed it. */
  deduplicated: boolean;
}

function enqueued(r: EnqueueRetryResponse): Enqueued {
  return {
    transactionId: r.transactionId,
    dueTime: dateOf(r.dueTime),
    generation: r.generation,
    deduplicated: r.deduplicated,
  };
}

/** One attempt of a retry (`Retry.attempts`). */
export interface Attempt {
  /** Its number: the `Delivery.attempt` it was delivered with. */
  attempt: number;
  deliveredAt: Date | undefined;
  endedAt: Date | undefined;
  /** How long the executor took. */
  durationMs: number;
  /** The node that delivered it, and the executor it went to (`push` for a push target). */
  nodeId: string;
  executorId: string;
  outcome: AttemptOutcome;
  /** The ack's error (its first 512 bytes) and error class. */
  error: string;
  errorClass: string;
  /** The `retry_after` the ack asked for; undefined: none. */
  retryAfterMs: number | undefined;
  /** Deliveries the attempt took (more than 1 after expired ack deadlines). */
  deliveries: number;
}

export function attemptFromProto(a: AttemptMessage): Attempt {
  return {
    attempt: a.attempt,
    deliveredAt: dateOf(a.deliveredAt),
    endedAt: dateOf(a.endedAt),
    durationMs: a.duration ? durationMs(a.duration) : 0,
    nodeId: a.nodeId,
    executorId: a.executorId,
    outcome: a.outcome,
    error: a.error,
    errorClass: a.errorClass,
    retryAfterMs: a.retryAfter ? durationMs(a.retryAfter) : undefined,
    deliveries: a.deliveries,
  };
}

/** What `listRetries` filters on; every field given must match. */
export interface ListFilter {
  /**
   * Which retries, listed in this order: `RetryStatus.SCHEDULED` (when none are given: these
   * alone), `RetryStatus.IN_FLIGHT` (delivered and awaiting their ack, on any node),
   * `RetryStatus.DEAD`, `RetryStatus.SUCCEEDED` and `RetryStatus.CANCELLED` (in the order they
   * finished).
   */
  statuses?: RetryStatus[];
  /** Every one of these attributes, with these values. */
  attributes?: Record<string, string>;
  /** A substring of the last error. */
  errorContains?: string;
  dependency?: string;
  /** A saga's step (by its own id) and its compensations. */
  sagaTransactionId?: string;
  /** Due at or after, and before. */
  dueAfter?: Date;
  dueBefore?: Date;
  /** Rows per call, 1-500 (default 100). */
  pageSize?: number;
}

/** One retry of a listing; `get` gives the rest. */
export interface RetrySummary {
  transactionId: string;
  status: RetryStatus;
  attempt: number;
  dueTime: Date | undefined;
  lastError: string;
  dependency: string;
  /** Its place in a compensation chain (0: a saga step or none), and the chain's step. */
  chainPosition: number;
  sagaTransactionId: string;
  enqueueCount: number;
  deliveryCount: number;
  attributes: Record<string, string>;
}

/** The state of one retry, as GetRetry returns it (`raw`: the whole message). */
export interface Retry {
  service: string;
  transactionId: string;
  status: RetryStatus;
  attempt: number;
  generation: bigint;
  dueTime: Date | undefined;
  lastError: string;
  payload: Uint8Array;
  attributes: Record<string, string>;
  policy: RetryPolicy;
  firstEnqueuedAt: Date | undefined;
  lastEnqueuedAt: Date | undefined;
  updatedAt: Date | undefined;
  enqueueCount: number;
  deliveryCount: number;
  /**
   * For a saga step or a compensation: where its compensation chain stands (undefined: the
   * retry is neither). The compensations still to run after it are in `raw.compensations`.
   */
  chain: Chain | undefined;
  /** What each attempt did, oldest first: the first and the most recent, 10 in all. */
  attempts: Attempt[];
  /** Attempts left out between the first and the rest. */
  attemptsDropped: number;
  raw: RetryMessage;
}

/**
 * A client of a node's RetryService (or of a load balancer in front of several). A call the
 * node sheds under load (RESOURCE_EXHAUSTED) is made again after the node's hint, up to
 * `overloadRetries` times and within the call's `timeoutMs` (see {@link ConnectionOptions}).
 */
export class Client {
  private constructor(
    private readonly channel: Channel,
    private readonly retry: ConnectClient<typeof RetryService>,
    private readonly executor: ConnectClient<typeof ExecutorService>,
    private readonly address: string,
    private readonly timeoutMs: number,
    private readonly overloadRetries: number,
  ) {}

  /** Connects to `address` (`host:port`, `http://` or `https://`). */
  static async connect(address: string, options: ConnectionOptions = {}): Promise<Client> {
    const retries = overloadRetries(options);
    const channel = await Channel.open(address, options, true);
    return new Client(
      channel,
      createClient(RetryService, channel.transport),
      createClient(ExecutorService, channel.transport),
      address,
      options.timeoutMs ?? 30_000,
      retries,
    );
  }

  /** `call(options)`, made again while the node sheds it, within the timeout; throws ReboundError. */
  private async call<T>(call: (options: CallOptions) => Promise<T>): Promise<T> {
    // A timeout of 0 or less: none (as Connect has it).
    const deadline = this.timeoutMs > 0 ? Date.now() + this.timeoutMs : undefined;
    const options = (): CallOptions =>
      deadline === undefined ? {} : { timeoutMs: Math.max(1, deadline - Date.now()) };
    try {
      return await shedAware(() => call(options()), { retries: this.overloadRetries, deadline });
    } catch (e) {
      throw ReboundError.from(e);
    }
  }

  /**
   * The due retries of `service` that this one node dispatches, as an async iterator; ack each
   * with {@link Client.ack}. The {@link Executor} does this for every node of the ring, with
   * bounded concurrency, deadline extension and reconnects: prefer it unless you need the raw
   * stream. End the iteration with `break` or the `signal`.
   */
  async *deliveries(
    service: string,
    options: { executorId?: string; maxInFlight?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<Job> {
    const stream = this.executor.subscribe(
      {
        service,
        executorId: options.executorId ?? `ts-${process.pid}`,
        maxInFlight: options.maxInFlight ?? 16,
      },
      { signal: options.signal, timeoutMs: 0 },
    );
    try {
      for await (const d of stream) yield jobOf(d, this.address);
    } catch (e) {
      if (options.signal?.aborted) return;
      throw ReboundError.from(e);
    }
  }

  /** Acknowledges a delivery of {@link Client.deliveries} with its outcome. */
  async ack(job: Job, outcome: Outcome): Promise<void> {
    const ack = outcome.toAck(job.deliveryId);
    await this.call((o) => this.executor.ack(ack, o));
  }

  /** Ends the connection. */
  close(): void {
    this.channel.close();
  }

  /**
   * Schedules a retry. Idempotent by (service, transactionId): a repeat reschedules or confirms
   * the pending retry (`deduplicated`) and never doubles it, so re-sending is safe.
   */
  async enqueue(request: EnqueueRequest): Promise<Enqueued> {
    const message = enqueueToProto(request);
    return enqueued(await this.call((o) => this.retry.enqueueRetry(message, o)));
  }

  /** Many enqueues in one call: one result per item, in order; a bad item fails alone. */
  async enqueueBatch(requests: EnqueueRequest[]): Promise<(Enqueued | ItemError)[]> {
    const messages = requests.map(enqueueToProto);
    const batch = create(EnqueueRetryBatchRequestSchema, { requests: messages });
    const { results } = await this.call((o) => this.retry.enqueueRetryBatch(batch, o));
    if (results.length !== messages.length) {
      throw new ReboundError(13, `${results.length} results for ${messages.length} batch items`);
    }
    return results.map((r) =>
      r.result.case === "response"
        ? enqueued(r.result.value)
        : new ItemError(r.result.value?.code ?? 2, r.result.value?.message ?? "no result"),
    );
  }

  /** The state of a retry; NOT_FOUND when there is none (or it expired). */
  async get(service: string, transactionId: string): Promise<Retry> {
    const r = await this.call((o) => this.retry.getRetry({ service, transactionId }, o));
    return {
      service: r.service,
      transactionId: r.transactionId,
      status: r.status,
      attempt: r.attempt,
      generation: r.generation,
      dueTime: dateOf(r.dueTime),
      lastError: r.lastError,
      payload: r.payload,
      attributes: { ...r.attributes },
      policy: policyFromProto(r.policy),
      firstEnqueuedAt: dateOf(r.firstEnqueuedAt),
      lastEnqueuedAt: dateOf(r.lastEnqueuedAt),
      updatedAt: dateOf(r.updatedAt),
      enqueueCount: r.enqueueCount,
      deliveryCount: r.deliveryCount,
      chain: chainFromProto(r.chain),
      attempts: r.attempts.map(attemptFromProto),
      attemptsDropped: r.attemptsDropped,
      raw: r,
    };
  }

  /**
   * The service's scheduled retries that match `filter`, by due time (ListRetries),
   * fetched a page at a time as the iteration goes on:
   * `for await (const r of client.listRetries("orders", { attributes: { customer: "42" } }))`.
   */
  async *listRetries(service: string, filter: ListFilter = {}): AsyncGenerator<RetrySummary> {
    let pageToken = "";
    for (;;) {
      const request = {
        service,
        statuses: filter.statuses ?? [],
        attributes: filter.attributes ?? {},
        errorContains: filter.errorContains ?? "",
        dependency: filter.dependency ?? "",
        sagaTransactionId: filter.sagaTransactionId ?? "",
        dueAfter: filter.dueAfter ? timestampFromDate(filter.dueAfter) : undefined,
        dueBefore: filter.dueBefore ? timestampFromDate(filter.dueBefore) : undefined,
        pageSize: filter.pageSize ?? 100,
        pageToken,
      };
      const r = await this.call((o) => this.retry.listRetries(request, o));
      for (const s of r.retries) {
        yield {
          transactionId: s.transactionId,
          status: s.status,
          attempt: s.attempt,
          dueTime: dateOf(s.dueTime),
          lastError: s.lastError,
          dependency: s.dependency,
          chainPosition: s.chainPosition,
          sagaTransactionId: s.sagaTransactionId,
          enqueueCount: s.enqueueCount,
          deliveryCount: s.deliveryCount,
          attributes: { ...s.attributes },
        };
      }
      pageToken = r.nextPageToken;
      if (!pageToken) return;
    }
  }

  /** Stops a pending retry; `cancelled` is false when it had already finished. */
  async cancel(service: string, transactionId: string): Promise<{ status: RetryStatus; cancelled: boolean }> {
    const r = await this.call((o) => this.retry.cancelRetry({ service, transactionId }, o));
    return { status: r.status, cancelled: r.cancelled };
  }
}
