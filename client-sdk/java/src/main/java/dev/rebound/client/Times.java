package dev.rebound.client;

import com.google.protobuf.Timestamp;
import java.time.Duration;
import java.time.Instant;

/** Conversions between java.time and the protobuf well-known types. */
final class Times {
  private Times() {}

  static com.google.protobuf.Duration duration(Duration d) {
    if (d.isNegative()) {
      throw new IllegalArgumentException("a duration cannot be negative: " + d);
    }
    return com.google.protobuf.Duration.newBuilder()
        .setSeconds(d.getSeconds())
        .setNanos(d.getNano())
        .build();
  }

  static Duration duration(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }

  static Timestamp timestamp(Instant t) {
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

  /** The instant of a timestamp, or null when it is unset. */
  static Instant instant(Timestamp t) {
    if (t.getSeconds() == 0 && t.getNanos() == 0) {
      return null;
    }
    return Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }
}
