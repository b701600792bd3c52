package dev.rebound.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rebound.v1.AckOutcome;
import dev.rebound.v1.AckRequest;
import dev.rebound.v1.DependencyHold;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The ack requests that handler outcomes become (no node needed). */
class OutcomeTest {
  @Test
  void aHoldIsARetryAckCarryingTheHold() {
    AckRequest r = Outcome.hold(Duration.ofSeconds(30), "Retry-After: 30").toAck("d");
    assertEquals("d", r.getDeliveryId());
    assertEquals(AckOutcome.ACK_OUTCOME_RETRY, r.getOutcome());
    assertFalse(r.getSnooze());
    assertFalse(r.hasRetryAfter());
    assertEquals("Retry-After: 30", r.getError());
    assertEquals("", r.getErrorClass());
    assertTrue(r.hasHold());
    assertEquals(
        DependencyHold.newBuilder()
            .setDuration(com.google.protobuf.Duration.newBuilder().setSeconds(30))
            .setReason("Retry-After: 30")
            .build(),
        r.getHold());
  }

  @Test
  void aHoldReasonIsCutToOneKibibyte() {
    String reason = "é".repeat(600); // 1,200 bytes
    AckRequest r = Outcome.hold(Duration.ofMillis(1500), reason).toAck("d");
    assertEquals(reason, r.getError());
    assertEquals(Duration.ofMillis(1500), Times.duration(r.getHold().getDuration()));
    byte[] cut = r.getHold().getReason().getBytes(StandardCharsets.UTF_8);
    assertEquals(1024, cut.length);
    assertTrue(reason.startsWith(r.getHold().getReason()));
  }

  @Test
  void aHoldNeedsADuration() {
    assertThrows(NullPointerException.class, () -> Outcome.hold(null, "down"));
    assertThrows(
        IllegalArgumentException.class, () -> Outcome.hold(Duration.ofSeconds(-1), "down"));
  }

  @Test
  void otherOutcomesCarryNoHold() {
    for (Outcome o :
        new Outcome[] {
          Outcome.success(),
          Outcome.retry("x"),
          Outcome.retryAfter(Duration.ofSeconds(2), "x"),
          Outcome.snooze(Duration.ofSeconds(1), "x"),
          Outcome.fail("x").withErrorClass("http.404"),
        }) {
      assertFalse(o.toAck("d").hasHold());
    }
    AckRequest snooze = Outcome.snooze(Duration.ofSeconds(1), "later").toAck("d");
    assertTrue(snooze.getSnooze());
    assertEquals(1, snooze.getRetryAfter().getSeconds());
  }
}
