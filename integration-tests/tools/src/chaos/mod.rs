//! A seeded, reproducible randomized history checker ("chaos test").
//!
//! Three (or more) `rebound-server` processes run on one keyspace against the real Cassandra.
//! A workload planned from the seed enqueues, re-enqueues and cancels, acts on single retries
//! (run now, reschedule, cancel, dead-letter: ActOnRetries) and lists them; executors
//! subscribed to every node answer SUCCEEDED, RETRY (with and without `retry_after`), FAILED
//! or snooze; a fault injector (also planned from the seed) SIGKILLs and restarts nodes,
//! SIGSTOPs a node past its lease, restarts a node with its clock off, and SIGSTOPs Cassandra
//! for longer than the request timeout. Every call, answer, delivery and fault is recorded
//! ([`history`]), the directory is sampled every second, and at the end [`checker`] checks
//! the history against the contract of docs/architecture.md ("Dispatch", "Guarantees across
//! nodes", "Acting on retries").
//!
//! Saga steps ([`saga::STEP`]) carry two compensations each, which the nodes enqueue in
//! [`saga::UNDO`] when a step dies; [`saga::check`] holds the chains to their rule. The
//! retries of [`hold::SERVICE`] name a dependency that goes down for a while: their executors
//! then answer with a hold, and [`hold::check`] holds them to the rules of holds.
//!
//! Beside the streamed services, one service ([`push::SERVICE`]) has a push target: the nodes
//! POST its due retries to a receiver in this process, whose answers (mostly 2xx, sometimes
//! 503, 429, 422, or none before the timeout) decide their outcomes (docs/push.md). Its
//! requests and answers are recorded too, and the checker holds it to the push guarantees.
//!
//! The random choices (workload, faults, executor outcomes) follow from the seed alone; the
//! interleaving of real processes of course does not.
//!
//! [`run`] is the chaos round; [`soak`] runs the same cluster, workload ([`OpGen`]), executors,
//! fault injector and end ([`Started::finish`]: drain, end state, checker) at a steady rate
//! for many minutes, and samples what must not grow.
//!
//! Where things are: the plan ([`plan`]: the workload's operations, [`OpGen`], and the
//! faults, [`draw_fault`]) and [`run`] are here; the cluster's start ([`start_cluster`]), the
//! workload's calls, the executors ([`executor`], [`record_deliveries`]), the fault injector
//! and the end of a run ([`Started::finish`]: drain, end state, checker, report) each have a
//! module of their own, whose items are re-exported here.

pub mod checker;
pub mod cluster;
pub mod directory;
mod end;
mod executors;
mod faults;
pub mod history;
pub mod hold;
mod ops;
pub mod push;
pub mod saga;
pub mod soak;
mod start;
pub mod violation;
mod workload;

pub use end::{unstored_pushes, Ending, Finish};
pub use executors::{executor, record_deliveries, StreamSpec};
pub use faults::{draw_fault, PlannedFault};
pub use ops::{Op, OpGen, Sched};
pub use start::{keyspace_name, start_cluster, DirectorySampling, Setup, Started};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicUsize},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound_proto::v1 as pb;
use tokio::sync::Mutex as AsyncMutex;

use cluster::Node;
use history::{now_ms, History};
use workload::perform;

/// Every unary call gives up after this long (its outcome is then unknown).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
pub const SERVICES: &[&str] = &["pay", "mail"];

#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// How long the faulty phase lasts (the workload's operations are spread over it).
    pub duration: Duration,
    /// Operations of the workload; default: 6 per second of `duration`.
    pub ops: Option<usize>,
    pub nodes: usize,
    pub repo: PathBuf,
    pub contact_point: String,
    /// Cassandra's pid, for the pause fault (None: that fault is skipped).
    pub cassandra_pid: Option<u32>,
    pub drain_timeout: Duration,
    pub keep_keyspace: bool,
    /// Mean pause between two faults.
    pub fault_every: Duration,
    /// Largest clock offset of the skew fault (default: half the skew margin). Larger ones
    /// stand for a node whose clock is off with clock sync turned off (see `peers`).
    pub max_skew_ms: i64,
    /// Whether the workload includes the pushed service ([`push::SERVICE`]).
    pub push: bool,
    /// Whether the workload includes saga steps with compensations ([`saga`]).
    pub saga: bool,
    /// Whether the workload includes retries naming a dependency that goes down ([`hold`]).
    pub holds: bool,
}

impl Options {
    pub fn new(seed: u64, duration: Duration) -> Options {
        // This crate is integration-tests/tools: the workspace is two levels up.
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("workspace")
            .to_path_buf();
        Options {
            seed,
            duration,
            ops: None,
            nodes: 3,
            cassandra_pid: cluster::cassandra_pid(&repo),
            repo,
            contact_point: rebound_integration_tests::contact_point(),
            drain_timeout: Duration::from_secs(60),
            keep_keyspace: false,
            fault_every: Duration::from_secs(9),
            max_skew_ms: MAX_SKEW_MS,
            push: true,
            saga: true,
            holds: true,
        }
    }
}

