//! The processes of a chaos run: `rebound-server` nodes on one keyspace, and the signals the
//! fault injector sends them and the Cassandra process (SIGKILL, SIGSTOP / SIGCONT).
//!
//! Nothing here may leave Cassandra stopped: every pause is a [`CassandraPause`] guard that
//! sends SIGCONT when dropped (also on panic), and [`install_signal_cleanup`] resumes it and
//! kills the nodes when the run is interrupted.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use tonic::transport::{Channel, Endpoint};

/// Pids the signal cleanup must take care of: Cassandra (resumed) and nodes (killed).
#[derive(Default)]
struct Cleanup {
    cassandra: Option<u32>,
    nodes: Vec<u32>,
}

fn cleanup() -> &'static Mutex<Cleanup> {
    static C: OnceLock<Mutex<Cleanup>> = OnceLock::new();
    C.get_or_init(Default::default)
}

pub use rebound_integration_tests::process::signal;

/// On SIGINT / SIGTERM: SIGCONT Cassandra, SIGKILL the nodes, exit 130.
pub fn install_signal_cleanup() {
    tokio::spawn(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        emergency_cleanup();
        eprintln!("chaos: interrupted; Cassandra resumed, nodes killed");
        std::process::exit(130);
    });
}

/// Resumes Cassandra and kills every node this run started. Safe to call more than once.
pub fn emergency_cleanup() {
    let c = cleanup().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pid) = c.cassandra {
        signal(pid, "CONT");
    }
    for pid in &c.nodes {
        signal(*pid, "CONT");
        signal(*pid, "KILL");
    }
}

/// Resumes Cassandra if a pause of this run touched it (a no-op otherwise).
pub fn emergency_cleanup_cassandra() {
    let c = cleanup().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pid) = c.cassandra {
        signal(pid, "CONT");
    }
}

/// The pid of the Cassandra process: `REBOUND_CHAOS_CASSANDRA_PID`, else the pid file of
/// `scripts/cassandra` (`$REBOUND_CASSANDRA_HOME/node1/pid` or the default home), else
/// `scripts/cassandra pid`.
pub fn cassandra_pid(repo: &Path) -> Option<u32> {
    if let Ok(v) = std::env::var("REBOUND_CHAOS_CASSANDRA_PID") {
        return v.trim().parse().ok();
    }
    let out = Command::new(repo.join("scripts/cassandra"))
        .arg("pid")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// A SIGSTOPped Cassandra; SIGCONT when dropped, whatever happens.
pub struct CassandraPause {
    pid: u32,
}

impl CassandraPause {
    pub fn start(pid: u32) -> CassandraPause {
        cleanup()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cassandra = Some(pid);
        let guard = CassandraPause { pid };
        signal(pid, "STOP");
        guard
    }
}

impl Drop for CassandraPause {
    fn drop(&mut self) {
        // Twice, a moment apart: a lost signal must never leave the database frozen.
        signal(self.pid, "CONT");
        std::thread::sleep(Duration::from_millis(20));
        signal(self.pid, "CONT");
    }
}

pub use rebound_integration_tests::process::server_bin;

/// Settings every node of a run shares.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    pub bin: PathBuf,
    pub contact_point: String,
    pub keyspace: String,
    pub log_dir: PathBuf,
    pub window_seconds: u32,
    pub skew_margin_ms: u64,
    pub lease_ttl_ms: u64,
    pub request_timeout_ms: u64,
}

pub struct Node {
    pub index: usize,
    pub id: String,
    pub port: u16,
    /// The port of `/metrics` (REBOUND_HTTP_LISTEN); None: the listener is off.
    pub http_port: Option<u16>,
    pub channel: Channel,
    child: Option<Child>,
    /// The clock offset the running process was started with (0: none, clock sync on).
    pub skew_ms: i64,
    pub stopped: bool,
    pub starts: u32,
}

