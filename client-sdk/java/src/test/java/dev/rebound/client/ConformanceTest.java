package dev.rebound.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.rebound.v1.CompensationChain;
import dev.rebound.v1.ListRetriesRequest;
import dev.rebound.v1.Retry;
import dev.rebound.v1.RetryStatus;
import dev.rebound.v1.RetrySummary;
import io.grpc.Status;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The scenarios of client-sdk/CONFORMANCE.md, against live nodes (named as there). */
class ConformanceTest {
  private static final String SERVICE = "javasdk";
  private TestCluster cluster;
  private final List<AutoCloseable> closing = new ArrayList<>();

  @BeforeEach
  void setUp() throws Exception {
    cluster = new TestCluster();
  }

  @AfterEach
  void tearDown() throws Exception {
    for (AutoCloseable c : closing) {
      c.close();
    }
    cluster.close();
  }

  private ReboundClient client(String address) {
    ReboundClient c = ReboundClient.builder(address).build();
    closing.add(c);
    return c;
  }

  private static EnqueueRequest.Builder req(String tx) {
    return EnqueueRequest.builder(SERVICE, tx);
  }

  /** Runs the executor until done holds (failing after within), then stops it. */
  private static void runUntil(Executor ex, Duration within, BooleanSupplier done)
      throws InterruptedException {
    ex.start();
    long end = System.currentTimeMillis() + within.toMillis();
    try {
      while (!done.getAsBoolean()) {
        if (ex.failure() != null) {
          fail("the executor stopped: " + ex.failure());
        }
        if (System.currentTimeMillis() > end) {
          fail(
              "timed out: delivered "
                  + ex.delivered()
                  + ", acked "
                  + ex.acked()
                  + ", nodes "
                  + ex.nodes());
        }
        Thread.sleep(50);
      }
    } finally {
      ex.stop();
    }
  }

  @Test
  void enqueueGetCancel() throws Exception {
    ReboundClient c = client(cluster.start());
    Enqueued e =
        c.enqueue(
            req("tx-1")
                .payload("charge 7f3a")
                .delay(Duration.ofMinutes(5))
                .attribute("tenant", "acme")
                .attempt(2)
                .lastError("card processor timed out")
                .policy(
                    RetryPolicy.builder()
                        .maxAttempts(8)
                        .initialBackoff(Duration.ofSeconds(30))
                        .build())
                .build());
    assertEquals("tx-1", e.transactionId());
    assertFalse(e.deduplicated());
    assertTrue(e.dueTime().isAfter(Instant.now()));
    Retry r = c.get(SERVICE, "tx-1");
    assertEquals(RetryStatus.RETRY_STATUS_SCHEDULED, r.getStatus());
    assertEquals(2, r.getAttempt());
    assertEquals("charge 7f3a", r.getPayload().toStringUtf8());
    assertEquals(Map.of("tenant", "acme"), r.getAttributesMap());
    assertEquals("card processor timed out", r.getLastError());
    assertEquals(8, r.getPolicy().getMaxAttempts());
    assertEquals(30, r.getPolicy().getInitialBackoff().getSeconds());
    assertEquals(
        new Cancelled(RetryStatus.RETRY_STATUS_CANCELLED, true), c.cancel(SERVICE, "tx-1"));
    assertEquals(
        new Cancelled(RetryStatus.RETRY_STATUS_CANCELLED, false),
        c.cancelAsync(SERVICE, "tx-1").get());
  }

