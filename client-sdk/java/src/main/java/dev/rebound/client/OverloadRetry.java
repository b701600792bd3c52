package dev.rebound.client;

import io.grpc.Deadline;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The retries of a call a node answered RESOURCE_EXHAUSTED (it is overloaded; when it sheds a
 * request for {@code REBOUND_MAX_INFLIGHT_BYTES} nothing was done, so repeating is safe): the wait
 * before a retry is the node's {@code grpc-retry-pushback-ms} hint times a random factor in [1,
 * 1.5); without a usable hint (absent, malformed, negative or repeated), exponential backoff from
 * 100 ms, doubling up to 5 s, ±20 % jitter. At most {@code maxAttempts} attempts in all, none
 * started later than {@code maxTotal} after the first, and no wait that would pass the call's
 * deadline; then the last error stands. No other code is retried here.
 */
final class OverloadRetry {
  static final Metadata.Key<String> PUSHBACK =
      Metadata.Key.of("grpc-retry-pushback-ms", Metadata.ASCII_STRING_MARSHALLER);
  static final int DEFAULT_ATTEMPTS = 10;
  static final Duration DEFAULT_TOTAL = Duration.ofSeconds(30);
  static final OverloadRetry DEFAULT = new OverloadRetry(DEFAULT_ATTEMPTS, DEFAULT_TOTAL);
  private static final long INITIAL_BACKOFF_MS = 100;
  private static final long MAX_BACKOFF_MS = 5_000;

  /** A larger hint counts as an hour. */
  private static final long MAX_PUSHBACK_MS = 3_600_000;

  final int maxAttempts;
  final long maxTotalMs;

  /**
   * @param maxAttempts attempts in all, the first included; 1 turns the retries off
   * @param maxTotal no retry starts later than this after the first attempt; zero: no bound but the
   *     attempts
   */
  OverloadRetry(int maxAttempts, Duration maxTotal) {
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("overload retry attempts must be at least 1");
    }
    if (maxTotal.isNegative()) {
      throw new IllegalArgumentException("overload retry total must not be negative");
    }
    this.maxAttempts = maxAttempts;
    this.maxTotalMs = maxTotal.toMillis();
  }

  /** The hint of a refused call's trailers in milliseconds, or -1 when none is usable. */
  static long pushbackMs(Metadata trailers) {
    if (trailers == null) {
      return -1;
    }
    Iterable<String> all = trailers.getAll(PUSHBACK);
    if (all == null) {
      return -1;
    }
    String value = null;
    for (String v : all) {
      if (value != null) {
        return -1; // repeated
      }
      value = v;
    }
    if (value == null || !value.matches("[0-9]+")) {
      return -1;
    }
    try {
      return Math.min(Long.parseLong(value), MAX_PUSHBACK_MS);
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  /** The wait before retry number {@code retry} (1 for the first). */
  static long waitMs(int retry, long hintMs) {
    ThreadLocalRandom r = ThreadLocalRandom.current();
    if (hintMs >= 0) {
      return (long) (hintMs * (1 + 0.5 * r.nextDouble()));
    }
    long d =
        retry > 7 ? MAX_BACKOFF_MS : Math.min(MAX_BACKOFF_MS, INITIAL_BACKOFF_MS << (retry - 1));
    return (long) (d * (0.8 + 0.4 * r.nextDouble()));
  }

  /**
   * The wait before another attempt after attempt number {@code attempt} (from 1) failed with
   * {@code error}, or -1 to give up: not RESOURCE_EXHAUSTED, the attempts or the total time spent,
   * or a wait that would not end before {@code remainingMs} (Long.MAX_VALUE: no deadline).
   */
  long pause(int attempt, long firstNanos, Throwable error, long remainingMs) {
    Status status = Status.fromThrowable(error);
    if (status.getCode() != Status.Code.RESOURCE_EXHAUSTED || attempt >= maxAttempts) {
      return -1;
    }
    long wait = waitMs(attempt, pushbackMs(Status.trailersFromThrowable(error)));
    long elapsed = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - firstNanos);
    if (maxTotalMs > 0 && elapsed + wait > maxTotalMs) {
      return -1;
    }
    if (wait >= remainingMs) {
      return -1;
    }
    return wait;
  }

  private static long remaining(Deadline deadline) {
    return deadline == null ? Long.MAX_VALUE : deadline.timeRemaining(TimeUnit.MILLISECONDS);
  }

  /**
   * Runs {@code attempt} until it succeeds, fails otherwise, or the bound is reached; throws the
   * last attempt's exception. An interrupt during a wait ends the retries (the thread stays
   * interrupted).
   */
  <T> T call(Deadline deadline, Supplier<T> attempt) {
    long first = System.nanoTime();
    for (int n = 1; ; n++) {
      try {
        return attempt.get();
      } catch (StatusRuntimeException e) {
        long wait = pause(n, first, e, remaining(deadline));
        if (wait < 0) {
          throw e;
        }
        try {
          Thread.sleep(wait);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw e;
        }
      }
    }
  }

  /**
   * Runs {@code attempt} (each call starts one attempt; its future fails with the gRPC error) the
   * same way, without blocking a thread between attempts; the result fails with a {@link
   * ReboundException}.
   */
  <T> CompletableFuture<T> callAsync(Deadline deadline, Supplier<CompletableFuture<T>> attempt) {
    CompletableFuture<T> out = new CompletableFuture<>();
    next(out, deadline, attempt, 1, System.nanoTime());
    return out;
  }

  private <T> void next(
      CompletableFuture<T> out,
      Deadline deadline,
      Supplier<CompletableFuture<T>> attempt,
      int n,
      long first) {
    attempt
        .get()
        .whenComplete(
            (value, t) -> {
              if (t == null) {
                out.complete(value);
                return;
              }
              Throwable error =
                  t instanceof CompletionException && t.getCause() != null ? t.getCause() : t;
              long wait = pause(n, first, error, remaining(deadline));
              if (wait < 0) {
                out.completeExceptionally(ReboundException.from(error));
                return;
              }
              CompletableFuture.delayedExecutor(wait, TimeUnit.MILLISECONDS)
                  .execute(() -> next(out, deadline, attempt, n + 1, first));
            });
  }
}
