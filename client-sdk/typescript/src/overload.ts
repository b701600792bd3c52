// Calls a node shed under load. A node whose request byte budget (REBOUND_MAX_INFLIGHT_BYTES)
// is full answers a unary call RESOURCE_EXHAUSTED before it decodes the request, so the call
// did nothing and is safe to make again; the answer carries a `grpc-retry-pushback-ms` hint.
// Such a call is made again after the hint times a jitter factor in [1, 1.5) (without a valid
// hint: 100 ms, x2 per retry, capped at 5 s, +/-20 %), a bounded number of times, within 30 s of
// waiting and the call's deadline; then the caller gets the RESOURCE_EXHAUSTED as before. No
// other code is retried here.
import { Code, ConnectError } from "@connectrpc/connect";

/** Retries of one call while the node sheds it, by default (ten calls in all). */
export const DEFAULT_OVERLOAD_RETRIES = 9;
/** Most milliseconds spent waiting between the calls of one request. */
export const MAX_OVERLOAD_WAIT_MS = 30_000;
const PUSHBACK = "grpc-retry-pushback-ms";

/** The node's `grpc-retry-pushback-ms` hint of a failed call (undefined: none, or not an integer ≥ 0). */
export function pushbackMs(e: unknown): number | undefined {
  if (!(e instanceof ConnectError)) return undefined;
  const v = e.metadata.get(PUSHBACK)?.trim();
  return v !== undefined && /^[0-9]+$/.test(v) ? Number(v) : undefined;
}

/**
 * Milliseconds to wait before retry number `retry` (0 for the first) of a shed call: `hintMs`
 * times [1, 1.5), or without a hint 100 ms * 2^retry, capped at 5 s, +/-20 %. `unit`: the jitter
 * draw in [0, 1).
 */
export function overloadWaitMs(retry: number, hintMs: number | undefined, unit = Math.random()): number {
  if (hintMs !== undefined) return hintMs * (1 + 0.5 * unit);
  return Math.min(5000, 100 * 2 ** Math.min(retry, 30)) * (0.8 + 0.4 * unit);
}

export interface OverloadBound {
  /** Most retries after the first call. */
  retries: number;
  /** A Date.now() time no wait may reach (the call's own deadline). */
  deadline?: number;
  /** Ends a wait early: the call then rejects with the node's error. */
  signal?: AbortSignal;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((ok) => {
    if (signal?.aborted) return ok();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      ok();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** `call()`, made again while the node sheds it (RESOURCE_EXHAUSTED); other errors are thrown at once. */
export async function shedAware<T>(call: () => Promise<T>, bound: OverloadBound): Promise<T> {
  let waited = 0;
  for (let retry = 0; ; retry++) {
    try {
      return await call();
    } catch (e) {
      if (!(e instanceof ConnectError) || e.code !== Code.ResourceExhausted || retry >= bound.retries)
        throw e;
      const wait = overloadWaitMs(retry, pushbackMs(e));
      if (waited + wait > MAX_OVERLOAD_WAIT_MS) throw e;
      if (bound.deadline !== undefined && Date.now() + wait >= bound.deadline) throw e;
      waited += wait;
      await sleep(wait, bound.signal);
      if (bound.signal?.aborted) throw e;
    }
  }
}
