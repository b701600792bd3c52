package dev.rebound.client;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * Live nodes for a test: the repository's rebound-server ($REBOUND_SERVER_BIN, or
 * target/debug/rebound-server) as processes, on the Cassandra of scripts/cassandra, in a keyspace
 * of their own, with 1 s windows.
 */
final class TestCluster implements AutoCloseable {
  final String keyspace =
      "sdk_java_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
  final Path dir;
  private final List<Process> processes = new ArrayList<>();

  TestCluster() throws IOException {
    dir = Files.createTempDirectory("rebound-java-");
  }

  static String serverBin() {
    String b = System.getenv("REBOUND_SERVER_BIN");
    return b != null ? b : new File("../../target/debug/rebound-server").getAbsolutePath();
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  /** Starts a node and returns its address once it listens. */
  String start(Map<String, String> env) throws IOException, InterruptedException {
    String id = "java-" + processes.size();
    File log = dir.resolve(id + ".log").toFile();
    // A port found free can be taken before the node binds it (by any outgoing connection,
    // which draws from the same range): start again on another one.
    for (int attempt = 0; attempt < 5; attempt++) {
      String address = startOn(freePort(), id, log, env);
      if (address != null) {
        return address;
      }
    }
    throw new IllegalStateException(
        "rebound-server found no free port: " + Files.readString(log.toPath()));
  }

  /**
   * Starts a node on port and returns its address once it listens; null when the port was taken.
   */
  private String startOn(int port, String id, File log, Map<String, String> env)
      throws IOException, InterruptedException {
    String address = "127.0.0.1:" + port;
    ProcessBuilder pb = new ProcessBuilder(serverBin());
    Map<String, String> e = pb.environment();
    e.put("REBOUND_LISTEN", address);
    e.put("REBOUND_KEYSPACE", keyspace);
    e.put("REBOUND_NODE_ID", id);
    e.put("REBOUND_WINDOW_SECONDS", "1");
    e.put("REBOUND_SKEW_MARGIN_MS", "200");
    e.put("REBOUND_SCAN_INTERVAL_MS", "50");
    e.put("REBOUND_COMPACTION_INTERVAL_MS", "200");
    e.put("REBOUND_SLOTS", "8");
    e.put("REBOUND_LEASE_TTL_MS", "3000");
    e.put("REBOUND_LANES", "2");
    e.put("REBOUND_SHUTDOWN_GRACE_MS", "1000");
    e.putIfAbsent("RUST_LOG", "warn");
    e.putAll(env);
    pb.redirectErrorStream(true).redirectOutput(log);
    Process p = pb.start();
    long deadline = System.currentTimeMillis() + 60_000;
    while (System.currentTimeMillis() < deadline) {
      if (!p.isAlive()) {
        String text = Files.readString(log.toPath());
        if (text.contains("Address already in use")) {
          return null;
        }
        throw new IllegalStateException("rebound-server exited: " + text);
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 500);
        processes.add(p);
        return address;
      } catch (IOException notYet) {
        Thread.sleep(100);
      }
    }
    processes.add(p);
    throw new IllegalStateException("rebound-server did not listen on " + address);
  }

  String start() throws IOException, InterruptedException {
    return start(Map.of());
  }

  /** A credentials file with one non-admin credential. */
  String credentials(String name, String token, String service) throws IOException {
    String digest;
    try {
      digest =
          HexFormat.of()
              .formatHex(
                  MessageDigest.getInstance("SHA-256")
                      .digest(token.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
    Path p = dir.resolve("credentials.toml");
    Files.writeString(
        p,
        "[[credential]]\nname = \""
            + name
            + "\"\ntoken_sha256 = \""
            + digest
            + "\"\nservices = [\""
            + service
            + "\"]\nadmin = false\n");
    return p.toString();
  }

  /**
   * The certificates of scripts/test-certs (ca.pem, node.pem, client.pem with CN=sdk-client,
   * other-ca.pem, ...), written into {@code dir/certs}, which it returns.
   */
  Path certs() throws IOException, InterruptedException {
    Path out = dir.resolve("certs");
    Process p =
        new ProcessBuilder(new File("../../scripts/test-certs").getAbsolutePath(), out.toString())
            .inheritIO()
            .start();
    if (p.waitFor() != 0) {
      throw new IllegalStateException("scripts/test-certs exited " + p.exitValue());
    }
    return out;
  }

  @Override
  public void close() {
    for (Process p : processes) {
      p.destroy();
    }
    try {
      for (Process p : processes) {
        if (!p.waitFor(10, TimeUnit.SECONDS)) {
          p.destroyForcibly().waitFor();
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
