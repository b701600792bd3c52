package dev.rebound.client;

import dev.rebound.v1.CancelRetryRequest;
import dev.rebound.v1.CancelRetryResponse;
import dev.rebound.v1.EnqueueRetryBatchRequest;
import dev.rebound.v1.EnqueueRetryBatchResponse;
import dev.rebound.v1.EnqueueRetryResponse;
import dev.rebound.v1.EnqueueRetryResult;
import dev.rebound.v1.GetRetryRequest;
import dev.rebound.v1.ListRetriesRequest;
import dev.rebound.v1.ListRetriesResponse;
import dev.rebound.v1.Retry;
import dev.rebound.v1.RetryServiceGrpc;
import dev.rebound.v1.RetrySummary;
import io.grpc.Deadline;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Function;

/**
 * A client of a node's RetryService (or of a load balancer in front of several): blocking methods,
 * and {@code *Async} ones that return a {@link CompletableFuture}. Thread-safe; one per process is
 * enough; {@link #close()} ends it.
 *
 * <p>A call the node answers RESOURCE_EXHAUSTED (it is overloaded: it shed the request before doing
 * anything) is tried again after the node's {@code grpc-retry-pushback-ms} hint, within the bound
 * of {@link Builder#overloadRetry} (default 10 attempts, 30 s) and the call's deadline ({@link
 * Builder#timeout}); then it throws (or fails with) the RESOURCE_EXHAUSTED {@link ReboundException}
 * as before.
 *
 * <pre>{@code
 * try (ReboundClient client = ReboundClient.builder("127.0.0.1:50051").build()) {
 *   client.enqueue(EnqueueRequest.builder("payments", "charge-7f3a")
 *       .delay(Duration.ofSeconds(30)).build());
 * }
 * }</pre>
 */
public final class ReboundClient implements AutoCloseable {
  private final ManagedChannel channel;
  private final Duration timeout;
  private final OverloadRetry overload;

  private ReboundClient(ManagedChannel channel, Duration timeout, OverloadRetry overload) {
    this.channel = channel;
    this.timeout = timeout;
    this.overload = overload;
  }

  public static Builder builder(String address) {
    return new Builder(address);
  }