  @Test
  void listFiltersAndPages() throws Exception {
    ReboundClient c = client(cluster.start());
    for (int i = 0; i < 7; i++) {
      c.enqueue(
          req("l-" + i)
              .delay(Duration.ofHours(1))
              .attribute("customer", i % 2 == 0 ? "42" : "7")
              .lastError(i < 3 ? "card declined" : "gateway: 503")
              .build());
    }
    List<String> all = new ArrayList<>();
    for (RetrySummary r :
        c.listRetries(ListRetriesRequest.newBuilder().setService(SERVICE).setPageSize(2).build())) {
      all.add(r.getTransactionId());
    }
    Collections.sort(all);
    assertEquals(List.of("l-0", "l-1", "l-2", "l-3", "l-4", "l-5", "l-6"), all);
    List<String> mine = new ArrayList<>();
    ListRetriesRequest f =
        ListRetriesRequest.newBuilder()
            .setService(SERVICE)
            .putAttributes("customer", "42")
            .setErrorContains("declined")
            .build();
    for (RetrySummary r : c.listRetries(f)) {
      assertEquals(RetryStatus.RETRY_STATUS_SCHEDULED, r.getStatus());
      assertEquals(1, r.getAttempt());
      mine.add(r.getTransactionId());
    }
    Collections.sort(mine);
    assertEquals(List.of("l-0", "l-2"), mine);
    ReboundException e =
        assertThrows(
            ReboundException.class,
            () ->
                c.listRetries(
                        ListRetriesRequest.newBuilder()
                            .setService(SERVICE)
                            .setPageSize(501)
                            .build())
                    .iterator()
                    .hasNext());
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
  }

  @Test
  void deduplicatedReenqueue() throws Exception {
    ReboundClient c = client(cluster.start());
    Instant due = Instant.now().plus(Duration.ofMinutes(10));
    assertFalse(c.enqueue(req("tx-dup").dueTime(due).build()).deduplicated());
    assertTrue(c.enqueueAsync(req("tx-dup").dueTime(due).build()).get().deduplicated());
    assertEquals(2, c.get(SERVICE, "tx-dup").getEnqueueCount());
    List<BatchResult> results =
        c.enqueueBatch(List.of(req("tx-dup").dueTime(due).build(), req("tx-new").build()));
    assertTrue(results.get(0).enqueued().deduplicated());
    assertFalse(results.get(1).enqueued().deduplicated());
  }

  @Test
  void badInputNamesField() throws Exception {
    ReboundClient c = client(cluster.start());
    ReboundException e =
        assertThrows(ReboundException.class, () -> c.enqueue(req("x".repeat(300)).build()));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
    assertTrue(e.serverMessage().contains("transaction_id"), e.serverMessage());
    assertTrue(e.serverMessage().contains("256"), e.serverMessage());
    assertFalse(e.isRetryable());
    e =
        assertThrows(
            ReboundException.class,
            () ->
                c.enqueue(
                    req("tx-bad").policy(RetryPolicy.builder().multiplier(0.5).build()).build()));
    assertTrue(e.serverMessage().contains("multiplier"), e.serverMessage());
    e = assertThrows(ReboundException.class, () -> c.get(SERVICE, "tx-bad"));
    assertEquals(Status.Code.NOT_FOUND, e.code());
    List<BatchResult> results =
        c.enqueueBatch(
            List.of(EnqueueRequest.builder("bad service!", "tx-a").build(), req("tx-b").build()));
    assertNotNull(results.get(0).error());
    assertEquals(Status.Code.INVALID_ARGUMENT, results.get(0).error().code());
    assertTrue(results.get(0).error().serverMessage().contains("service"));
    assertTrue(results.get(1).ok());
    assertThrows(
        IllegalStateException.class,
        () -> req("tx-c").delay(Duration.ofSeconds(1)).dueTime(Instant.now()));
  }

