package dev.rebound.client.tools;

import dev.rebound.client.BatchResult;
import dev.rebound.client.EnqueueRequest;
import dev.rebound.client.Executor;
import dev.rebound.client.Outcome;
import dev.rebound.client.ReboundClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * {@code scripts/sdk-roundtrip java ADDR SERVICE N}: enqueues N retries due in about a second, runs
 * an executor until all N are acknowledged, prints {@code roundtrip: N enqueued, N delivered, N
 * acked} and exits 0; exits 1 otherwise, within ROUNDTRIP_TIMEOUT seconds (default 120).
 * REBOUND_TOKEN is sent when set.
 */
public final class Roundtrip {
  private Roundtrip() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 3) {
      System.err.println("usage: roundtrip ADDR SERVICE N");
      System.exit(2);
    }
    String address = args[0];
    String service = args[1];
    int n = Integer.parseInt(args[2]);
    String token = System.getenv("REBOUND_TOKEN");
    long limitMs = Long.parseLong(System.getenv().getOrDefault("ROUNDTRIP_TIMEOUT", "120")) * 1000;
    String prefix = "roundtrip-" + Long.toHexString(System.currentTimeMillis()) + "-";
    int enqueued = 0;
    try (ReboundClient client = ReboundClient.builder(address).token(token).build()) {
      for (int start = 0; start < n; start += 500) {
        List<EnqueueRequest> batch = new ArrayList<>();
        for (int i = start; i < Math.min(n, start + 500); i++) {
          batch.add(
              EnqueueRequest.builder(service, prefix + i)
                  .payload("x")
                  .delay(Duration.ofSeconds(1))
                  .build());
        }
        for (BatchResult r : client.enqueueBatch(batch)) {
          if (r.ok()) {
            enqueued++;
          }
        }
      }
    }
    Set<String> delivered = ConcurrentHashMap.newKeySet();
    Executor executor =
        Executor.builder(
                address,
                service,
                job -> {
                  if (job.transactionId().startsWith(prefix)) {
                    delivered.add(job.transactionId());
                  }
                  return Outcome.success();
                })
            .concurrency(64)
            .token(token)
            .build();
    executor.start();
    long end = System.currentTimeMillis() + limitMs;
    while ((delivered.size() < n || executor.acked() < n)
        && System.currentTimeMillis() < end
        && executor.failure() == null) {
      Thread.sleep(50);
    }
    executor.stop();
    System.out.printf(
        "roundtrip: %d enqueued, %d delivered, %d acked%n",
        enqueued, delivered.size(), executor.acked());
    System.exit(enqueued == n && delivered.size() == n && executor.acked() >= n ? 0 : 1);
  }
}
