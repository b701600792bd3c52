import { readFileSync } from "node:fs";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { DEFAULT_OVERLOAD_RETRIES } from "./overload.js";

/** TLS for a node's gRPC port: trusted roots, and a client certificate for mutual TLS. */
export interface TlsOptions {
  /** PEM file of the roots to trust (default: Node's). */
  caFile?: string;
  /** PEM client certificate and key, for mutual TLS. */
  certFile?: string;
  keyFile?: string;
  /** The name to verify when it differs from the address's host. */
  serverName?: string;
}

export interface ConnectionOptions {
  /** Sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** TLS options; an https:// address implies TLS with Node's roots. */
  tls?: TlsOptions;
  /**
   * Milliseconds per unary call (default 30 000); a client call's retries under overload are
   * included (see `overloadRetries`).
   */
  timeoutMs?: number;
  /**
   * How many times a unary call the node sheds under load (RESOURCE_EXHAUSTED: it did nothing)
   * is made again: the client's enqueue, enqueueBatch, get, cancel and ack, the executor's acks,
   * ack batches and deadline extensions. Each after the node's `grpc-retry-pushback-ms` hint
   * times [1, 1.5) (without one: 100 ms, x2 per retry, capped at 5 s, +/-20 %), within 30 s of
   * waiting and the call's timeout (an extension: the delivery's deadline); then the call
   * rejects with RESOURCE_EXHAUSTED. Default 9 (ten calls in all); 0 turns it off.
   */
  overloadRetries?: number;
}

/** `overloadRetries`, checked (default 9). */
export function overloadRetries(o: ConnectionOptions): number {
  const n = o.overloadRetries ?? DEFAULT_OVERLOAD_RETRIES;
  if (!Number.isInteger(n) || n < 0) throw new RangeError("overloadRetries must be an integer of at least 0");
  return n;
}

/** `host:port`, `http://host:port` or `https://host:port` as a base URL. */
export function baseUrl(address: string, tls?: TlsOptions): string {
  if (address.startsWith("http://") || address.startsWith("https://")) {
    return address.replace(/\/$/, "");
  }
  return `${tls ? "https" : "http"}://${address}`;
}

/** The caller's W3C trace context, when @opentelemetry/api is installed and a span is active. */
type Propagation = { inject(ctx: unknown, carrier: Record<string, string>): void };
let otel: { propagation: Propagation; context: { active(): unknown } } | null | undefined;
async function loadOtel(): Promise<void> {
  if (otel !== undefined) return;
  try {
    const api = (await import("@opentelemetry/api")) as unknown as typeof otel;
    otel = api ?? null;
  } catch {
    otel = null;
  }
}

export function traceHeaders(): Record<string, string> {
  const carrier: Record<string, string> = {};
  if (otel) otel.propagation.inject(otel.context.active(), carrier);
  return carrier;
}

/** A channel: a gRPC transport over one HTTP/2 session that `close()` ends. */
export class Channel {
  readonly transport: Transport;
  private readonly session: Http2SessionManager;

  private constructor(transport: Transport, session: Http2SessionManager) {
    this.transport = transport;
    this.session = session;
  }

  static async open(address: string, o: ConnectionOptions, traced: boolean): Promise<Channel> {
    if (traced) await loadOtel();
    const url = baseUrl(address, o.tls);
    const tls = o.tls;
    const nodeOptions =
      url.startsWith("https://") && tls
        ? {
            ca: tls.caFile ? readFileSync(tls.caFile) : undefined,
            cert: tls.certFile ? readFileSync(tls.certFile) : undefined,
            key: tls.keyFile ? readFileSync(tls.keyFile) : undefined,
            servername: tls.serverName,
          }
        : {};
    const session = new Http2SessionManager(url, undefined, nodeOptions);
    const auth: Interceptor = (next) => async (req) => {
      if (o.token) req.header.set("authorization", `Bearer ${o.token}`);
      if (traced) {
        for (const [k, v] of Object.entries(traceHeaders())) req.header.set(k, v);
      }
      return next(req);
    };
    const transport = createGrpcTransport({
      baseUrl: url,
      sessionManager: session,
      interceptors: [auth],
      defaultTimeoutMs: o.timeoutMs ?? 30_000,
      readMaxBytes: 64 << 20,
      writeMaxBytes: 64 << 20,
    });
    return new Channel(transport, session);
  }

  close(): void {
    this.session.abort();
  }
}
