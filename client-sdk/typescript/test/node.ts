// A live node per test: the repository's rebound-server ($REBOUND_SERVER_BIN, or
// target/debug/rebound-server) as a process, on the Cassandra of scripts/cassandra, in a
// keyspace of its own, with 1 s windows.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const SERVER = process.env.REBOUND_SERVER_BIN ?? resolve(here, "../../../../target/debug/rebound-server");

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const c = createConnection({ host: "127.0.0.1", port }, () => {
      c.end();
      ok(true);
    });
    c.once("error", () => ok(false));
  });
}

export class TestNode {
  constructor(
    readonly address: string,
    private readonly proc: ChildProcess,
  ) {}
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null) return;
    const exited = new Promise((ok) => this.proc.once("exit", ok));
    this.proc.kill("SIGTERM");
    const t = setTimeout(() => this.proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(t);
  }
}

export class Cluster {
  readonly keyspace = "sdk_ts_" + randomBytes(6).toString("hex");
  readonly dir = mkdtempSync(join(tmpdir(), "rebound-ts-"));
  readonly nodes: TestNode[] = [];

  async start(env: Record<string, string> = {}): Promise<TestNode> {
    const id = `ts-${this.nodes.length}`;
    const log = join(this.dir, `${id}.log`);
    // A port found free can be taken before the node binds it (by any outgoing connection,
    // which draws from the same range): start again on another one.
    for (let attempt = 0; attempt < 5; attempt++) {
      const node = await this.startOn(await freePort(), id, log, env);
      if (node) return node;
    }
    throw new Error(`rebound-server found no free port: ${readFileSync(log, "utf8").slice(-2000)}`);
  }

  /** Starts a node on `port` and waits until it listens; undefined when the port was taken. */
  private async startOn(
    port: number,
    id: string,
    log: string,
    env: Record<string, string>,
  ): Promise<TestNode | undefined> {
    const out = openSync(log, "w");
    const proc = spawn(SERVER, [], {
      stdio: ["ignore", out, out],
      env: {
        ...process.env,
        REBOUND_LISTEN: `127.0.0.1:${port}`,
        REBOUND_KEYSPACE: this.keyspace,
        REBOUND_NODE_ID: id,
        REBOUND_WINDOW_SECONDS: "1",
        REBOUND_SKEW_MARGIN_MS: "200",
        REBOUND_SCAN_INTERVAL_MS: "50",
        REBOUND_COMPACTION_INTERVAL_MS: "200",
        REBOUND_SLOTS: "8",
        REBOUND_LEASE_TTL_MS: "3000",
        REBOUND_LANES: "2",
        REBOUND_SHUTDOWN_GRACE_MS: "1000",
        RUST_LOG: process.env.RUST_LOG ?? "warn",
        ...env,
      },
    });
    closeSync(out);
    const node = new TestNode(`127.0.0.1:${port}`, proc);
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) {
        const text = readFileSync(log, "utf8");
        if (text.includes("Address already in use")) return undefined;
        throw new Error(`rebound-server exited: ${text.slice(-2000)}`);
      }
      if (await canConnect(port)) {
        this.nodes.push(node);
        return node;
      }
      await new Promise((ok) => setTimeout(ok, 100));
    }
    this.nodes.push(node);
    throw new Error(`rebound-server did not listen on ${node.address}`);
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }

  credentials(name: string, token: string, services: string[]): string {
    const digest = createHash("sha256").update(token).digest("hex");
    const path = join(this.dir, "credentials.toml");
    const quoted = services.map((s) => JSON.stringify(s)).join(", ");
    writeFileSync(
      path,
      `[[credential]]\nname = "${name}"\ntoken_sha256 = "${digest}"\nservices = [${quoted}]\nadmin = false\n`,
    );
    return path;
  }
}

/** The certificates of scripts/test-certs (ca.pem, node.pem, client.pem with CN=sdk-client,
 * other-ca.pem, ...), written into a new temporary directory, which it returns. */
export function testCerts(): string {
  const dir = mkdtempSync(join(tmpdir(), "rebound-ts-certs-"));
  execFileSync(resolve(here, "../../../../scripts/test-certs"), [dir], { stdio: "inherit" });
  return dir;
}
