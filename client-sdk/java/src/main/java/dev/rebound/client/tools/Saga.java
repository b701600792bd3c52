package dev.rebound.client.tools;

import dev.rebound.client.Compensation;
import dev.rebound.client.EnqueueRequest;
import dev.rebound.client.Executor;
import dev.rebound.client.Job;
import dev.rebound.client.Outcome;
import dev.rebound.client.ReboundClient;
import dev.rebound.client.RetryPolicy;
import dev.rebound.v1.Retry;
import dev.rebound.v1.RetryStatus;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;

/**
 * A three-step order saga: reserve stock (done), charge the card (always declined here), ship
 * (never reached). The charge is retried three times; then its compensations run in reverse order
 * of the steps: void the card authorisation, then release the stock, each once.
 *
 * <pre>
 * cd client-sdk/java && mvn -q compile dependency:build-classpath -Dmdep.outputFile=target/cp.txt
 * java -cp "target/classes:$(cat target/cp.txt)" dev.rebound.client.tools.Saga 127.0.0.1:50051
 * </pre>
 */
public final class Saga {
  private Saga() {}

  public static void main(String[] args) throws InterruptedException {
    run(args.length > 0 ? args[0] : "127.0.0.1:50051");
  }

  /** Runs the saga against the node at address; throws unless it was compensated as it should. */
  public static void run(String address) throws InterruptedException {
    String order = "order-" + UUID.randomUUID().toString().substring(0, 8);
    List<String> ran = Collections.synchronizedList(new ArrayList<>());
    // Each service's executor: the charge is declined every time; a compensation succeeds.
    Executor.Handler handler =
        (Job job) -> {
          if (job.transactionId().endsWith("/charge")) {
            System.out.printf("charge attempt %d: declined%n", job.attempt());
            return Outcome.retry("card declined");
          }
          System.out.println("compensating: " + job.transactionId());
          ran.add(job.transactionId());
          return Outcome.success();
        };
    try (ReboundClient client = ReboundClient.builder(address).build();
        Executor checkout = Executor.builder(address, "checkout", handler).build();
        Executor stock = Executor.builder(address, "stock", handler).build()) {
      // Step 1 reserved the stock; step 2, the charge, failed: retry it, and name what undoes
      // the steps before it, in the order to run them.
      client.enqueue(
          EnqueueRequest.builder("checkout", order + "/charge")
              .payload("{\"order\": \"" + order + "\", \"cents\": 1200}")
              .lastError("card network timeout")
              .policy(
                  RetryPolicy.builder()
                      .maxAttempts(3)
                      .initialBackoff(Duration.ofMillis(200))
                      .build())
              .delay(Duration.ZERO)
              .compensation(Compensation.builder("checkout", order + "/void-authorisation").build())
              .compensation(
                  Compensation.builder("stock", order + "/release").payload(order).build())
              .build());
      checkout.start();
      stock.start();

      // Wait until the charge's chain says every compensation succeeded.
      long end = System.currentTimeMillis() + 60_000;
      while (true) {
        Retry charge = client.get("checkout", order + "/charge");
        if (!charge.hasChain()) {
          throw new IllegalStateException("the charge carries its compensations");
        }
        if (charge.getChain().getCompensationsList().stream()
            .allMatch(c -> c.getStatus() == RetryStatus.RETRY_STATUS_SUCCEEDED)) {
          System.out.printf(
              "charge %s after %d attempts; saga compensated%n",
              charge.getStatus(), charge.getAttempt());
          break;
        }
        if (System.currentTimeMillis() > end) {
          throw new IllegalStateException("the saga did not finish");
        }
        Thread.sleep(200);
      }
    } // stops the executors (letting running handlers ack), then closes the client
    List<String> expected = List.of(order + "/void-authorisation", order + "/release");
    if (!expected.equals(List.copyOf(ran))) {
      throw new IllegalStateException("compensations ran " + ran + ", expected " + expected);
    }
  }
}
