package dev.rebound.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.netty.shaded.io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.handler.ssl.SslContextBuilder;
import java.io.File;
import java.util.HashMap;
import java.util.Map;
import javax.net.ssl.SSLException;

/**
 * How to reach a node: its address ({@code host:port}, {@code http://host:port} or {@code
 * https://host:port}), a bearer token, and TLS (trusted roots, and a client certificate for mutual
 * TLS).
 */
public final class Connection {
  final String address;
  String token;
  String caFile;
  String certFile;
  String keyFile;
  boolean tls;

  Connection(String address) {
    this.address = address;
    this.tls = address.startsWith("https://");
  }

  Connection copyFor(String other) {
    Connection c = new Connection(other);
    c.token = token;
    c.caFile = caFile;
    c.certFile = certFile;
    c.keyFile = keyFile;
    c.tls = tls || c.tls;
    return c;
  }

  ManagedChannel open() {
    String target = address.replaceFirst("^https?://", "").replaceFirst("/$", "");
    int colon = target.lastIndexOf(':');
    String host = colon > 0 ? target.substring(0, colon) : target;
    int port = colon > 0 ? Integer.parseInt(target.substring(colon + 1)) : (tls ? 443 : 80);
    NettyChannelBuilder b =
        NettyChannelBuilder.forAddress(host, port)
            .maxInboundMessageSize(64 << 20)
            .intercept(new Headers(token));
    if (tls) {
      try {
        SslContextBuilder ssl = GrpcSslContexts.forClient();
        if (caFile != null) {
          ssl.trustManager(new File(caFile));
        }
        if (certFile != null) {
          ssl.keyManager(new File(certFile), new File(keyFile));
        }
        b.sslContext(ssl.build());
      } catch (SSLException e) {
        throw new IllegalArgumentException("tls: " + e.getMessage(), e);
      }
    } else {
      b.usePlaintext();
    }
    return b.build();
  }

  /** Adds the bearer token and, when OpenTelemetry is present, the W3C trace context. */
  static final class Headers implements ClientInterceptor {
    private static final Metadata.Key<String> AUTHORIZATION =
        Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final String token;

    Headers(String token) {
      this.token = token;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          if (token != null && !token.isEmpty()) {
            headers.put(AUTHORIZATION, "Bearer " + token);
          }
          for (Map.Entry<String, String> e : Trace.current().entrySet()) {
            headers.put(
                Metadata.Key.of(e.getKey(), Metadata.ASCII_STRING_MARSHALLER), e.getValue());
          }
          super.start(listener, headers);
        }
      };
    }
  }

  /** The current W3C trace context, through the OpenTelemetry API when it is on the class path. */
  static final class Trace {
    private static final boolean PRESENT = present();

    private Trace() {}

    private static boolean present() {
      try {
        Class.forName("io.opentelemetry.api.GlobalOpenTelemetry");
        return true;
      } catch (ClassNotFoundException e) {
        return false;
      }
    }

    static Map<String, String> current() {
      Map<String, String> carrier = new HashMap<>();
      if (PRESENT) {
        Otel.inject(carrier);
      }
      return carrier;
    }
  }

  /** Touches OpenTelemetry classes only when they are present. */
  static final class Otel {
    private Otel() {}

    static void inject(Map<String, String> carrier) {
      io.opentelemetry.api.GlobalOpenTelemetry.getPropagators()
          .getTextMapPropagator()
          .inject(io.opentelemetry.context.Context.current(), carrier, Map::put);
    }
  }
}
