package dev.rebound.client;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;

/**
 * What every failed call throws: the gRPC code and the server's message, which names the field and
 * the limit for bad input.
 */
public class ReboundException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Status.Code code;
  private final String serverMessage;

  public ReboundException(Status.Code code, String serverMessage) {
    super(code + ": " + serverMessage);
    this.code = code;
    this.serverMessage = serverMessage;
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The server's message. */
  public String serverMessage() {
    return serverMessage;
  }

  /**
   * True for UNAVAILABLE, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED: the outcome is unknown or the
   * node is busy, and re-sending is safe (an enqueue is idempotent).
   */
  public boolean isRetryable() {
    return isRetryable(code);
  }

  static boolean isRetryable(Status.Code c) {
    return c == Status.Code.UNAVAILABLE
        || c == Status.Code.DEADLINE_EXCEEDED
        || c == Status.Code.RESOURCE_EXHAUSTED;
  }

  static ReboundException from(Throwable t) {
    if (t instanceof ReboundException r) {
      return r;
    }
    Status s = Status.fromThrowable(t);
    String message =
        s.getDescription() != null ? s.getDescription() : String.valueOf(t.getMessage());
    return new ReboundException(s.getCode(), message);
  }

  static ReboundException of(StatusRuntimeException e) {
    return from(e);
  }
}
