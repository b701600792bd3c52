package dev.rebound.client;

import dev.rebound.v1.AckOutcome;
import dev.rebound.v1.AckRequest;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

/** A handler's answer: success, retry (after a delay), snooze, or a failure that dead-letters. */
public final class Outcome {
  private static final int MAX_ERROR_BYTES = 8192;

  private final AckOutcome kind;
  private final String error;
  private final Duration after;
  private final boolean snooze;
  private final String errorClass;

  private Outcome(
      AckOutcome kind, String error, Duration after, boolean snooze, String errorClass) {
    this.kind = kind;
    this.error = error;
    this.after = after;
    this.snooze = snooze;
    this.errorClass = errorClass;
  }

  public static Outcome success() {
    return new Outcome(AckOutcome.ACK_OUTCOME_SUCCEEDED, "", null, false, "");
  }

  /** Try again after the policy's backoff. */
  public static Outcome retry(String error) {
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, error, null, false, "");
  }

  /** Try again after {@code after}. */
  public static Outcome retryAfter(Duration after, String error) {
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, error, after, false, "");
  }

  /** A failure that retrying will not fix: dead-letter the retry now. */
  public static Outcome fail(String error) {
    return new Outcome(AckOutcome.ACK_OUTCOME_FAILED, error, null, false, "");
  }

  /** Not tried, only postponed: run again after {@code after} without using an attempt. */
  public static Outcome snooze(Duration after, String reason) {
    return new Outcome(AckOutcome.ACK_OUTCOME_RETRY, reason, after, true, "");
  }

  /** Tags the outcome with a class such as "http.404"; a non-retryable class dead-letters. */
  public Outcome withErrorClass(String errorClass) {
    return new Outcome(kind, error, after, snooze, errorClass);
  }

  AckRequest toAck(String deliveryId) {
    AckRequest.Builder b =
        AckRequest.newBuilder()
            .setDeliveryId(deliveryId)
            .setOutcome(kind)
            .setError(truncate(error == null ? "" : error))
            .setSnooze(snooze)
            .setErrorClass(errorClass);
    if (after != null) {
      b.setRetryAfter(Times.duration(after));
    }
    return b.build();
  }

  private static String truncate(String s) {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    if (bytes.length <= MAX_ERROR_BYTES) {
      return s;
    }
    int end = MAX_ERROR_BYTES;
    while (end > 0 && (bytes[end] & 0xC0) == 0x80) {
      end--; // do not cut a character in two
    }
    return new String(bytes, 0, end, StandardCharsets.UTF_8);
  }
}
