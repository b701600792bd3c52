package dev.rebound.client;

import dev.rebound.v1.AckOutcome;
import dev.rebound.v1.AckRequest;
import dev.rebound.v1.DependencyHold;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;

/**
 * A handler's answer: success, retry (after a delay), snooze, a hold of the retry's dependency, or
 * a failure that dead-letters.
 */
public final class Outcome {
  private static final int MAX_ERROR_BYTES = 8192;
  private static final int MAX_HOLD_REASON_BYTES = 1024;

  private final AckOutcome kind;
  private final String error;
  private final Duration after;
  private final boolean snooze;
  private final String errorClass;
  private final Duration hold;

  private Outcome(
      AckOutcome kind,
      String error,
      Duration after,
      boolean snooze,
      String errorClass,
      Duration hold) {
    this.kind = kind;
    this.error = error;
    this.after = after;
    this.snooze = snooze;
    this.errorClass = errorClass;
    this.hold = hold;
  }

  public static Outcome success() {
    return new Outcome(AckOutcome.ACK_OUTCOME_SUCCEEDED, "", null, false, "", null);
  }

  /** Try again after the policy's backoff. */
  public static Outcome retry(String error) {
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, error, null, false, "", null);
  }

  /** Try again after {@code after}. */
  public static Outcome retryAfter(Duration after, String error) {
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, error, after, false, "", null);
  }

  /** A failure that retrying will not fix: dead-letter the retry now. */
  public static Outcome fail(String error) {
    return new Outcome(AckOutcome.ACK_OUTCOME_FAILED, error, null, false, "", null);
  }

  /** Not tried, only postponed: run again after {@code after} without using an attempt. */
  public static Outcome snooze(Duration after, String reason) {
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, reason, after, true, "", null);
  }

  /**
   * The dependency the retry names ({@link Job#dependency()}) is down for {@code duration} (the
   * Retry-After it answered, say): hold it, so that no retry naming it is delivered, in any
   * service, until then, and postpone this one to the hold's end without using an attempt. When the
   * hold ends one probe delivery goes first; if it succeeds the rest follow. The node requires 1 s
   * to 24 h and refuses the ack for a retry that names no dependency. {@code reason} is the hold's
   * reason (cut to 1 KiB) and the retry's last error.
   */
  public static Outcome hold(Duration duration, String reason) {
    Objects.requireNonNull(duration, "hold duration");
    if (duration.isNegative()) {
      throw new IllegalArgumentException("a hold duration cannot be negative: " + duration);
    }
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, reason, null, false, "", duration);
  }

  /** Tags the outcome with a class such as "http.404"; a non-retryable class dead-letters. */
  public Outcome withErrorClass(String errorClass) {
    return new Outcome(kind, error, after, snooze, errorClass, hold);
  }

  AckRequest toAck(String deliveryId) {
    String e = error == null ? "" : error;
    AckRequest.Builder b =
        AckRequest.newBuilder()
            .setDeliveryId(deliveryId)
            .setOutcome(kind)
            .setError(truncate(e, MAX_ERROR_BYTES))
            .setSnooze(snooze)
            .setErrorClass(errorClass);
    if (after != null) {
      b.setRetryAfter(Times.duration(after));
    }
    if (hold != null) {
      b.setHold(
          DependencyHold.newBuilder()
              .setDuration(Times.duration(hold))
              .setReason(truncate(e, MAX_HOLD_REASON_BYTES)));
    }
    return b.build();
  }

  private static String truncate(String s, int max) {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    if (bytes.length <= max) {
      return s;
    }
    int end = max;
    while (end > 0 && (bytes[end] & 0xC0) == 0x80) {
      end--; // do not cut a character in two
    }
    return new String(bytes, 0, end, StandardCharsets.UTF_8);
  }
}
