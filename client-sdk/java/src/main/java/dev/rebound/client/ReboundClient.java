package dev.rebound.client;

import dev.rebound.v1.CancelRetryRequest;
import dev.rebound.v1.CancelRetryResponse;
import dev.rebound.v1.EnqueueRetryBatchRequest;
import dev.rebound.v1.EnqueueRetryBatchResponse;
import dev.rebound.v1.EnqueueRetryResponse;
import dev.rebound.v1.EnqueueRetryResult;
import dev.rebound.v1.GetRetryRequest;
import dev.rebound.v1.Retry;
import dev.rebound.v1.RetryServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A client of a node's RetryService (or of a load balancer in front of several): blocking methods,
 * and {@code *Async} ones that return a {@link CompletableFuture}. Thread-safe; one per process is
 * enough; {@link #close()} ends it.
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

  private ReboundClient(ManagedChannel channel, Duration timeout) {
    this.channel = channel;
    this.timeout = timeout;
  }

  public static Builder builder(String address) {
    return new Builder(address);
  }

  private RetryServiceGrpc.RetryServiceBlockingStub blocking() {
    return RetryServiceGrpc.newBlockingStub(channel)
        .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  private RetryServiceGrpc.RetryServiceStub async() {
    return RetryServiceGrpc.newStub(channel)
        .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  private static <T> StreamObserver<T> into(CompletableFuture<T> f) {
    return new StreamObserver<>() {
      @Override
      public void onNext(T value) {
        f.complete(value);
      }

      @Override
      public void onError(Throwable t) {
        f.completeExceptionally(ReboundException.from(t));
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
    try {
      return Enqueued.of(blocking().enqueueRetry(request.toProto()));
    } catch (StatusRuntimeException e) {
      throw ReboundException.of(e);
    }
  }

  public CompletableFuture<Enqueued> enqueueAsync(EnqueueRequest request) {
    CompletableFuture<EnqueueRetryResponse> f = new CompletableFuture<>();
    async().enqueueRetry(request.toProto(), into(f));
    return f.thenApply(Enqueued::of);
  }

  /** Many enqueues in one call: one result per item, in order; a bad item fails alone. */
  public List<BatchResult> enqueueBatch(List<EnqueueRequest> requests) {
    try {
      return results(blocking().enqueueRetryBatch(batch(requests)), requests.size());
    } catch (StatusRuntimeException e) {
      throw ReboundException.of(e);
    }
  }

  public CompletableFuture<List<BatchResult>> enqueueBatchAsync(List<EnqueueRequest> requests) {
    CompletableFuture<EnqueueRetryBatchResponse> f = new CompletableFuture<>();
    async().enqueueRetryBatch(batch(requests), into(f));
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

  /** The state of a retry; NOT_FOUND when there is none (or it expired). */
  public Retry get(String service, String transactionId) {
    try {
      return blocking().getRetry(request(service, transactionId));
    } catch (StatusRuntimeException e) {
      throw ReboundException.of(e);
    }
  }

  public CompletableFuture<Retry> getAsync(String service, String transactionId) {
    CompletableFuture<Retry> f = new CompletableFuture<>();
    async().getRetry(request(service, transactionId), into(f));
    return f;
  }

  private static GetRetryRequest request(String service, String transactionId) {
    return GetRetryRequest.newBuilder().setService(service).setTransactionId(transactionId).build();
  }

  /** Stops a pending retry; {@code cancelled} is false when it had already finished. */
  public Cancelled cancel(String service, String transactionId) {
    try {
      CancelRetryResponse r = blocking().cancelRetry(cancelRequest(service, transactionId));
      return new Cancelled(r.getStatus(), r.getCancelled());
    } catch (StatusRuntimeException e) {
      throw ReboundException.of(e);
    }
  }

  public CompletableFuture<Cancelled> cancelAsync(String service, String transactionId) {
    CompletableFuture<CancelRetryResponse> f = new CompletableFuture<>();
    async().cancelRetry(cancelRequest(service, transactionId), into(f));
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

    /** The deadline of each call (default 30 s). */
    public Builder timeout(Duration timeout) {
      this.timeout = timeout;
      return this;
    }

    public ReboundClient build() {
      return new ReboundClient(connection.open(), timeout);
    }

    Connection connection() {
      return connection;
    }
  }
}