impl Node {
    pub fn new(index: usize, port: u16) -> Node {
        let channel = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("endpoint")
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .connect_lazy();
        Node {
            index,
            id: format!("n{}", index + 1),
            port,
            http_port: None,
            channel,
            child: None,
            skew_ms: 0,
            stopped: false,
            starts: 0,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the process with `skew_ms` (0: the machine's clock, synced to Cassandra's).
    pub fn start(&mut self, s: &NodeSettings, skew_ms: i64) -> anyhow::Result<()> {
        assert!(self.child.is_none(), "node {} already running", self.id);
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(s.log_dir.join(format!("{}.log", self.id)))?;
        let mut cmd = Command::new(&s.bin);
        cmd.envs([
            ("REBOUND_LISTEN", format!("127.0.0.1:{}", self.port)),
            (
                "REBOUND_HTTP_LISTEN",
                self.http_port
                    .map(|p| format!("127.0.0.1:{p}"))
                    .unwrap_or_default(),
            ),
            ("REBOUND_CASSANDRA_CONTACT_POINTS", s.contact_point.clone()),
            ("REBOUND_KEYSPACE", s.keyspace.clone()),
            ("REBOUND_NODE_ID", self.id.clone()),
            ("REBOUND_WINDOW_SECONDS", s.window_seconds.to_string()),
            ("REBOUND_SKEW_MARGIN_MS", s.skew_margin_ms.to_string()),
            ("REBOUND_BUCKET_SIZE", "20".into()),
            ("REBOUND_LANES", "4".into()),
            ("REBOUND_SCAN_INTERVAL_MS", "50".into()),
            ("REBOUND_COMPACTION_INTERVAL_MS", "200".into()),
            ("REBOUND_SLOTS", "8".into()),
            ("REBOUND_LEASE_TTL_MS", s.lease_ttl_ms.to_string()),
            (
                "REBOUND_CASSANDRA_REQUEST_TIMEOUT_MS",
                s.request_timeout_ms.to_string(),
            ),
            ("REBOUND_CASSANDRA_STARTUP_WAIT_MS", "60000".into()),
            ("REBOUND_TERMINAL_TTL_SECONDS", "86400".into()),
            ("REBOUND_SHUTDOWN_GRACE_MS", "1000".into()),
            ("REBOUND_SETTINGS_REFRESH_MS", "1000".into()),
            // The chaos receiver of the pushed service listens on loopback.
            ("REBOUND_PUSH_ALLOW", "127.0.0.1".into()),
            (
                "RUST_LOG",
                std::env::var("CHAOS_CHILD_LOG").unwrap_or_else(|_| "warn".into()),
            ),
        ]);
        if skew_ms != 0 {
            cmd.env("REBOUND_TEST_CLOCK_SKEW_MS", skew_ms.to_string())
                .env("REBOUND_CLOCK_SYNC", "false");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| anyhow::anyhow!("spawn {}: {e}", s.bin.display()))?;
        cleanup()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .nodes
            .push(child.id());
        self.child = Some(child);
        self.skew_ms = skew_ms;
        self.stopped = false;
        Ok(())
    }

    /// SIGKILL (SIGCONT first if it was stopped) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), "CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stopped = false;
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn terminate(&mut self, grace: Duration) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), "CONT");
            signal(c.id(), "TERM");
            let started = Instant::now();
            while started.elapsed() < grace {
                if let Ok(Some(_)) = c.try_wait() {
                    self.stopped = false;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stopped = false;
    }

    pub fn stop(&mut self) {
        if let Some(pid) = self.pid() {
            signal(pid, "STOP");
            self.stopped = true;
        }
    }

    pub fn resume(&mut self) {
        if let Some(pid) = self.pid() {
            signal(pid, "CONT");
        }
        self.stopped = false;
    }

    /// Waits until the node answers the health service (or `within` passes).
    pub async fn wait_ready(&self, within: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < within {
            let mut c = rebound_proto::v1::executor_service_client::ExecutorServiceClient::new(
                self.channel.clone(),
            );
            let req = rebound_proto::v1::GetRingRequest {};
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), c.get_ring(req)).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

pub use rebound_integration_tests::process::free_port;