  /** The deadline of one call of this client, its overload retries included. */
  private Deadline deadline() {
    return Deadline.after(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  /** One blocking call (retried while overloaded); a failure throws a ReboundException. */
  private <T> T blocking(Function<RetryServiceGrpc.RetryServiceBlockingStub, T> call) {
    Deadline deadline = deadline();
    RetryServiceGrpc.RetryServiceBlockingStub stub =
        RetryServiceGrpc.newBlockingStub(channel).withDeadline(deadline);
    try {
      return overload.call(deadline, () -> call.apply(stub));
    } catch (StatusRuntimeException e) {
      throw ReboundException.of(e);
    }
  }

  /** One asynchronous call (retried while overloaded); a failure is a ReboundException. */
  private <T> CompletableFuture<T> async(
      BiConsumer<RetryServiceGrpc.RetryServiceStub, StreamObserver<T>> call) {
    Deadline deadline = deadline();
    RetryServiceGrpc.RetryServiceStub stub =
        RetryServiceGrpc.newStub(channel).withDeadline(deadline);
    return overload.callAsync(
        deadline,
        () -> {
          CompletableFuture<T> f = new CompletableFuture<>();
          call.accept(stub, into(f));
          return f;
        });
  }

  /** Completes f with the answer, or with the gRPC error as it came (trailers included). */
  private static <T> StreamObserver<T> into(CompletableFuture<T> f) {
    return new StreamObserver<>() {
      @Override
      public void onNext(T value) {
        f.complete(value);
      }

      @Override
      public void onError(Throwable t) {
        f.completeExceptionally(t);
      }

      @Override
      public void onCompleted() {}
    };
  }

  /**
   * Schedules a retry. Idempotent by (service, transaction id): a repeat reschedules or confirms
   * the pending retry ({@code deduplicated}) and never doubles it, so re-sending is safe.
   */
  public Enqueued enqueue(EnqueueRequest request) {
    var proto = request.toProto();
    return Enqueued.of(blocking(s -> s.enqueueRetry(proto)));
  }

  public CompletableFuture<Enqueued> enqueueAsync(EnqueueRequest request) {
    var proto = request.toProto();
    CompletableFuture<EnqueueRetryResponse> f = async((s, o) -> s.enqueueRetry(proto, o));
    return f.thenApply(Enqueued::of);
  }

  /** Many enqueues in one call: one result per item, in order; a bad item fails alone. */
  public List<BatchResult> enqueueBatch(List<EnqueueRequest> requests) {
    EnqueueRetryBatchRequest proto = batch(requests);
    return results(blocking(s -> s.enqueueRetryBatch(proto)), requests.size());
  }

  public CompletableFuture<List<BatchResult>> enqueueBatchAsync(List<EnqueueRequest> requests) {
    EnqueueRetryBatchRequest proto = batch(requests);
    CompletableFuture<EnqueueRetryBatchResponse> f = async((s, o) -> s.enqueueRetryBatch(proto, o));
    return f.thenApply(r -> results(r, requests.size()));
  }

  private static EnqueueRetryBatchRequest batch(List<EnqueueRequest> requests) {
    EnqueueRetryBatchRequest.Builder b = EnqueueRetryBatchRequest.newBuilder();
    for (EnqueueRequest r : requests) {
      b.addRequests(r.toProto());
    }
    return b.build();
  }

  private static List<BatchResult> results(EnqueueRetryBatchResponse r, int sent) {
    if (r.getResultsCount() != sent) {
      throw new ReboundException(
          Status.Code.INTERNAL, r.getResultsCount() + " results for " + sent + " batch items");
    }
    List<BatchResult> out = new ArrayList<>(sent);
    for (EnqueueRetryResult item : r.getResultsList()) {
      if (item.hasResponse()) {
        out.add(new BatchResult(Enqueued.of(item.getResponse()), null));
      } else {
        Status.Code code = Status.fromCodeValue(item.getError().getCode()).getCode();
        out.add(new BatchResult(null, new ReboundException(code, item.getError().getMessage())));
      }
    }
    return out;
  }

  /**
   * The state of a retry; NOT_FOUND when there is none (or it expired).
   *
   * <p>For a saga step or a compensation ({@link EnqueueRequest.Builder#compensation}), {@code
   * hasChain()} is true and {@code getChain()} tells where its compensation chain stands: the saga
   * step ({@code getSagaService()}, {@code getSagaTransactionId()}), the retry's {@code
   * getPosition()} (0 for the step itself, k for the k-th compensation) and every compensation in
   * order ({@code getCompensationsList()}), each with its {@code getStatus()} ({@code
   * RETRY_STATUS_UNSPECIFIED}: not enqueued yet, or its record has expired). {@code
   * getCompensationsList()} of the retry itself lists the compensations still to run after it.
   */
  public Retry get(String service, String transactionId) {
    GetRetryRequest proto = request(service, transactionId);
    return blocking(s -> s.getRetry(proto));
  }

  public CompletableFuture<Retry> getAsync(String service, String transactionId) {
    GetRetryRequest proto = request(service, transactionId);
    return async((s, o) -> s.getRetry(proto, o));
  }

  /**
   * The scheduled retries that match {@code filter} (its service, attributes, error text,
   * dependency, saga, due range and page size; its page token is ignored), by due time
   * (ListRetries). Iterating fetches a page at a time; a failed call throws a {@link
   * ReboundException} from the iterator.
   */
  public Iterable<RetrySummary> listRetries(ListRetriesRequest filter) {
    return () ->
        new Iterator<RetrySummary>() {
          private Iterator<RetrySummary> page = List.<RetrySummary>of().iterator();
          private String token = "";
          private boolean done = false;

          @Override
          public boolean hasNext() {
            while (!page.hasNext() && !done) {
              ListRetriesRequest r = filter.toBuilder().setPageToken(token).build();
              ListRetriesResponse resp = blocking(s -> s.listRetries(r));
              page = resp.getRetriesList().iterator();
              token = resp.getNextPageToken();
              done = token.isEmpty();
            }
            return page.hasNext();
          }

          @Override
          public RetrySummary next() {
            if (!hasNext()) {
              throw new NoSuchElementException();
            }
            return page.next();
          }
        };
  }

  private static GetRetryRequest request(String service, String transactionId) {
    return GetRetryRequest.newBuilder().setService(service).setTransactionId(transactionId).build();
  }

  /** Stops a pending retry; {@code cancelled} is false when it had already finished. */
  public Cancelled cancel(String service, String transactionId) {
    CancelRetryRequest proto = cancelRequest(service, transactionId);
    CancelRetryResponse r = blocking(s -> s.cancelRetry(proto));
    return new Cancelled(r.getStatus(), r.getCancelled());
  }

  public CompletableFuture<Cancelled> cancelAsync(String service, String transactionId) {
    CancelRetryRequest proto = cancelRequest(service, transactionId);
    CompletableFuture<CancelRetryResponse> f = async((s, o) -> s.cancelRetry(proto, o));
    return f.thenApply(r -> new Cancelled(r.getStatus(), r.getCancelled()));
  }

  private static CancelRetryRequest cancelRequest(String service, String transactionId) {
    return CancelRetryRequest.newBuilder()
        .setService(service)
        .setTransactionId(transactionId)
        .build();
  }

  @Override
  public void close() {
    channel.shutdown();
    try {
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  /** Builds a {@link ReboundClient}. */
  public static final class Builder {
    private final Connection connection;
    private Duration timeout = Duration.ofSeconds(30);
    private OverloadRetry overload = OverloadRetry.DEFAULT;

    private Builder(String address) {
      this.connection = new Connection(address);
    }

    /** Sent as {@code authorization: Bearer <token>} on every call. */
    public Builder token(String token) {
      connection.token = token;
      return this;
    }

    /** TLS, trusting the roots in {@code caFile} (null: the JDK's). */
    public Builder tls(String caFile) {
      connection.tls = true;
      connection.caFile = caFile;
      return this;
    }

    /** A client certificate and key (PEM), for mutual TLS. */
    public Builder clientCertificate(String certFile, String keyFile) {
      connection.tls = true;
      connection.certFile = certFile;
      connection.keyFile = keyFile;
      return this;
    }

    /** The deadline of each call, its retries after RESOURCE_EXHAUSTED included (default 30 s). */
    public Builder timeout(Duration timeout) {
      this.timeout = timeout;
      return this;
    }

    /**
     * Bounds the retries of a call the node answered RESOURCE_EXHAUSTED: at most {@code
     * maxAttempts} attempts in all, the first included (default 10; 1 turns the retries off), and
     * no retry that would start later than {@code maxTotal} after the first attempt (default 30 s;
     * zero: no bound but the attempts). The wait before a retry is the node's {@code
     * grpc-retry-pushback-ms} hint times a random factor in [1, 1.5), or without a usable hint
     * exponential backoff from 100 ms, doubling up to 5 s, ±20 % jitter. No other code is retried.
     */
    public Builder overloadRetry(int maxAttempts, Duration maxTotal) {
      this.overload = new OverloadRetry(maxAttempts, maxTotal);
      return this;
    }

    public ReboundClient build() {
      return new ReboundClient(connection.open(), timeout, overload);
    }

    Connection connection() {
      return connection;
    }
  }
}
