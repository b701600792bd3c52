package dev.rebound.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.rebound.v1.EnqueueRetryRequest;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The enqueue requests that the builder makes (no node needed). */
class EnqueueRequestTest {
  @Test
  void theFailedCallCountsAsAttempt1UnlessTold() {
    // As the CLI and every SDK: the first delivery is then attempt 2.
    assertEquals(1, EnqueueRequest.builder("s", "t").build().toProto().getAttempt());
    assertEquals(0, EnqueueRequest.builder("s", "t").attempt(0).build().toProto().getAttempt());
    assertEquals(3, EnqueueRequest.builder("s", "t").attempt(3).build().toProto().getAttempt());
  }

  @Test
  void compensationsGoInOrderWithTheirFields() {
    EnqueueRetryRequest r =
        EnqueueRequest.builder("saga-orders", "charge-1")
            .compensation(
                Compensation.builder("saga-undo", "refund-1")
                    .payload("refund charge-1")
                    .attribute("tenant", "acme")
                    .policy(
                        RetryPolicy.builder()
                            .maxAttempts(7)
                            .initialBackoff(Duration.ofMillis(1500))
                            .build())
                    .build())
            .compensation(
                Compensation.builder("saga-undo", "release-1")
                    .payload(new byte[] {1, 2, 3})
                    .attributes(Map.of("a", "1", "b", "2"))
                    .build())
            .compensation(Compensation.builder("saga-mail", "apologise-1").build())
            .build()
            .toProto();
    assertEquals(
        List.of("saga-undo/refund-1", "saga-undo/release-1", "saga-mail/apologise-1"),
        r.getCompensationsList().stream()
            .map(c -> c.getService() + "/" + c.getTransactionId())
            .toList());
    dev.rebound.v1.Compensation refund = r.getCompensations(0);
    assertEquals("refund charge-1", refund.getPayload().toStringUtf8());
    assertEquals(Map.of("tenant", "acme"), refund.getAttributesMap());
    assertTrue(refund.hasPolicy());
    assertEquals(7, refund.getPolicy().getMaxAttempts());
    assertEquals(Duration.ofMillis(1500), Times.duration(refund.getPolicy().getInitialBackoff()));
    dev.rebound.v1.Compensation release = r.getCompensations(1);
    assertEquals(ByteString.copyFrom(new byte[] {1, 2, 3}), release.getPayload());
    assertEquals(Map.of("a", "1", "b", "2"), release.getAttributesMap());
    assertFalse(release.hasPolicy());
    dev.rebound.v1.Compensation apologise = r.getCompensations(2);
    assertTrue(apologise.getPayload().isEmpty());
    assertTrue(apologise.getAttributesMap().isEmpty());
    assertFalse(apologise.hasPolicy());
  }

  @Test
  void withoutCompensationsNone() {
    assertEquals(
        0, EnqueueRequest.builder("orders", "charge-1").build().toProto().getCompensationsCount());
  }
}
