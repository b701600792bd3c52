package dev.rebound.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rebound.v1.AckRequest;
import dev.rebound.v1.AckResponse;
import dev.rebound.v1.Delivery;
import dev.rebound.v1.EnqueueRetryRequest;
import dev.rebound.v1.EnqueueRetryResponse;
import dev.rebound.v1.ExecutorServiceGrpc;
import dev.rebound.v1.GetRetryRequest;
import dev.rebound.v1.Retry;
import dev.rebound.v1.RetryServiceGrpc;
import dev.rebound.v1.SubscribeRequest;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The overload retries against an in-process gRPC server that refuses calls as a shedding node does
 * (RESOURCE_EXHAUSTED in a trailers-only response, with or without a grpc-retry-pushback-ms hint).
 * The live node's shedding is ConformanceTest.overloadIsShedAndRetried.
 */
class OverloadRetryTest {
  private final List<AutoCloseable> closing = new ArrayList<>();
  private final List<Server> servers = new ArrayList<>();

  @AfterEach
  void tearDown() throws Exception {
    for (AutoCloseable c : closing) {
      c.close();
    }
    for (Server s : servers) {
      s.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /** Answers its first {@code refuse} calls with {@code code} and the hint (none when null). */
  static final class Refuser {
    final Status.Code code;
    final String hint;
    final int refuse;
    final List<Long> calls = new ArrayList<>();

    Refuser(Status.Code code, String hint, int refuse) {
      this.code = code;
      this.hint = hint;
      this.refuse = refuse;
    }

    synchronized boolean answer(StreamObserver<?> o) {
      calls.add(System.nanoTime());
      if (calls.size() > refuse) {
        return true;
      }
      Metadata trailers = new Metadata();
      if (hint != null) {
        trailers.put(OverloadRetry.PUSHBACK, hint);
      }
      o.onError(
          Status.fromCode(code)
              .withDescription("the node is holding its bytes (REBOUND_MAX_INFLIGHT_BYTES)")
              .asRuntimeException(trailers));
      return false;
    }

    synchronized int attempts() {
      return calls.size();
    }

    /** The pauses between attempts, in ms. */
    synchronized List<Long> gaps() {
      List<Long> out = new ArrayList<>();
      for (int i = 1; i < calls.size(); i++) {
        out.add(TimeUnit.NANOSECONDS.toMillis(calls.get(i) - calls.get(i - 1)));
      }
      return out;
    }
  }

  private String serve(Refuser f) throws Exception {
    Server s =
        NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
            .addService(
                new RetryServiceGrpc.RetryServiceImplBase() {
                  @Override
                  public void enqueueRetry(
                      EnqueueRetryRequest r, StreamObserver<EnqueueRetryResponse> o) {
                    if (f.answer(o)) {
                      o.onNext(
                          EnqueueRetryResponse.newBuilder()
                              .setTransactionId(r.getTransactionId())
                              .build());
                      o.onCompleted();
                    }
                  }

                  @Override
                  public void getRetry(GetRetryRequest r, StreamObserver<Retry> o) {
                    if (f.answer(o)) {
                      o.onNext(Retry.newBuilder().setTransactionId(r.getTransactionId()).build());
                      o.onCompleted();
                    }
                  }
                })
            .addService(
                new ExecutorServiceGrpc.ExecutorServiceImplBase() {
                  @Override
                  public void subscribe(SubscribeRequest r, StreamObserver<Delivery> o) {
                    o.onNext(
                        Delivery.newBuilder()
                            .setDeliveryId("d-1")
                            .setService(r.getService())
                            .setTransactionId("tx")
                            .setAttempt(1)
                            .build());
                  }

                  @Override
                  public void ack(AckRequest r, StreamObserver<AckResponse> o) {
                    if (f.answer(o)) {
                      o.onNext(AckResponse.getDefaultInstance());
                      o.onCompleted();
                    }
                  }
                })
            .build()
            .start();
    servers.add(s);
    return "127.0.0.1:" + s.getPort();
  }

  private ReboundClient client(ReboundClient.Builder b) {
    ReboundClient c = b.build();
    closing.add(c);
    return c;
  }

  private static EnqueueRequest req() {
    return EnqueueRequest.builder("svc", "tx").build();
  }

  @Test
  void waitsThePushbackHint() throws Exception {
    Refuser f = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "200", 2);
    ReboundClient c = client(ReboundClient.builder(serve(f)));
    assertEquals("tx", c.enqueue(req()).transactionId());
    assertEquals(3, f.attempts());
    for (long g : f.gaps()) {
      assertTrue(g >= 200 && g < 300 + 300, "waits " + f.gaps() + " for a 200 ms hint");
    }
    // The same through the asynchronous form.
    Refuser g = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "200", 2);
    ReboundClient a = client(ReboundClient.builder(serve(g)));
    assertEquals("tx", a.enqueueAsync(req()).get().transactionId());
    assertEquals(3, g.attempts());
    for (long gap : g.gaps()) {
      assertTrue(gap >= 200 && gap < 300 + 300, "async waits " + g.gaps());
    }
  }

