package dev.rebound.client;

import dev.rebound.v1.EnqueueRetryResponse;
import java.time.Instant;

/**
 * The answer to an enqueue.
 *
 * @param transactionId the transaction
 * @param dueTime when the retry first becomes eligible for delivery (the end of its window)
 * @param generation the retry's generation
 * @param deduplicated true when the transaction was already pending and this call rescheduled or
 *     confirmed it
 */
public record Enqueued(
    String transactionId, Instant dueTime, long generation, boolean deduplicated) {
  static Enqueued of(EnqueueRetryResponse r) {
    return new Enqueued(
        r.getTransactionId(),
        Times.instant(r.getDueTime()),
        r.getGeneration(),
        r.getDeduplicated());
  }
}
