package dev.rebound.client;

import com.google.protobuf.ByteString;
import dev.rebound.v1.EnqueueRetryRequest;
import dev.rebound.v1.TraceContext;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;

/**
 * One retry to schedule: {@code delay} or {@code dueTime} (not both); neither: the policy's backoff
 * for {@code attempt}.
 *
 * <pre>{@code
 * EnqueueRequest.builder("payments", "charge-7f3a")
 *     .payload("{\"order\":\"7f3a\"}")
 *     .delay(Duration.ofSeconds(30))
 *     .lastError("card processor timed out")
 *     .build();
 * }</pre>
 */
public final class EnqueueRequest {
  private final EnqueueRetryRequest proto;

  private EnqueueRequest(EnqueueRetryRequest proto) {
    this.proto = proto;
  }

  public static Builder builder(String service, String transactionId) {
    return new Builder(service, transactionId);
  }

  /** The request's message. */
  public EnqueueRetryRequest toProto() {
    return proto;
  }

  /** Builds an {@link EnqueueRequest}. */
  public static final class Builder {
    private final EnqueueRetryRequest.Builder b = EnqueueRetryRequest.newBuilder().setAttempt(1);
    private boolean scheduled;

    private Builder(String service, String transactionId) {
      b.setService(service).setTransactionId(transactionId);
    }

    public Builder payload(byte[] payload) {
      b.setPayload(ByteString.copyFrom(payload));
      return this;
    }

    public Builder payload(String payload) {
      b.setPayload(ByteString.copyFrom(payload, StandardCharsets.UTF_8));
      return this;
    }

    /** Due this long from now (rounded up to the window grid). */
    public Builder delay(Duration delay) {
      if (scheduled) {
        throw new IllegalStateException("enqueue: set delay or dueTime, not both");
      }
      scheduled = true;
      b.setDelay(Times.duration(delay));
      return this;
    }

    /** Due at {@code due} (rounded up to the window grid). */
    public Builder dueTime(Instant due) {
      if (scheduled) {
        throw new IllegalStateException("enqueue: set delay or dueTime, not both");
      }
      scheduled = true;
      b.setDueTime(Times.timestamp(due));
      return this;
    }

    public Builder attribute(String key, String value) {
      b.putAttributes(key, value);
      return this;
    }

    public Builder attributes(Map<String, String> attributes) {
      b.putAllAttributes(attributes);
      return this;
    }

    /** The attempts the caller already made (default 1). */
    public Builder attempt(int attempt) {
      b.setAttempt(attempt);
      return this;
    }

    public Builder lastError(String error) {
      b.setLastError(error);
      return this;
    }

    public Builder policy(RetryPolicy policy) {
      b.setPolicy(policy.toProto());
      return this;
    }

    /**
     * The downstream dependency this retry waits on, e.g. {@code "payments-gateway"} (1-128
     * characters of {@code [A-Za-z0-9._-]}, starting with a letter or digit): while it is held (an
     * executor's {@link Outcome#hold}, or the admin API), no retry naming it is delivered, in any
     * service, and none uses an attempt.
     */
    public Builder dependency(String dependency) {
      b.setDependency(dependency);
      return this;
    }

    /**
     * Adds a compensation of this saga step, after those already added: add them in the order they
     * must run (usually the reverse of the steps they undo). When the retry ends DEAD (attempts or
     * duration exhausted, FAILED, a non-retryable class), Rebound enqueues the first, and each next
     * one only after the one before it was acknowledged SUCCEEDED; none run when it ends SUCCEEDED
     * or CANCELLED. At most 32, with at most {@code REBOUND_MAX_PAYLOAD_BYTES} of payloads in all.
     * Each is retried, unless its own policy says otherwise, with unlimited attempts for at most 24
     * hours. {@link ReboundClient#get} shows where the chain stands ({@code Retry.getChain()}).
     */
    public Builder compensation(Compensation compensation) {
      b.addCompensations(compensation.toProto());
      return this;
    }

    /** The W3C trace context of the failed call, when it is not the current one. */
    public Builder traceContext(String traceparent, String tracestate) {
      b.setTraceContext(
          TraceContext.newBuilder().setTraceparent(traceparent).setTracestate(tracestate));
      return this;
    }

    public EnqueueRequest build() {
      return new EnqueueRequest(b.build());
    }
  }
}
