package dev.rebound.client;

import java.time.Duration;
import java.util.List;

/**
 * Overrides of the service's retry policy on an enqueue; an unset field keeps the service's (then
 * the node's) default: 1 s initial backoff, x2, +/-20 % jitter, 5 attempts, 30 s ack timeout.
 *
 * <pre>{@code RetryPolicy.builder().maxAttempts(8).initialBackoff(Duration.ofSeconds(30)).build()}
 * </pre>
 */
public final class RetryPolicy {
  private final dev.rebound.v1.RetryPolicy proto;

  private RetryPolicy(dev.rebound.v1.RetryPolicy proto) {
    this.proto = proto;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** The policy's message. */
  public dev.rebound.v1.RetryPolicy toProto() {
    return proto;
  }

  static RetryPolicy fromProto(dev.rebound.v1.RetryPolicy p) {
    return new RetryPolicy(p);
  }

  @Override
  public String toString() {
    return proto.toString();
  }

  private static com.google.protobuf.Duration d(Duration d) {
    return Times.duration(d);
  }

  /** Builds a {@link RetryPolicy}. */
  public static final class Builder {
    private final dev.rebound.v1.RetryPolicy.Builder b = dev.rebound.v1.RetryPolicy.newBuilder();

    private Builder() {}

    /** Total attempts, counting the caller's own first try. */
    public Builder maxAttempts(int n) {
      b.setMaxAttempts(n);
      return this;
    }

    public Builder initialBackoff(Duration d) {
      b.setInitialBackoff(d(d));
      return this;
    }

    public Builder maxBackoff(Duration d) {
      b.setMaxBackoff(d(d));
      return this;
    }

    public Builder multiplier(double m) {
      b.setMultiplier(m);
      return this;
    }

    public Builder jitter(double j) {
      b.setJitter(j);
      return this;
    }

    public Builder maxRetryDuration(Duration d) {
      b.setMaxRetryDuration(d(d));
      return this;
    }

    public Builder ackTimeout(Duration d) {
      b.setAckTimeout(d(d));
      return this;
    }

    public Builder maxDeliveriesPerAttempt(int n) {
      b.setMaxDeliveriesPerAttempt(n);
      return this;
    }

    /** Error classes that dead-letter a RETRY at once. */
    public Builder nonRetryableErrorClasses(List<String> classes) {
      b.clearNonRetryableErrorClasses().addAllNonRetryableErrorClasses(classes);
      return this;
    }

    /** Retry with no limit on attempts (maxRetryDuration still applies). */
    public Builder unlimitedAttempts() {
      b.setUnlimitedAttempts(true);
      return this;
    }

    public RetryPolicy build() {
      return new RetryPolicy(b.build());
    }
  }
}
