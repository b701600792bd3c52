import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  AckOutcome,
  AckRequestSchema,
  type AckRequest,
  type Delivery,
} from "./gen/rebound/v1/executor_pb.js";
import { dateOf } from "./time.js";

const MAX_ERROR_BYTES = 8192;
const MAX_REASON_BYTES = 1024;

/** One delivery of a due retry. */
export interface Job {
  deliveryId: string;
  service: string;
  transactionId: string;
  /** This delivery's attempt number (the caller's own tries included). */
  attempt: number;
  payload: Uint8Array;
  attributes: Record<string, string>;
  dueTime: Date | undefined;
  firstEnqueuedAt: Date | undefined;
  ackDeadline: Date | undefined;
  lastError: string;
  /** The dependency the retry names (empty: none); `Outcome.hold` holds it. */
  dependency: string;
  /** The trace context stored at the first enqueue (empty when none). */
  traceparent: string;
  tracestate: string;
  /** The node that sent it; acks and extensions go back to it. */
  node: string;
}

export function jobOf(d: Delivery, node: string): Job {
  return {
    deliveryId: d.deliveryId,
    service: d.service,
    transactionId: d.transactionId,
    attempt: d.attempt,
    payload: d.payload,
    attributes: { ...d.attributes },
    dueTime: dateOf(d.dueTime),
    firstEnqueuedAt: dateOf(d.firstEnqueuedAt),
    ackDeadline: dateOf(d.ackDeadline),
    lastError: d.lastError,
    dependency: d.dependency,
    traceparent: d.traceContext?.traceparent ?? "",
    tracestate: d.traceContext?.tracestate ?? "",
    node,
  };
}

function truncateUtf8(s: string, max: number): string {
  const bytes = new TextEncoder().encode(s);
  if (bytes.length <= max) return s;
  return new TextDecoder("utf-8", { fatal: false }).decode(bytes.slice(0, max)).replace(/\uFFFD$/, "");
}

/** A handler's answer. */
export class Outcome {
  private constructor(
    readonly kind: AckOutcome,
    readonly error = "",
    readonly afterMs?: number,
    readonly snoozed = false,
    readonly errorClass = "",
    /** For `Outcome.hold`: how long to hold the retry's dependency. */
    readonly holdMs?: number,
  ) {}

  static success(): Outcome {
    return new Outcome(AckOutcome.SUCCEEDED);
  }
  /** Try again: after `afterMs` when given, else after the policy's backoff. */
  static retry(error = "", options: { afterMs?: number } = {}): Outcome {
    return new Outcome(AckOutcome.RETRY, error, options.afterMs);
  }
  /** A failure that retrying will not fix: dead-letter the retry now. */
  static fail(error = ""): Outcome {
    return new Outcome(AckOutcome.FAILED, error);
  }
  /** Not tried, only postponed: run again after `afterMs` without using an attempt. */
  static snooze(afterMs: number, reason = ""): Outcome {
    return new Outcome(AckOutcome.RETRY, reason, afterMs, true);
  }
  /**
   * The dependency the retry names (`job.dependency`) is down for `durationMs` (the Retry-After
   * it answered, say): hold it, so that no retry naming it is delivered, in any service, until
   * then, and postpone this one to the hold's end without using an attempt. When the hold ends
   * one delivery goes first as a probe; if it succeeds the rest follow. 1 s to 24 h; the node
   * refuses a hold for a retry that names no dependency. `reason` is the retry's error too (the
   * hold's is cut to 1 KiB).
   */
  static hold(durationMs: number, reason = ""): Outcome {
    return new Outcome(AckOutcome.RETRY, reason, undefined, false, "", durationMs);
  }
  /** Tags the outcome with a class such as "http.404"; a non-retryable class dead-letters. */
  withErrorClass(errorClass: string): Outcome {
    return new Outcome(this.kind, this.error, this.afterMs, this.snoozed, errorClass, this.holdMs);
  }

  toAck(deliveryId: string): AckRequest {
    return create(AckRequestSchema, {
      deliveryId,
      outcome: this.kind,
      error: truncateUtf8(this.error, MAX_ERROR_BYTES),
      snooze: this.snoozed,
      errorClass: this.errorClass,
      retryAfter: this.afterMs === undefined ? undefined : durationFromMs(this.afterMs),
      hold:
        this.holdMs === undefined
          ? undefined
          : { duration: durationFromMs(this.holdMs), reason: truncateUtf8(this.error, MAX_REASON_BYTES) },
    });
  }
}
