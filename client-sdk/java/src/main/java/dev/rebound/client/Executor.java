package dev.rebound.client;

import dev.rebound.v1.AckBatchRequest;
import dev.rebound.v1.AckBatchResponse;
import dev.rebound.v1.AckBatchResult;
import dev.rebound.v1.AckRequest;
import dev.rebound.v1.Delivery;
import dev.rebound.v1.ExecutorServiceGrpc;
import dev.rebound.v1.ExtendDeadlineRequest;
import dev.rebound.v1.ExtendDeadlineResponse;
import dev.rebound.v1.GetRingRequest;
import dev.rebound.v1.Ring;
import dev.rebound.v1.RingNode;
import dev.rebound.v1.SubscribeRequest;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Runs a handler for every due retry of a service: subscribes to every node of the ring (and
 * follows joins and leaves), runs at most {@code concurrency} handlers at once, extends long
 * handlers' deadlines, acknowledges with {@code AckBatch} when acks queue up, reconnects with
 * jittered backoff, and on {@link #stop()} lets running handlers finish and ack. An ack, ack batch
 * or deadline extension the node answers RESOURCE_EXHAUSTED is tried again after the node's {@code
 * grpc-retry-pushback-ms} hint, within {@link Builder#overloadRetry} (default 10 attempts, 30 s).
 *
 * <pre>{@code
 * Executor executor = Executor.builder("127.0.0.1:50051", "payments", job -> Outcome.success())
 *     .concurrency(8)
 *     .build();
 * executor.start();
 * // ...
 * executor.stop(); // drains what is in flight
 * }</pre>
 */
public final class Executor implements AutoCloseable {
  /** Runs one job. An exception it throws becomes RETRY with its message. */
  @FunctionalInterface
  public interface Handler {
    Outcome handle(Job job) throws Exception;
  }

  private static final Logger LOG = Logger.getLogger(Executor.class.getName());
  private static final int MAX_ACK_BATCH = 500;
  private static final long RPC_TIMEOUT_MS = 10_000;

  private final Connection connection;
  private final String service;
  private final Handler handler;
  private final int concurrency;
  private final String executorId;
  private final boolean followRing;
  private final Duration ringRefresh;
  private final Duration drainTimeout;
  private final OverloadRetry overload;

  private final Map<String, Node> nodes = new ConcurrentHashMap<>();
  private final Semaphore permits;
  private final ExecutorService handlers;
  private final ScheduledExecutorService timers;
  private final AtomicInteger running = new AtomicInteger();
  private final AtomicLong delivered = new AtomicLong();
  private final AtomicLong ackedGone = new AtomicLong();
  private final AtomicReference<ReboundException> fatal = new AtomicReference<>();
  private final Object lock = new Object();
  private volatile boolean stopping;
  private volatile boolean started;
  private ManagedChannel seed;
  private ScheduledFuture<?> ringTask;
  private Thread stopper;
  private final java.util.concurrent.CountDownLatch drained =
      new java.util.concurrent.CountDownLatch(1);

  private Executor(Builder b) {
    this.connection = b.connection;
    this.service = b.service;
    this.handler = b.handler;
    this.concurrency = b.concurrency;
    this.executorId = b.executorId;
    this.followRing = b.followRing;
    this.ringRefresh = b.ringRefresh;
    this.drainTimeout = b.drainTimeout;
    this.overload = b.overload;
    this.permits = new Semaphore(concurrency);
    this.handlers = Executors.newFixedThreadPool(concurrency, daemon("rebound-handler"));
    this.timers = Executors.newScheduledThreadPool(2, daemon("rebound-timer"));
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, name + "-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
  }

  public static Builder builder(String address, String service, Handler handler) {
    return new Builder(address, service, handler);
  }

  /** Deliveries received so far. */
  public long delivered() {
    return delivered.get();
  }

  /** Acks the nodes accepted so far. */
  public long acked() {
    long n = ackedGone.get();
    for (Node node : nodes.values()) {
      n += node.acked.get();
    }
    return n;
  }

  /** The addresses subscribed to now. */
  public List<String> nodes() {
    TreeSet<String> out = new TreeSet<>();
    for (Node n : nodes.values()) {
      if (!n.retiring) {
        out.add(n.address);
      }
    }
    return new ArrayList<>(out);
  }

  /** The failure that stopped the executor (a refused Subscribe), if any. */
  public ReboundException failure() {
    return fatal.get();
  }

  /** Subscribes and starts handling; returns at once. */
  public void start() {
    synchronized (lock) {
      if (started) {
        throw new IllegalStateException("executor already started");
      }
      started = true;
      seed = connection.open();
      refresh();
      if (followRing) {
        long every = ringRefresh.toMillis();
        ringTask =
            timers.scheduleWithFixedDelay(
                this::refresh,
                (long) (every * (0.8 + 0.4 * ThreadLocalRandom.current().nextDouble())),
                every,
                TimeUnit.MILLISECONDS);
      }
    }
  }

  /**
   * Starts, and blocks until {@link #stop()} (from another thread) has drained; throws the {@link
   * ReboundException} of a Subscribe that retrying cannot fix (INVALID_ARGUMENT, UNIMPLEMENTED,
   * UNAUTHENTICATED, PERMISSION_DENIED).
   */
  public void run() throws InterruptedException {
    start();
    synchronized (lock) {
      while (!stopping) {
        lock.wait();
      }
    }
    stop();
    ReboundException e = fatal.get();
    if (e != null) {
      throw e;
    }
  }

  // The ring.

  private List<String> ring(ManagedChannel channel) {
    try {
      Ring r =
          ExecutorServiceGrpc.newBlockingStub(channel)
              .withDeadlineAfter(RPC_TIMEOUT_MS, TimeUnit.MILLISECONDS)
              .getRing(GetRingRequest.getDefaultInstance());
      TreeSet<String> out = new TreeSet<>();
      for (RingNode n : r.getNodesList()) {
        if (!n.getAddress().isEmpty()) {
          out.add(n.getAddress());
        }
      }
      return out.isEmpty() ? null : new ArrayList<>(out);
    } catch (StatusRuntimeException e) {
      return null;
    }
  }

  private void refresh() {
    if (stopping) {
      return;
    }
    List<String> addrs = followRing ? ring(seed) : null;
    if (addrs == null && followRing) {
      for (Node n : nodes.values()) {
        if (!n.retiring && (addrs = ring(n.channel)) != null) {
          break;
        }
      }
    }
    synchronized (lock) {
      if (stopping) {
        return;
      }
      if (addrs == null) {
        if (!nodes.isEmpty()) {
          return; // a failed GetRing leaves the subscriptions as they are
        }
        addrs = List.of(connection.address);
      }
      for (String a : addrs) {
        nodes.computeIfAbsent(a, this::subscribe);
      }
      for (Node n : nodes.values()) {
        if (!addrs.contains(n.address) && !n.retiring) {
          LOG.info(() -> "node " + n.address + " left the ring: unsubscribing once its jobs ack");
          n.retiring = true;
          Thread t = new Thread(() -> retire(n), "rebound-retire");
          t.setDaemon(true);
          t.start();
        }
      }
    }
  }

  private Node subscribe(String address) {
    Node n = new Node(address, connection.copyFor(address).open());
    n.reader.start();
    n.acker.start();
    return n;
  }

  private void retire(Node n) {
    try {
      n.awaitIdle(Long.MAX_VALUE);
      n.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (nodes.remove(n.address, n)) {
      ackedGone.addAndGet(n.acked.get());
    }
  }

  /** One subscription, with a channel, a reader thread and an ack sender of its own. */
  private final class Node {
    final String address;
    final ManagedChannel channel;
    final ExecutorServiceGrpc.ExecutorServiceBlockingStub stub;
    final LinkedBlockingQueue<AckRequest> acks = new LinkedBlockingQueue<>();
    final AtomicLong acked = new AtomicLong();
    final AtomicInteger held = new AtomicInteger();
    final Thread reader;
    final Thread acker;
    volatile Context.CancellableContext stream;
    volatile boolean retiring;
    volatile boolean closing;

    Node(String address, ManagedChannel channel) {
      this.address = address;
      this.channel = channel;
      this.stub = ExecutorServiceGrpc.newBlockingStub(channel);
      this.reader = new Thread(this::read, "rebound-subscribe-" + address);
      this.acker = new Thread(this::sendAcks, "rebound-ack-" + address);
      reader.setDaemon(true);
      acker.setDaemon(true);
    }

    void read() {
      int attempt = 0;
      SubscribeRequest request =
          SubscribeRequest.newBuilder()
              .setService(service)
              .setExecutorId(executorId)
              .setMaxInFlight(concurrency)
              .build();
      while (!stopping && !retiring && !closing) {
        Context.CancellableContext ctx = Context.current().withCancellation();
        stream = ctx;
        try {
          Context previous = ctx.attach();
          try {
            Iterator<Delivery> it = stub.subscribe(request);
            while (it.hasNext()) {
              Delivery d = it.next();
              attempt = 0;
              if (stopping || retiring) {
                continue; // the node redelivers it once the stream closes
              }
              deliver(d);
            }
          } finally {
            ctx.detach(previous);
          }
        } catch (StatusRuntimeException e) {
          if (ctx.isCancelled() || closing) {
            return;
          }
          Status.Code code = e.getStatus().getCode();
          if (code == Status.Code.INVALID_ARGUMENT
              || code == Status.Code.UNIMPLEMENTED
              || code == Status.Code.UNAUTHENTICATED
              || code == Status.Code.PERMISSION_DENIED) {
            LOG.warning(() -> "subscribe to " + address + " refused: " + e.getStatus());
            fatal.compareAndSet(null, ReboundException.from(e));
            requestStop();
            return;
          }
        } catch (InterruptedException e) {
          return;
        } finally {
          ctx.cancel(null);
        }
        attempt++;
        try {
          Thread.sleep(backoffMs(attempt));
        } catch (InterruptedException e) {
          return;
        }
      }
    }

    void deliver(Delivery d) throws InterruptedException {
      long received = System.currentTimeMillis();
      held.incrementAndGet();
      delivered.incrementAndGet();
      permits.acquire();
      if (stopping) {
        permits.release();
        done();
        return;
      }
      running.incrementAndGet();
      Job job = Job.of(d, address);
      handlers.execute(() -> handle(this, job, received));
    }

    void done() {
      if (held.decrementAndGet() == 0) {
        synchronized (this) {
          notifyAll();
        }
      }
    }

    synchronized void awaitIdle(long millis) throws InterruptedException {
      long end = millis == Long.MAX_VALUE ? Long.MAX_VALUE : System.currentTimeMillis() + millis;
      while (held.get() > 0) {
        long left = end - System.currentTimeMillis();
        if (left <= 0) {
          return;
        }
        wait(Math.min(left, 1000));
      }
    }

    void sendAcks() {
      while (true) {
        AckRequest first;
        try {
          first = acks.poll(50, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
          return;
        }
        if (first == null) {
          if (closing) {
            return;
          }
          continue;
        }
        List<AckRequest> batch = new ArrayList<>();
        batch.add(first);
        acks.drainTo(batch, MAX_ACK_BATCH - 1);
        send(batch);
      }
    }

    void send(List<AckRequest> batch) {
      for (int attempt = 0; ; attempt++) {
        try {
          // RESOURCE_EXHAUSTED is retried here, after the node's hint, up to the overload bound.
          if (batch.size() == 1) {
            overload.call(
                null,
                () ->
                    stub.withDeadlineAfter(RPC_TIMEOUT_MS, TimeUnit.MILLISECONDS)
                        .ack(batch.get(0)));
            acked.incrementAndGet();
          } else {
            AckBatchRequest request = AckBatchRequest.newBuilder().addAllAcks(batch).build();
            AckBatchResponse r =
                overload.call(
                    null,
                    () ->
                        stub.withDeadlineAfter(RPC_TIMEOUT_MS, TimeUnit.MILLISECONDS)
                            .ackBatch(request));
            for (AckBatchResult item : r.getResultsList()) {
              if (item.hasResponse()) {
                acked.incrementAndGet();
              }
            }
          }
          return;
        } catch (StatusRuntimeException e) {
          // UNAVAILABLE and DEADLINE_EXCEEDED: a few more tries; RESOURCE_EXHAUSTED has had its
          // retries (within the overload bound) already.
          Status.Code code = e.getStatus().getCode();
          if (ReboundException.isRetryable(code)
              && code != Status.Code.RESOURCE_EXHAUSTED
              && attempt < 5) {
            try {
              Thread.sleep(backoffMs(attempt));
            } catch (InterruptedException ie) {
              return;
            }
            continue;
          }
          // NOT_FOUND / FAILED_PRECONDITION: the delivery went to another executor.
          LOG.log(Level.INFO, "ack not accepted: {0}", e.getStatus());
          return;
        }
      }
    }

    /** Sends what is queued, closes the stream and the channel. */
    void close() throws InterruptedException {
      closing = true;
      acker.join();
      Context.CancellableContext s = stream;
      if (s != null) {
        s.cancel(null);
      }
      reader.interrupt();
      reader.join(5000);
      channel.shutdown();
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    }
  }

  private void handle(Node node, Job job, long received) {
    ScheduledFuture<?>[] extension = new ScheduledFuture<?>[1];
    Instant deadline = job.ackDeadline();
    if (deadline != null) {
      long span = Math.max(1000, deadline.toEpochMilli() - received);
      scheduleExtension(node, job, deadline.toEpochMilli(), span, extension);
    }
    Outcome outcome;
    try {
      Outcome o = handler.handle(job);
      outcome = o == null ? Outcome.success() : o;
    } catch (Exception e) {
      outcome = Outcome.retry(e.getClass().getSimpleName() + ": " + e.getMessage());
    } finally {
      synchronized (extension) {
        if (extension[0] != null) {
          extension[0].cancel(false);
        }
        extension[0] = null;
      }
      permits.release();
    }
    if (!Thread.currentThread().isInterrupted()) {
      node.acks.add(outcome.toAck(job.deliveryId()));
    }
    node.done();
    if (running.decrementAndGet() == 0) {
      synchronized (running) {
        running.notifyAll();
      }
    }
  }

  /** ExtendDeadline when half of the time left has passed, by the observed ack timeout. */
  private void scheduleExtension(
      Node node, Job job, long deadline, long span, ScheduledFuture<?>[] slot) {
    long wait = Math.max(50, (deadline - System.currentTimeMillis()) / 2);
    scheduleExtension(node, job, deadline, span, slot, wait, 1, 0);
  }

  /**
   * One ExtendDeadline after {@code wait} ms: {@code attempt} counts the attempts refused with
   * RESOURCE_EXHAUSTED in a row (from 1), which are retried on the timer (no thread waits) after
   * the node's hint, within the overload bound and before the ack deadline.
   */
  private void scheduleExtension(
      Node node,
      Job job,
      long deadline,
      long span,
      ScheduledFuture<?>[] slot,
      long wait,
      int attempt,
      long firstNanos) {
    synchronized (slot) {
      slot[0] =
          timers.schedule(
              () -> extend(node, job, deadline, span, slot, attempt, firstNanos),
              wait,
              TimeUnit.MILLISECONDS);
    }
  }

  private void extend(
      Node node,
      Job job,
      long deadline,
      long span,
      ScheduledFuture<?>[] slot,
      int attempt,
      long firstNanos) {
    long first = attempt == 1 ? System.nanoTime() : firstNanos;
    long next = deadline;
    try {
      ExtendDeadlineResponse r =
          node.stub
              .withDeadlineAfter(RPC_TIMEOUT_MS, TimeUnit.MILLISECONDS)
              .extendDeadline(
                  ExtendDeadlineRequest.newBuilder()
                      .setDeliveryId(job.deliveryId())
                      .setExtension(Times.duration(Duration.ofMillis(span)))
                      .build());
      Instant t = Times.instant(r.getAckDeadline());
      if (t != null) {
        next = t.toEpochMilli();
      }
    } catch (StatusRuntimeException e) {
      long left = deadline - System.currentTimeMillis();
      if (!ReboundException.isRetryable(e.getStatus().getCode()) || left < 0) {
        return;
      }
      long pause = overload.pause(attempt, first, e, left);
      if (pause >= 0) {
        synchronized (slot) {
          if (slot[0] != null) {
            scheduleExtension(node, job, deadline, span, slot, pause, attempt + 1, first);
          }
        }
        return;
      }
    }
    synchronized (slot) {
      if (slot[0] != null) {
        scheduleExtension(node, job, next, span, slot);
      }
    }
  }

  static long backoffMs(int attempt) {
    long limit = Math.min(5000, 100L << Math.min(attempt, 20));
    return ThreadLocalRandom.current().nextLong(limit + 1);
  }

  private void requestStop() {
    synchronized (lock) {
      stopping = true;
      lock.notifyAll();
    }
  }

  /**
   * Stops: no new handler starts, running ones finish and ack (up to the drain timeout; then they
   * are interrupted), then the streams close. Blocks until done; safe to call more than once.
   */
  public void stop() {
    Thread first;
    synchronized (lock) {
      stopping = true;
      lock.notifyAll();
      first = stopper;
      if (first == null) {
        stopper = Thread.currentThread();
      }
    }
    if (first != null) {
      if (first != Thread.currentThread()) {
        awaitDrained();
      }
      return;
    }
    if (ringTask != null) {
      ringTask.cancel(false);
    }
    try {
      long end = System.currentTimeMillis() + drainTimeout.toMillis();
      synchronized (running) {
        while (running.get() > 0 && System.currentTimeMillis() < end) {
          running.wait(Math.max(1, Math.min(100, end - System.currentTimeMillis())));
        }
      }
      if (running.get() > 0) {
        LOG.warning("handlers still running at the drain timeout: interrupted");
      }
      handlers.shutdownNow();
      handlers.awaitTermination(1, TimeUnit.SECONDS);
      for (Node n : nodes.values()) {
        n.close();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      timers.shutdownNow();
      if (seed != null) {
        seed.shutdownNow();
      }
      drained.countDown();
    }
  }

  private void awaitDrained() {
    try {
      drained.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void close() {
    stop();
  }

  /** Builds an {@link Executor}. */
  public static final class Builder {
    private final Connection connection;
    private final String service;
    private final Handler handler;
    private int concurrency = 16;
    private String executorId;
    private boolean followRing = true;
    private Duration ringRefresh = Duration.ofSeconds(5);
    private Duration drainTimeout = Duration.ofSeconds(30);
    private OverloadRetry overload = OverloadRetry.DEFAULT;

    private Builder(String address, String service, Handler handler) {
      this.connection = new Connection(address);
      this.service = service;
      this.handler = handler;
      String host = System.getenv().getOrDefault("HOSTNAME", "executor");
      this.executorId =
          host
              + "-"
              + ProcessHandle.current().pid()
              + "-"
              + Integer.toHexString(ThreadLocalRandom.current().nextInt(0x10000));
    }

    /** Handlers at once across all nodes, and each stream's max_in_flight (default 16). */
    public Builder concurrency(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("executor concurrency must be at least 1");
      }
      this.concurrency = n;
      return this;
    }

    public Builder executorId(String id) {
      this.executorId = id;
      return this;
    }

    /** Subscribe to every node GetRing lists (default true), or to the address only. */
    public Builder followRing(boolean on) {
      this.followRing = on;
      return this;
    }

    public Builder ringRefresh(Duration d) {
      this.ringRefresh = d;
      return this;
    }

    /** How long stop() lets running handlers finish and ack (default 30 s). */
    public Builder drainTimeout(Duration d) {
      this.drainTimeout = d;
      return this;
    }

    /**
     * Bounds the retries of an ack, ack batch or deadline extension the node answered
     * RESOURCE_EXHAUSTED: at most {@code maxAttempts} attempts in all (default 10; 1 turns the
     * retries off), none starting later than {@code maxTotal} after the first (default 30 s; zero:
     * no bound but the attempts); an extension's retries also stop at the ack deadline. The wait is
     * the node's {@code grpc-retry-pushback-ms} hint times a random factor in [1, 1.5), or without
     * a usable hint exponential backoff from 100 ms, doubling up to 5 s, ±20 % jitter.
     */
    public Builder overloadRetry(int maxAttempts, Duration maxTotal) {
      this.overload = new OverloadRetry(maxAttempts, maxTotal);
      return this;
    }

    public Builder token(String token) {
      connection.token = token;
      return this;
    }

    public Builder tls(String caFile) {
      connection.tls = true;
      connection.caFile = caFile;
      return this;
    }

    public Builder clientCertificate(String certFile, String keyFile) {
      connection.tls = true;
      connection.certFile = certFile;
      connection.keyFile = keyFile;
      return this;
    }

    public Executor build() {
      return new Executor(this);
    }
  }
}