  @Test
  void withoutHintBacksOff() throws Exception {
    for (String hint : new String[] {null, "soon", "-5", "1.5", ""}) {
      Refuser f = new Refuser(Status.Code.RESOURCE_EXHAUSTED, hint, 3);
      ReboundClient c = client(ReboundClient.builder(serve(f)));
      assertEquals("tx", c.get("svc", "tx").getTransactionId());
      List<Long> g = f.gaps();
      // 100, 200 and 400 ms, each +-20 %.
      assertEquals(3, g.size(), "hint " + hint);
      assertTrue(
          g.get(0) >= 79 && g.get(1) >= 159 && g.get(2) >= 319 && g.get(2) < 480 + 300,
          "hint " + hint + ": waits " + g);
    }
  }

  @Test
  void retriesAreBounded() throws Exception {
    // By the attempts.
    Refuser f = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "0", Integer.MAX_VALUE);
    ReboundClient c =
        client(ReboundClient.builder(serve(f)).overloadRetry(3, Duration.ofMinutes(1)));
    ReboundException e = assertThrows(ReboundException.class, () -> c.enqueue(req()));
    assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.code());
    assertTrue(e.isRetryable());
    assertTrue(e.serverMessage().contains("REBOUND_MAX_INFLIGHT_BYTES"), e.serverMessage());
    assertEquals(3, f.attempts());
    ExecutionException async =
        assertThrows(ExecutionException.class, () -> c.enqueueAsync(req()).get());
    assertInstanceOf(ReboundException.class, async.getCause());
    assertEquals(6, f.attempts());
    // By the total time: a retry at 300-450 ms, none that would start after 500 ms.
    Refuser t = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "300", Integer.MAX_VALUE);
    ReboundClient ct =
        client(ReboundClient.builder(serve(t)).overloadRetry(100, Duration.ofMillis(500)));
    assertEquals(
        Status.Code.RESOURCE_EXHAUSTED,
        assertThrows(ReboundException.class, () -> ct.enqueue(req())).code());
    assertEquals(2, t.attempts());
    // By the call's deadline: a wait that would pass it is not started.
    Refuser d = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "2000", Integer.MAX_VALUE);
    ReboundClient cd = client(ReboundClient.builder(serve(d)).timeout(Duration.ofSeconds(1)));
    long start = System.nanoTime();
    assertEquals(
        Status.Code.RESOURCE_EXHAUSTED,
        assertThrows(ReboundException.class, () -> cd.enqueue(req())).code());
    assertEquals(1, d.attempts());
    assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(1));
    // Off.
    Refuser o = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "0", Integer.MAX_VALUE);
    ReboundClient co = client(ReboundClient.builder(serve(o)).overloadRetry(1, Duration.ZERO));
    assertThrows(ReboundException.class, () -> co.enqueue(req()));
    assertEquals(1, o.attempts());
  }

  @Test
  void onlyResourceExhaustedIsRetriedForOverload() throws Exception {
    for (Status.Code code :
        new Status.Code[] {
          Status.Code.UNAVAILABLE, Status.Code.FAILED_PRECONDITION, Status.Code.INTERNAL
        }) {
      Refuser f = new Refuser(code, "0", 1);
      ReboundClient c = client(ReboundClient.builder(serve(f)));
      assertEquals(code, assertThrows(ReboundException.class, () -> c.enqueue(req())).code());
      assertEquals(1, f.attempts(), code.toString());
    }
  }

  @Test
  void acksAreRetriedAfterTheHint() throws Exception {
    Refuser f = new Refuser(Status.Code.RESOURCE_EXHAUSTED, "100", 2);
    Executor ex =
        Executor.builder(serve(f), "svc", job -> Outcome.success()).followRing(false).build();
    ex.start();
    try {
      long end = System.currentTimeMillis() + 10_000;
      while (ex.acked() < 1) {
        assertTrue(System.currentTimeMillis() < end, "not acked: " + f.attempts() + " attempts");
        Thread.sleep(20);
      }
    } finally {
      ex.stop();
    }
    assertEquals(3, f.attempts());
    for (long g : f.gaps()) {
      assertTrue(g >= 100, "waits " + f.gaps() + " for a 100 ms hint");
    }
  }

  @Test
  void pushbackParsing() {
    assertEquals(-1, OverloadRetry.pushbackMs(null));
    assertEquals(-1, OverloadRetry.pushbackMs(new Metadata()));
    String[][] cases = {
      {"250", "250"},
      {"0", "0"},
      {"-1", "-1"},
      {"soon", "-1"},
      {"99999999999999999999", "-1"},
      {"86400000", "3600000"},
    };
    for (String[] c : cases) {
      Metadata m = new Metadata();
      m.put(OverloadRetry.PUSHBACK, c[0]);
      assertEquals(Long.parseLong(c[1]), OverloadRetry.pushbackMs(m), c[0]);
    }
    Metadata twice = new Metadata();
    twice.put(OverloadRetry.PUSHBACK, "250");
    twice.put(OverloadRetry.PUSHBACK, "300");
    assertEquals(-1, OverloadRetry.pushbackMs(twice));
    long capped = OverloadRetry.waitMs(20, -1);
    assertTrue(capped >= 4000 && capped <= 6000, "capped at 5 s +-20 %: " + capped);
  }
}
