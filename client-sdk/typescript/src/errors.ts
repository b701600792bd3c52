import { Code, ConnectError } from "@connectrpc/connect";

export { Code };

/** Codes after which re-sending is safe and may succeed (an enqueue is idempotent). */
const RETRYABLE = new Set([Code.Unavailable, Code.DeadlineExceeded, Code.ResourceExhausted]);

/**
 * What every failed call throws: the gRPC code and the server's message, which names the field
 * and the limit for bad input.
 */
export class ReboundError extends Error {
  override readonly name = "ReboundError";
  constructor(
    /** The gRPC status code (Connect's `Code`, numerically the gRPC code). */
    readonly code: Code,
    /** The server's message. */
    readonly serverMessage: string,
  ) {
    super(`${Code[code] ?? code}: ${serverMessage}`);
  }

  /** True for UNAVAILABLE, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED. */
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }

  static from(e: unknown): ReboundError {
    if (e instanceof ReboundError) return e;
    const c = ConnectError.from(e);
    return new ReboundError(c.code, c.rawMessage);
  }
}

/** One item's error in a batch: the status it would have had on its own. */
export class ItemError extends ReboundError {}

export function isRetryableCode(code: Code): boolean {
  return RETRYABLE.has(code);
}