  @Test
  void deliveryAndAck() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(req("tx-d").payload("p").attribute("k", "v").delay(Duration.ZERO).build());
    List<Job> jobs = Collections.synchronizedList(new ArrayList<>());
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  jobs.add(job);
                  return Outcome.success();
                })
            .concurrency(4)
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 1);
    assertEquals(1, jobs.size());
    Job job = jobs.get(0);
    assertEquals("tx-d", job.transactionId());
    assertEquals("p", new String(job.payload(), StandardCharsets.UTF_8));
    assertEquals(Map.of("k", "v"), job.attributes());
    assertEquals(2, job.attempt());
    assertEquals(node, job.node());
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-d").getStatus());
  }

  @Test
  void retryAfterReschedules() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(req("tx-r").delay(Duration.ZERO).build());
    List<long[]> seen = Collections.synchronizedList(new ArrayList<>());
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  seen.add(new long[] {job.attempt(), System.currentTimeMillis()});
                  return seen.size() == 1
                      ? Outcome.retryAfter(Duration.ofSeconds(2), "busy")
                      : Outcome.success();
                })
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 2);
    assertEquals(seen.get(0)[0] + 1, seen.get(1)[0]);
    assertTrue(seen.get(1)[1] - seen.get(0)[1] >= 2000);
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-r").getStatus());
  }

  @Test
  void snoozeUsesNoAttempt() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(
        req("tx-s")
            .delay(Duration.ZERO)
            .policy(RetryPolicy.builder().maxAttempts(2).build())
            .build());
    List<Integer> attempts = Collections.synchronizedList(new ArrayList<>());
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  attempts.add(job.attempt());
                  return attempts.size() < 3
                      ? Outcome.snooze(Duration.ofSeconds(1), "dependency in maintenance")
                      : Outcome.success();
                })
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 3);
    assertEquals(List.of(2, 2, 2), attempts);
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-s").getStatus());
  }

  @Test
  void dependencyHoldDefersWithoutUsingAttempts() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    String other = SERVICE + "-other";
    String gateway = "payments-gateway";
    RetryPolicy oneAttempt = RetryPolicy.builder().maxAttempts(2).build();
    c.enqueue(req("tx-h1").delay(Duration.ZERO).policy(oneAttempt).dependency(gateway).build());
    record Seen(String transactionId, int attempt, String dependency, long atNanos) {}
    List<Seen> seen = Collections.synchronizedList(new ArrayList<>());
    Executor.Handler handler =
        job -> {
          Seen s =
              new Seen(job.transactionId(), job.attempt(), job.dependency(), System.nanoTime());
          boolean first;
          synchronized (seen) {
            seen.add(s);
            first = seen.size() == 1;
          }
          if (first) {
            // The first answer holds the gateway for 2 s; the second retry naming it is
            // enqueued, in another service, while the hold lasts.
            c.enqueue(
                EnqueueRequest.builder(other, "tx-h2")
                    .delay(Duration.ZERO)
                    .policy(oneAttempt)
                    .dependency(gateway)
                    .build());
            return Outcome.hold(Duration.ofSeconds(2), "503, Retry-After: 2");
          }
          return Outcome.success();
        };
    Executor ex = Executor.builder(node, SERVICE, handler).build();
    Executor otherEx = Executor.builder(node, other, handler).build();
    otherEx.start();
    try {
      runUntil(ex, Duration.ofSeconds(60), () -> ex.acked() >= 2 && otherEx.acked() >= 1);
    } finally {
      otherEx.stop();
    }
    List<Seen> all;
    synchronized (seen) {
      all = List.copyOf(seen);
    }
    assertEquals(
        2, all.stream().filter(s -> s.transactionId().equals("tx-h1")).count(), all.toString());
    long heldAt = all.get(0).atNanos();
    for (Seen s : all) {
      assertEquals(gateway, s.dependency(), all.toString());
      // No attempt used by the hold.
      assertEquals(2, s.attempt(), all.toString());
    }
    // Nothing naming the gateway was delivered during the hold.
    for (Seen s : all.subList(1, all.size())) {
      assertTrue(
          Duration.ofNanos(s.atNanos() - heldAt).compareTo(Duration.ofMillis(1900)) >= 0,
          all.toString());
    }
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-h1").getStatus());
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(other, "tx-h2").getStatus());
  }

  @Test
  void compensationChainRunsInReverseOnExhaustion() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(
        EnqueueRequest.builder("saga-orders", "charge-1")
            .attempt(1)
            .policy(
                RetryPolicy.builder().maxAttempts(2).initialBackoff(Duration.ofMillis(100)).build())
            .delay(Duration.ZERO)
            // In the order they must run: the reverse of the steps they undo.
            .compensation(
                Compensation.builder("saga-undo", "refund-1").payload("refund charge-1").build())
            .compensation(
                Compensation.builder("saga-undo", "release-1").payload("release stock").build())
            .build());
    List<List<String>> undone = Collections.synchronizedList(new ArrayList<>());
    Executor orders =
        Executor.builder(node, "saga-orders", job -> Outcome.retry("card declined")).build();
    Executor undo =
        Executor.builder(
                node,
                "saga-undo",
                job -> {
                  undone.add(
                      List.of(
                          job.transactionId(), new String(job.payload(), StandardCharsets.UTF_8)));
                  return Outcome.success();
                })
            .build();
    orders.start();
    undo.start();
    try {
      long end = System.currentTimeMillis() + 40_000;
      while (true) {
        for (Executor ex : List.of(orders, undo)) {
          if (ex.failure() != null) {
            fail("the executor stopped: " + ex.failure());
          }
        }
        Retry step = c.get("saga-orders", "charge-1");
        if (step.hasChain()
            && step.getChain().getCompensationsList().stream()
                .allMatch(m -> m.getStatus() == RetryStatus.RETRY_STATUS_SUCCEEDED)) {
          break;
        }
        if (System.currentTimeMillis() > end) {
          fail("timed out waiting for both compensations to succeed: " + step + undone);
        }
        Thread.sleep(100);
      }
      // Each ran once: nothing more arrives.
      Thread.sleep(3000);
    } finally {
      orders.stop();
      undo.stop();
    }
    assertEquals(
        List.of(List.of("refund-1", "refund charge-1"), List.of("release-1", "release stock")),
        List.copyOf(undone));
    Retry step = c.get("saga-orders", "charge-1");
    assertEquals(RetryStatus.RETRY_STATUS_DEAD, step.getStatus());
    assertEquals(2, step.getAttempt());
    assertEquals(0, step.getChain().getPosition());
    assertEquals(2, step.getChain().getCompensationsCount());
    CompensationChain chain = c.get("saga-undo", "release-1").getChain();
    assertEquals("saga-orders", chain.getSagaService());
    assertEquals("charge-1", chain.getSagaTransactionId());
    assertEquals(2, chain.getPosition());
  }

  @Test
  void failedGoesToDeadLetters() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(req("tx-f").delay(Duration.ZERO).build());
    Executor ex =
        Executor.builder(
                node, SERVICE, job -> Outcome.fail("card declined").withErrorClass("card.declined"))
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 1);
    Retry r = c.get(SERVICE, "tx-f");
    assertEquals(RetryStatus.RETRY_STATUS_DEAD, r.getStatus());
    assertEquals("card declined", r.getLastError());
  }

  @Test
  void handlerExceptionRetries() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(
        req("tx-e")
            .delay(Duration.ZERO)
            .policy(RetryPolicy.builder().initialBackoff(Duration.ZERO).build())
            .build());
    List<Job> jobs = Collections.synchronizedList(new ArrayList<>());
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  jobs.add(job);
                  if (jobs.size() == 1) {
                    throw new IllegalStateException("inventory service unreachable");
                  }
                  return Outcome.success();
                })
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 2);
    assertEquals(jobs.get(0).attempt() + 1, jobs.get(1).attempt());
    assertTrue(
        jobs.get(1).lastError().contains("IllegalStateException: inventory service unreachable"),
        jobs.get(1).lastError());
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-e").getStatus());
  }

  @Test
  void twoNodesOneAddress() throws Exception {
    String a = cluster.start();
    String b = cluster.start();
    ReboundClient ca = client(a);
    ReboundClient cb = client(b);
    int n = 40;
    for (int i = 0; i < n; i++) {
      (i % 2 == 0 ? ca : cb).enqueue(req("tx-" + i).delay(Duration.ZERO).build());
    }
    Set<String> done = ConcurrentHashMap.newKeySet();
    Executor ex =
        Executor.builder(
                a,
                SERVICE,
                job -> {
                  done.add(job.transactionId());
                  return Outcome.success();
                })
            .ringRefresh(Duration.ofMillis(500))
            .build();
    List<String> both = new ArrayList<>(List.of(a, b));
    Collections.sort(both);
    runUntil(ex, Duration.ofSeconds(60), () -> done.size() == n && ex.nodes().equals(both));
  }

  @Test
  void stopDrainsInFlight() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    for (int i = 0; i < 3; i++) {
      c.enqueue(req("tx-" + i).delay(Duration.ZERO).build());
    }
    AtomicInteger started = new AtomicInteger();
    AtomicInteger finished = new AtomicInteger();
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  started.incrementAndGet();
                  Thread.sleep(1500);
                  finished.incrementAndGet();
                  return Outcome.success();
                })
            .concurrency(3)
            .build();
    ex.start();
    long end = System.currentTimeMillis() + 30_000;
    while (started.get() < 3) {
      assertTrue(System.currentTimeMillis() < end, "not all three started");
      Thread.sleep(20);
    }
    ex.stop();
    assertEquals(3, finished.get());
    assertEquals(3, ex.acked());
    for (int i = 0; i < 3; i++) {
      assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-" + i).getStatus());
    }
  }

  @Test
  void tokenRefusedAndAccepted() throws Exception {
    String node =
        cluster.start(
            Map.of("REBOUND_CREDENTIALS_FILE", cluster.credentials("payments", "s3cret", SERVICE)));
    for (String token : new String[] {null, "wrong"}) {
      ReboundClient c = ReboundClient.builder(node).token(token).build();
      closing.add(c);
      ReboundException e =
          assertThrows(
              ReboundException.class, () -> c.enqueue(req("tx-t").delay(Duration.ZERO).build()));
      assertEquals(Status.Code.UNAUTHENTICATED, e.code());
    }
    ReboundClient c = ReboundClient.builder(node).token("s3cret").build();
    closing.add(c);
    c.enqueue(req("tx-t").delay(Duration.ZERO).build());
    ReboundException denied =
        assertThrows(
            ReboundException.class,
            () -> c.enqueue(EnqueueRequest.builder("other", "tx-t").build()));
    assertEquals(Status.Code.PERMISSION_DENIED, denied.code());
    Executor refused =
        Executor.builder(node, SERVICE, job -> Outcome.success()).token("wrong").build();
    ReboundException e = assertThrows(ReboundException.class, refused::run);
    assertEquals(Status.Code.UNAUTHENTICATED, e.code());
    Executor ex = Executor.builder(node, SERVICE, job -> Outcome.success()).token("s3cret").build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 1);
  }

  @Test
  void longHandlerExtendsDeadline() throws Exception {
    String node = cluster.start();
    ReboundClient c = client(node);
    c.enqueue(
        req("tx-l")
            .delay(Duration.ZERO)
            .policy(RetryPolicy.builder().ackTimeout(Duration.ofSeconds(1)).build())
            .build());
    AtomicInteger deliveries = new AtomicInteger();
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  deliveries.incrementAndGet();
                  Thread.sleep(3500);
                  return Outcome.success();
                })
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 1);
    Retry r = c.get(SERVICE, "tx-l");
    assertEquals(1, deliveries.get());
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, r.getStatus());
    assertEquals(1, r.getDeliveryCount());
    assertInstanceOf(Retry.class, r);
  }

  @Test
  void tlsMutualAuth() throws Exception {
    Path certs = cluster.certs();
    Path creds = certs.resolve("credentials.toml");
    Files.writeString(
        creds, "[[credential]]\nname = \"sdk-client\"\nservices = [\"" + SERVICE + "\"]\n");
    String ca = certs.resolve("ca.pem").toString();
    String cert = certs.resolve("client.pem").toString();
    String key = certs.resolve("client.key").toString();
    String node =
        cluster.start(
            Map.of(
                "REBOUND_TLS_CERT_FILE", certs.resolve("node.pem").toString(),
                "REBOUND_TLS_KEY_FILE", certs.resolve("node.key").toString(),
                "REBOUND_TLS_CLIENT_CA_FILE", ca,
                "REBOUND_CREDENTIALS_FILE", creds.toString()));
    ReboundClient c = ReboundClient.builder(node).tls(ca).clientCertificate(cert, key).build();
    closing.add(c);
    c.enqueue(req("tx-tls").payload("over tls").delay(Duration.ZERO).build());
    List<String> payloads = Collections.synchronizedList(new ArrayList<>());
    Executor ex =
        Executor.builder(
                node,
                SERVICE,
                job -> {
                  payloads.add(new String(job.payload(), StandardCharsets.UTF_8));
                  return Outcome.success();
                })
            .tls(ca)
            .clientCertificate(cert, key)
            .build();
    runUntil(ex, Duration.ofSeconds(30), () -> ex.acked() >= 1);
    assertEquals(List.of("over tls"), payloads);
    assertEquals(RetryStatus.RETRY_STATUS_SUCCEEDED, c.get(SERVICE, "tx-tls").getStatus());
    for (String trusted : new String[] {ca, certs.resolve("other-ca.pem").toString()}) {
      ReboundClient refused = ReboundClient.builder(node).tls(trusted).build();
      closing.add(refused);
      ReboundException e =
          assertThrows(
              ReboundException.class,
              () -> refused.enqueue(req("tx-tls-refused").delay(Duration.ZERO).build()),
              "trusting " + trusted + " without a client certificate");
      assertEquals(Status.Code.UNAVAILABLE, e.code(), trusted + ": " + e.getMessage());
    }
  }

  @Test
  void overloadIsShedAndRetried() throws Exception {
    String metrics = "127.0.0.1:" + TestCluster.freePort();
    // Room for about one 0.85 MiB batch at a time, each byte counted six times (the node's
    // minimum is 6 x (4 x 16 KiB + 1 MiB)).
    String node =
        cluster.start(
            Map.of(
                "REBOUND_MAX_PAYLOAD_BYTES", "16384",
                "REBOUND_MAX_INFLIGHT_BYTES", "7200000",
                "REBOUND_HTTP_LISTEN", metrics));
    // Eight batches contend for room for one: the last through may be refused about once per
    // batch ahead of it, and more on a slow machine, so a bound above the default 10 attempts
    // (the call's 30 s deadline still bounds it).
    ReboundClient c = ReboundClient.builder(node).overloadRetry(50, Duration.ofSeconds(30)).build();
    closing.add(c);
    byte[] payload = "x".repeat(16 << 10).getBytes(StandardCharsets.UTF_8);
    int batches = 8;
    int items = 50;
    // Eight batches at once shed some of them; the client's retries get every one through.
    // Rounds until the node has counted a shed request (the first one nearly always does).
    for (int round = 0; ; round++) {
      List<CompletableFuture<List<BatchResult>>> sent = new ArrayList<>();
      for (int b = 0; b < batches; b++) {
        List<EnqueueRequest> batch = new ArrayList<>();
        for (int i = 0; i < items; i++) {
          batch.add(
              req("tx-" + round + "-" + b + "-" + i)
                  .payload(payload)
                  .delay(Duration.ofMinutes(10))
                  .build());
        }
        sent.add(c.enqueueBatchAsync(batch));
      }
      for (int b = 0; b < batches; b++) {
        List<BatchResult> results = sent.get(b).get();
        assertEquals(items, results.size());
        for (BatchResult r : results) {
          assertTrue(r.ok(), "round " + round + ", batch " + b + ": " + r.error());
        }
      }
      for (String tx : new String[] {"tx-%d-0-0", "tx-%d-3-17", "tx-%d-7-49"}) {
        Retry r = c.get(SERVICE, String.format(tx, round));
        assertEquals(RetryStatus.RETRY_STATUS_SCHEDULED, r.getStatus(), String.format(tx, round));
        assertEquals(16 << 10, r.getPayload().size());
      }
      double shed = shedRequests(metrics);
      if (shed > 0) {
        return;
      }
      assertTrue(
          round < 4, (round + 1) + " rounds of " + batches + " batches at once, and none was shed");
    }
  }

  /** rebound_requests_shed_total{reason="inflight_bytes"} from a node's /metrics (0: absent). */
  private static double shedRequests(String address) throws Exception {
    HttpResponse<String> r =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create("http://" + address + "/metrics")).build(),
                HttpResponse.BodyHandlers.ofString());
    assertEquals(200, r.statusCode(), r.body());
    for (String line : r.body().split("\n")) {
      if (line.startsWith("rebound_requests_shed_total{")
          && line.contains("reason=\"inflight_bytes\"")) {
        String[] fields = line.trim().split("\\s+");
        return Double.parseDouble(fields[fields.length - 1]);
      }
    }
    return 0;
  }
}