// Cluster settings (see `cluster::Node::start`).
const WINDOW_SECONDS: u32 = 1;
const SKEW_MARGIN_MS: u64 = 500;
const LEASE_TTL_MS: u64 = 2_000;
const REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Clock offsets of the skew fault stay within half the skew margin.
pub const MAX_SKEW_MS: i64 = 250;
/// The checker's on-time limit (rule 10), after `max(due, answered)`. Away from faults the
/// node that wrote a retry delivers it from memory at its due time (docs/architecture.md,
/// "Dispatch", the timer), or half a second after its write when it was due sooner
/// (`SETTLE_MS` in the writer). On top: the executors' queue and the hub on a loaded two-core
/// machine (2.5 s), and the skew fault's offsets. The window scan's bound (two windows and the
/// margin, 2.5 s here) fits in it too, for what the timer leaves to the scan.
pub const LATE_LIMIT_MS: i64 = 500 + 2_500 + MAX_SKEW_MS;
/// How long after a fault ends it may still make a delivery late: its node's leases to
/// expire and be taken, a restarted node to wait out a lease before it serves.
pub const AFTER_FAULT_MS: i64 = 3 * LEASE_TTL_MS as i64 + 2_000;

fn policy() -> pb::RetryPolicy {
    let d = |ms: i64| prost_types::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    };
    pb::RetryPolicy {
        max_attempts: Some(3),
        initial_backoff: Some(d(1_000)),
        max_backoff: Some(d(2_000)),
        multiplier: Some(2.0),
        jitter: Some(0.2),
        ack_timeout: Some(d(3_000)),
        max_deliveries_per_attempt: Some(3),
        ..Default::default()
    }
}

fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A timestamp in milliseconds since the epoch.
pub fn ts_ms(t: &Option<prost_types::Timestamp>) -> Option<i64> {
    t.as_ref()
        .map(|t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

/// `ms` milliseconds as a protobuf duration.
pub fn dur(ms: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

async fn call<T>(
    f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded("client timeout (chaos)")),
    }
}

// ---------------------------------------------------------------------------------------
// The plan: workload and faults, from the seed alone (`ops`, `faults`).

pub struct Plan {
    pub ops: Vec<(i64, Op)>,
    pub faults: Vec<PlannedFault>,
    /// When [`hold::DEPENDENCY`] is down (ms from the start of the workload).
    pub outages: Vec<(i64, i64)>,
}

pub fn plan(o: &Options) -> Plan {
    let mut rng = StdRng::seed_from_u64(o.seed);
    let span_ms = o.duration.as_millis() as i64;
    let n_ops = o.ops.unwrap_or((span_ms / 1000 * 6).max(10) as usize);
    let mut draw = OpGen::new(o.nodes);
    if o.push {
        draw = draw.with_pushed(push::SERVICE);
    }
    let mut ops = Vec::with_capacity(n_ops);
    for i in 0..n_ops {
        let at = (i as i64 * span_ms) / n_ops as i64;
        ops.push((at, draw.next(&mut rng)));
    }
    if o.saga {
        // A generator of its own, so that the rest of a seed's plan stays as it was.
        let mut saga_rng = StdRng::seed_from_u64(o.seed ^ 0x5a6a);
        ops.extend(saga::plan(&mut saga_rng, span_ms, o.nodes));
    }
    let mut outages = Vec::new();
    if o.holds {
        let mut hold_rng = StdRng::seed_from_u64(o.seed ^ 0x401d);
        let (hold_ops, o) = hold::plan(&mut hold_rng, span_ms, o.nodes);
        ops.extend(hold_ops);
        outages = o;
    }
    ops.sort_by_key(|(at, _)| *at);
    let mut faults = Vec::new();
    let every = o.fault_every.as_millis() as i64;
    let mut at = 4_000 + rng.random_range(0..every);
    // The last sixth of the faulty phase (at most 30 s) has no fault, so that the checker
    // judges lateness there (rule 10, on time); the faults before it are the seed's as ever.
    let quiet_ms = (span_ms / 6).clamp(3_000, 30_000);
    while at < span_ms - quiet_ms {
        faults.push(draw_fault(&mut rng, at, o.nodes, o.max_skew_ms, true));
        at += every / 2 + rng.random_range(0..every);
    }
    Plan {
        ops,
        faults,
        outages,
    }
}

// ---------------------------------------------------------------------------------------
// The run.

pub struct Shared {
    pub history: History,
    pub nodes: Vec<Arc<AsyncMutex<Node>>>,
    /// Channels by node index (cloned out of the nodes; they reconnect by themselves).
    pub channels: Vec<tonic::transport::Channel>,
    pub draining: AtomicBool,
    pub stop: AtomicBool,
    pub seed: u64,
    /// Whether executors leave some deliveries unanswered (their ack deadline then passes and
    /// the node redelivers). The soak does not: a redelivery counts its lateness from the
    /// same due time, past the ack deadline.
    pub let_deadlines_pass: bool,
    /// The index of the join fault's spare node, the last one (not started but by that fault).
    pub spare: Option<usize>,
    /// How many times each executor saw (service, tx, attempt), for its deterministic choice.
    seen: Mutex<HashMap<(String, String, u32), u32>>,
    pub ignored: AtomicUsize,
    /// When [`hold::DEPENDENCY`] is down (ms, our clock).
    pub outages: Mutex<Vec<(i64, i64)>>,
}

/// The summary of a run and what the checker found.
pub struct Report {
    pub text: String,
    pub violations: usize,
}

pub async fn run(o: Options) -> anyhow::Result<Report> {
    let started = Instant::now();
    let keyspace = keyspace_name("chaos", o.seed);
    let log_dir = std::env::temp_dir().join(format!("rebound-{keyspace}"));
    println!(
        "chaos: seed {} ({} s faulty phase, {} nodes), keyspace {keyspace}, node logs in {}",
        o.seed,
        o.duration.as_secs_f64(),
        o.nodes,
        log_dir.display()
    );
    println!(
        "chaos: re-run with: scripts/chaos --seed {} --minutes {}",
        o.seed,
        o.duration.as_secs_f64() / 60.0
    );
    let cluster = start_cluster(
        &o,
        Setup {
            name: "chaos",
            keyspace,
            log_dir,
            http: false,
            let_deadlines_pass: true,
            spare: true,
        },
    )
    .await?;
    let shared = cluster.shared.clone();
    // The pushed service: its receiver, and its target set on one node (the others read it
    // from the settings).
    let receiver = if o.push {
        let r = push::Receiver::start(shared.clone()).await?;
        r.set_target(&shared, 0).await?;
        println!(
            "chaos: service {:?} pushed to {} (timeout {} ms)",
            push::SERVICE,
            r.target().url,
            push::TIMEOUT_MS
        );
        Some(r)
    } else {
        None
    };
    let pushed: &[&str] = if o.push { &[push::SERVICE] } else { &[] };
    let t0 = now_ms();
    let plan = plan(&o);
    *shared.outages.lock().expect("outages") =
        plan.outages.iter().map(|(a, b)| (t0 + a, t0 + b)).collect();

    let mut executors = cluster.spawn_executors();
    if o.push {
        executors.extend(cluster.spawn_push_watchers(push::SERVICE));
    }
    let sampler = cluster
        .sample_directory(
            &o.contact_point,
            directory::Scan::Whole,
            Duration::from_millis(1_500),
        )
        .await?;
    let faults = cluster.inject(plan.faults.clone(), o.cassandra_pid, t0);
    // The workload: each operation at its planned time, concurrently.
    let mut calls = Vec::new();
    let mut op_counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut touched: BTreeSet<(String, String)> = BTreeSet::new();
    for (at, op) in plan.ops {
        let wait = t0 + at - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        op.count(&mut op_counts, &mut touched);
        calls.push(tokio::spawn(perform(shared.clone(), op)));
    }
    for c in calls {
        let _ = c.await;
    }
    let fault_counts = faults.await??;
    let faulty_end = now_ms();
    println!(
        "chaos: faulty phase over after {:.0} s; draining (executors answer SUCCEEDED)",
        started.elapsed().as_secs_f64()
    );

    let end = cluster
        .finish(Finish {
            t0,
            touched: &touched,
            drain_timeout: o.drain_timeout,
            sampler,
            executors,
            fault_counts: &fault_counts,
            scan: directory::Scan::Whole,
            pushed,
        })
        .await?;
    drop(receiver);
    let mut text = String::new();
    use std::fmt::Write;
    let _ = writeln!(text, "== chaos summary (seed {})", o.seed);
    let _ = writeln!(
        text,
        "run: {:.0} s total, faulty phase {:.0} s, drain {:.1} s; clock offset {} ms ± {}",
        started.elapsed().as_secs_f64(),
        (faulty_end - t0) as f64 / 1000.0,
        end.drain_s,
        cluster.offset_ms,
        cluster.err_ms
    );
    let ops_total: usize = op_counts.values().sum();
    let _ = writeln!(
        text,
        "operations: {ops_total} ({}), transactions {}",
        fmt_counts(&op_counts),
        touched.len()
    );
    text.push_str(&end.text);
    cluster
        .teardown(o.keep_keyspace || end.violations > 0)
        .await;
    Ok(Report {
        text,
        violations: end.violations,
    })
}

pub fn fmt_counts<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
