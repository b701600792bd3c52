//! Real `rebound-server` processes for the tests that kill, freeze or restart a node: each runs
//! the binary on its own port against the test Cassandra, with 1 s windows and a short lease.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use tonic::transport::Channel;

use crate::contact_point;

/// A port nothing listens on right now, below Linux's range of ephemeral ports (32768-60999),
/// so no outgoing connection (each node holds several to Cassandra) can take it between this
/// call and the node's bind, nor while a killed node waits to be started again on it. Ports
/// are handed out in turn from a per-process start, so two tests of one binary never get the
/// same one; each is checked free by binding it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        // A start that differs between the test binaries that cargo runs one after another.
        let seed = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
        let _ = NEXT.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

/// Sends `sig` (e.g. "STOP", "CONT", "KILL") to `pid` with kill(1) (this crate has no unsafe).
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A node process, killed (SIGKILL) and reaped when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// SIGKILL now: no shutdown hook, no chance to clean up.
    pub fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Proc {
    /// SIGTERM, then waits up to `within` for the process to exit (SIGKILL after that).
    /// True when it exited on its own.
    pub async fn terminate(mut self, within: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let started = Instant::now();
        while started.elapsed() < within {
            if let Ok(Some(_)) = self.0.try_wait() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The rebound-server binary: `REBOUND_SERVER_BIN`, else next to the current executable
/// (target/<profile>/ for a bin, target/<profile>/deps/.. for a test; cargo builds it there
/// for the tests of rebound-server).
pub fn server_bin() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("REBOUND_SERVER_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let candidate = d.join("rebound-server");
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    anyhow::bail!(
        "rebound-server binary not found near {}; build it (cargo build -p rebound-server --bin rebound-server) or set REBOUND_SERVER_BIN",
        exe.display()
    )
}

pub fn spawn_node(keyspace: &str, port: u16, node_id: &str) -> Proc {
    spawn_node_with(keyspace, port, node_id, &[])
}

/// A node with extra environment (later entries override the defaults below).
pub fn spawn_node_with(keyspace: &str, port: u16, node_id: &str, extra: &[(&str, String)]) -> Proc {
    Proc(
        Command::new(server_bin().expect("rebound-server binary"))
            .envs([
                ("REBOUND_LISTEN", format!("127.0.0.1:{port}")),
                ("REBOUND_CASSANDRA_CONTACT_POINTS", contact_point()),
                ("REBOUND_KEYSPACE", keyspace.to_string()),
                ("REBOUND_NODE_ID", node_id.to_string()),
                ("REBOUND_WINDOW_SECONDS", "1".to_string()),
                ("REBOUND_SKEW_MARGIN_MS", "200".to_string()),
                ("REBOUND_BUCKET_SIZE", "100".to_string()),
                ("REBOUND_SCAN_INTERVAL_MS", "50".to_string()),
                ("REBOUND_SLOTS", "8".to_string()),
                ("REBOUND_LEASE_TTL_MS", "2000".to_string()),
                // Off unless a test asks for it (with its own port).
                ("REBOUND_HTTP_LISTEN", String::new()),
                (
                    "RUST_LOG",
                    std::env::var("CHILD_LOG").unwrap_or_else(|_| "warn".into()),
                ),
            ])
            .envs(extra.iter().map(|(k, v)| (*k, v.clone())))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rebound-server"),
    )
}

/// A channel to the node on `port`, once it listens (within 60 s).
pub async fn connect(port: u16) -> Channel {
    let started = Instant::now();
    loop {
        if let Ok(ch) = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
        {
            return ch;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "node did not start"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (up to 30 s) until the ring, as `ch` reports it, lists `nodes` nodes that each hold
/// part of the token space.
pub async fn wait_for_shared_ring(ch: &Channel, nodes: usize) {
    let started = Instant::now();
    loop {
        let r = ExecutorServiceClient::new(ch.clone())
            .get_ring(pb::GetRingRequest {})
            .await
            .unwrap()
            .into_inner();
        if r.nodes.len() == nodes && r.nodes.iter().all(|n| !n.ranges.is_empty()) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "ring not shared by {nodes} nodes: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `n` nodes `n0`, `n1`, ... on `keyspace`, each on a free port, connected, and sharing the
/// ring: the processes (kept alive as long as they are held) and a channel to each.
pub async fn shared_ring(keyspace: &str, n: usize) -> (Vec<Proc>, Vec<Channel>) {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let nodes = ports
        .iter()
        .enumerate()
        .map(|(i, p)| spawn_node(keyspace, *p, &format!("n{i}")))
        .collect();
    let mut chans = Vec::with_capacity(n);
    for p in ports {
        chans.push(connect(p).await);
    }
    wait_for_shared_ring(&chans[0], n).await;
    (nodes, chans)
}
