package dev.rebound.client;

import dev.rebound.v1.Delivery;
import java.time.Instant;
import java.util.Map;

/**
 * One delivery of a due retry.
 *
 * @param deliveryId the opaque ack token
 * @param service the service
 * @param transactionId the transaction
 * @param attempt this delivery's attempt number (the caller's own tries included)
 * @param payload the payload
 * @param attributes the attributes
 * @param dueTime when it was due
 * @param firstEnqueuedAt when it was first enqueued
 * @param ackDeadline when the delivery is handed to another executor unless acked or extended
 * @param lastError the last attempt's error
 * @param traceparent the trace context stored at the first enqueue (empty when none)
 * @param tracestate its vendor entries
 * @param node the node that sent it (acks and extensions go back to it)
 * @param dependency the downstream dependency the retry names (empty: none); {@link Outcome#hold}
 *     holds it
 */
public record Job(
    String deliveryId,
    String service,
    String transactionId,
    int attempt,
    byte[] payload,
    Map<String, String> attributes,
    Instant dueTime,
    Instant firstEnqueuedAt,
    Instant ackDeadline,
    String lastError,
    String traceparent,
    String tracestate,
    String node,
    String dependency) {
  static Job of(Delivery d, String node) {
    return new Job(
        d.getDeliveryId(),
        d.getService(),
        d.getTransactionId(),
        d.getAttempt(),
        d.getPayload().toByteArray(),
        Map.copyOf(d.getAttributesMap()),
        Times.instant(d.getDueTime()),
        Times.instant(d.getFirstEnqueuedAt()),
        Times.instant(d.getAckDeadline()),
        d.getLastError(),
        d.getTraceContext().getTraceparent(),
        d.getTraceContext().getTracestate(),
        node,
        d.getDependency());
  }
}
