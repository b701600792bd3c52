package dev.rebound.client;

import com.google.protobuf.ByteString;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * A compensation of a saga step, for {@link EnqueueRequest.Builder#compensation}: a retry of its
 * own, of {@code service} with the idempotency key {@code transactionId}, which that service's
 * executors run like any other delivery (so its handler must be idempotent). Unless its {@link
 * Builder#policy policy} says otherwise, it is retried with unlimited attempts for at most 24
 * hours, then dead-lettered.
 *
 * <pre>{@code
 * Compensation.builder("payments", "refund-1").payload("refund charge-1").build()
 * }</pre>
 */
public final class Compensation {
  private final dev.rebound.v1.Compensation proto;

  private Compensation(dev.rebound.v1.Compensation proto) {
    this.proto = proto;
  }

  public static Builder builder(String service, String transactionId) {
    return new Builder(service, transactionId);
  }

  /** The compensation's message. */
  public dev.rebound.v1.Compensation toProto() {
    return proto;
  }

  @Override
  public String toString() {
    return proto.toString();
  }

  /** Builds a {@link Compensation}. */
  public static final class Builder {
    private final dev.rebound.v1.Compensation.Builder b = dev.rebound.v1.Compensation.newBuilder();

    private Builder(String service, String transactionId) {
      b.setService(service).setTransactionId(transactionId);
    }

    /** Opaque bytes handed to the compensation's executor. */
    public Builder payload(byte[] payload) {
      b.setPayload(ByteString.copyFrom(payload));
      return this;
    }

    /** The payload as UTF-8. */
    public Builder payload(String payload) {
      b.setPayload(ByteString.copyFrom(payload, StandardCharsets.UTF_8));
      return this;
    }

    /** Adds one attribute; a repeated key keeps the last value. */
    public Builder attribute(String key, String value) {
      b.putAttributes(key, value);
      return this;
    }

    public Builder attributes(Map<String, String> attributes) {
      b.putAllAttributes(attributes);
      return this;
    }

    /**
     * Overrides of the compensation service's policy (without one: unlimited attempts for at most
     * 24 hours).
     */
    public Builder policy(RetryPolicy policy) {
      b.setPolicy(policy.toProto());
      return this;
    }

    public Compensation build() {
      return new Compensation(b.build());
    }
  }
}
