//! A seeded, reproducible randomized history checker ("chaos test").
//!
//! Three (or more) `rebound-server` processes run on one keyspace against the real Cassandra.
//! A workload planned from the seed enqueues, re-enqueues and cancels; executors subscribed to
//! every node answer SUCCEEDED, RETRY (with and without `retry_after`), FAILED or snooze; a
//! fault injector (also planned from the seed) SIGKILLs and restarts nodes, SIGSTOPs a node
//! past its lease, restarts a node with its clock off, and SIGSTOPs Cassandra for longer than
//! the request timeout. Every call, answer, delivery and fault is recorded ([`history`]), the
//! directory is sampled every second, and at the end [`checker`] checks the history against
//! the contract of docs/architecture.md ("Dispatch", "Guarantees across nodes").
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

pub mod checker;
pub mod cluster;
pub mod directory;
pub mod history;
pub mod hold;
pub mod push;
pub mod saga;
pub mod soak;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    hash::{Hash, Hasher},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use tokio::sync::Mutex as AsyncMutex;

use cluster::{CassandraPause, Node, NodeSettings};
use history::{now_ms, AckOk, Answer, EnqueueOk, Event, FaultKind, History, Kind, Outcome};

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
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace")
            .to_path_buf();
        Options {
            seed,
            duration,
            ops: None,
            nodes: 3,
            cassandra_pid: cluster::cassandra_pid(&repo),
            repo,
            contact_point: crate::contact_point(),
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
// The plan: workload and faults, from the seed alone.

#[derive(Clone, Debug)]
pub enum Sched {
    Delay(i64),
    DueIn(i64),
}

#[derive(Clone, Debug)]
pub enum Op {
    Enqueue {
        node: usize,
        items: Vec<(String, String, Sched)>,
        batch: bool,
    },
    Cancel {
        node: usize,
        service: String,
        tx: String,
    },
}

#[derive(Clone, Debug)]
pub struct PlannedFault {
    pub at_ms: i64,
    pub kind: FaultKind,
    pub node: usize,
    /// Down time (kill), stop time (stop, pause), or the new clock offset (skew).
    pub value: i64,
}

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
    while at < span_ms - 3_000 {
        faults.push(draw_fault(&mut rng, at, o.nodes, o.max_skew_ms));
        at += every / 2 + rng.random_range(0..every);
    }
    Plan {
        ops,
        faults,
        outages,
    }
}

/// The workload's operations, drawn one at a time from a seeded generator: enqueues (single
/// and batched) of new ids and of ids used recently, and cancels. The chaos plan draws a fixed
/// number of them spread over its run; the soak draws them at a steady rate.
pub struct OpGen {
    nodes: usize,
    /// A pushed service new ids go to a quarter of the time.
    pushed: Option<&'static str>,
    /// The ids used last, which re-enqueues and cancels pick from.
    recent: Vec<(String, String)>,
    next_id: u32,
}

impl OpGen {
    pub fn new(nodes: usize) -> OpGen {
        OpGen {
            nodes,
            pushed: None,
            recent: Vec::new(),
            next_id: 0,
        }
    }

    /// New ids go to `service` (which has a push target) a quarter of the time.
    pub fn with_pushed(mut self, service: &'static str) -> OpGen {
        self.pushed = Some(service);
        self
    }

    /// A new id (45 %) or one of the last 40.
    fn pick(&mut self, rng: &mut StdRng) -> (String, String) {
        if self.recent.is_empty() || rng.random_bool(0.45) {
            self.next_id += 1;
            let svc = match self.pushed {
                Some(p) if rng.random_bool(0.25) => p,
                _ if rng.random_bool(0.7) => SERVICES[0],
                _ => SERVICES[1],
            };
            let id = (svc.to_string(), format!("tx-{:05}", self.next_id));
            self.recent.push(id.clone());
            if self.recent.len() > 40 {
                self.recent.remove(0);
            }
            id
        } else {
            self.recent[rng.random_range(0..self.recent.len())].clone()
        }
    }

    fn sched(rng: &mut StdRng) -> Sched {
        if rng.random_bool(0.8) {
            Sched::Delay(rng.random_range(0..=3_000))
        } else {
            Sched::DueIn(rng.random_range(0..=3_000))
        }
    }

    /// The next operation: an enqueue (68 %), a batch of 2-5 (14 %) or a cancel (18 %), on a
    /// random node.
    pub fn next(&mut self, rng: &mut StdRng) -> Op {
        let node = rng.random_range(0..self.nodes);
        let r: f64 = rng.random();
        if r < 0.68 {
            let id = self.pick(rng);
            Op::Enqueue {
                node,
                items: vec![(id.0, id.1, Self::sched(rng))],
                batch: false,
            }
        } else if r < 0.82 {
            let n = rng.random_range(2..=5);
            let mut items: Vec<(String, String, Sched)> = Vec::new();
            for _ in 0..n {
                let id = self.pick(rng);
                if !items.iter().any(|(s, t, _)| *s == id.0 && *t == id.1) {
                    items.push((id.0, id.1, Self::sched(rng)));
                }
            }
            Op::Enqueue {
                node,
                items,
                batch: true,
            }
        } else {
            let id = self.pick(rng);
            Op::Cancel {
                node,
                service: id.0,
                tx: id.1,
            }
        }
    }
}

/// A fault at `at_ms` of a random kind on a random node: a node down for 0.5-3 s (kill),
/// stopped past its lease (stop), restarted with its clock off by up to `max_skew_ms` (skew),
/// or Cassandra stopped past the request timeout.
pub fn draw_fault(rng: &mut StdRng, at_ms: i64, nodes: usize, max_skew_ms: i64) -> PlannedFault {
    let kinds = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Skew,
        FaultKind::CassandraPause,
    ];
    let kind = kinds[rng.random_range(0..kinds.len())];
    let node = rng.random_range(0..nodes);
    let value = match kind {
        FaultKind::Kill => rng.random_range(500..=3_000),
        FaultKind::Stop => LEASE_TTL_MS as i64 + rng.random_range(500..=1_500),
        FaultKind::Skew => {
            if rng.random_bool(0.2) {
                0
            } else {
                let m = rng.random_range(100..=max_skew_ms.max(100));
                if rng.random_bool(0.5) {
                    m
                } else {
                    -m
                }
            }
        }
        FaultKind::CassandraPause => REQUEST_TIMEOUT_MS as i64 + rng.random_range(500..=2_000),
    };
    PlannedFault {
        at_ms,
        kind,
        node,
        value,
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

/// How to start the cluster of a run ([`start_cluster`]).
pub struct Setup {
    /// Prefix of the messages: "chaos", "soak".
    pub name: &'static str,
    pub keyspace: String,
    /// Node logs and the history go here.
    pub log_dir: PathBuf,
    /// Each node serves /metrics on a port of its own (`Started::http_ports`).
    pub http: bool,
    pub let_deadlines_pass: bool,
}

/// A running cluster: every node ready, the ring settled.
pub struct Started {
    pub keyspace: String,
    pub log_dir: PathBuf,
    pub cql: scylla::client::session::Session,
    /// Cassandra's clock minus ours, and the error of that measurement.
    pub offset_ms: i64,
    pub err_ms: i64,
    pub settings: NodeSettings,
    pub shared: Arc<Shared>,
    /// The metrics port of each node (None without `Setup::http`).
    pub http_ports: Vec<Option<u16>>,
}

/// A keyspace name for a run of `name` with `seed` that no other run uses.
pub fn keyspace_name(name: &str, seed: u64) -> String {
    format!(
        "{name}_{seed}_{}_{}",
        std::process::id(),
        rand::random::<u16>()
    )
}

/// Starts `o.nodes` nodes on a new keyspace (the first alone: it applies the schema) and
/// waits for the ring to settle.
pub async fn start_cluster(o: &Options, s: Setup) -> anyhow::Result<Started> {
    std::fs::create_dir_all(&s.log_dir)?;
    let name = s.name;
    if o.cassandra_pid.is_none() {
        println!("{name}: Cassandra's pid unknown: the Cassandra pause fault is skipped");
    }
    let cql = directory::session(&o.contact_point).await?;
    let (offset, err) = directory::clock_offset(&cql).await?;
    history::set_offset_ms(offset);
    println!("{name}: Cassandra's clock - ours = {offset} ms (± {err} ms)");

    let settings = NodeSettings {
        bin: cluster::server_bin()?,
        contact_point: o.contact_point.clone(),
        keyspace: s.keyspace.clone(),
        log_dir: s.log_dir.clone(),
        window_seconds: WINDOW_SECONDS,
        skew_margin_ms: SKEW_MARGIN_MS,
        lease_ttl_ms: LEASE_TTL_MS,
        request_timeout_ms: REQUEST_TIMEOUT_MS,
    };
    let mut nodes = Vec::new();
    for i in 0..o.nodes {
        let mut n = Node::new(i, cluster::free_port());
        if s.http {
            n.http_port = Some(cluster::free_port());
        }
        n.start(&settings, 0)?;
        // The first node creates the keyspace and applies the schema alone.
        if i == 0 && !n.wait_ready(Duration::from_secs(90)).await {
            anyhow::bail!("node n1 did not start; see {}", s.log_dir.display());
        }
        nodes.push(n);
    }
    for n in &nodes {
        if !n.wait_ready(Duration::from_secs(90)).await {
            anyhow::bail!("node {} did not start; see {}", n.id, s.log_dir.display());
        }
    }
    let channels = nodes.iter().map(|n| n.channel.clone()).collect();
    let http_ports = nodes.iter().map(|n| n.http_port).collect();
    let shared = Arc::new(Shared {
        history: History::default(),
        nodes: nodes
            .into_iter()
            .map(|n| Arc::new(AsyncMutex::new(n)))
            .collect(),
        channels,
        draining: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        seed: o.seed,
        let_deadlines_pass: s.let_deadlines_pass,
        seen: Mutex::new(HashMap::new()),
        ignored: AtomicUsize::new(0),
        outages: Mutex::new(Vec::new()),
    });
    // Let the ring settle: every node holds slots.
    tokio::time::sleep(Duration::from_millis(2 * LEASE_TTL_MS)).await;
    Ok(Started {
        keyspace: s.keyspace,
        log_dir: s.log_dir,
        cql,
        offset_ms: offset,
        err_ms: err,
        settings,
        shared,
        http_ports,
    })
}

impl Started {
    /// One executor per service on every node, each for the whole run (until `Shared::stop`).
    pub fn spawn_executors(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut out = Vec::new();
        for node in 0..self.shared.nodes.len() {
            for svc in SERVICES
                .iter()
                .chain(saga::SERVICES)
                .chain([&hold::SERVICE])
            {
                out.push(tokio::spawn(executor(
                    self.shared.clone(),
                    node,
                    svc.to_string(),
                    format!("chaos-n{}-{svc}", node + 1),
                )));
            }
        }
        out
    }

    /// One Subscribe stream of `service` (which has a push target) on every node, recording
    /// what it gets and never acknowledging it: it should get nothing (the checker's rule 8).
    pub fn spawn_push_watchers(&self, service: &'static str) -> Vec<tokio::task::JoinHandle<()>> {
        (0..self.shared.nodes.len())
            .map(|node| {
                let shared = self.shared.clone();
                tokio::spawn(async move {
                    let spec = StreamSpec {
                        node,
                        service,
                        executor_id: format!("chaos-watch-n{}-{service}", node + 1),
                        max_in_flight: 4,
                        subscribe_timeout: Duration::from_secs(3),
                    };
                    record_deliveries(
                        &shared.stop,
                        &shared.channels[node],
                        &shared.history,
                        spec,
                        |_, _| {},
                    )
                    .await;
                })
            })
            .collect()
    }

    /// Samples the directory every `every` until [`Started::finish`] (see
    /// `directory::sampler_with`).
    pub async fn sample_directory(
        &self,
        contact_point: &str,
        scan: directory::Scan,
        every: Duration,
    ) -> anyhow::Result<DirectorySampling> {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(directory::sampler_with(
            directory::session(contact_point).await?,
            self.keyspace.clone(),
            stop.clone(),
            scan,
            every,
        ));
        Ok(DirectorySampling { stop, task })
    }

    /// Runs `faults` one after the other from `t0`, each ending with its target running.
    pub fn inject(
        &self,
        faults: Vec<PlannedFault>,
        cassandra: Option<u32>,
        t0: i64,
    ) -> tokio::task::JoinHandle<anyhow::Result<BTreeMap<String, usize>>> {
        tokio::spawn(inject(
            self.shared.clone(),
            self.settings.clone(),
            faults,
            cassandra,
            t0,
        ))
    }

    /// After the workload and the faults: the drain (every node up, executors ack SUCCEEDED,
    /// until nothing is SCHEDULED), the directory's end state, the dead letters and the
    /// checker. Stops the executors and the directory sampler; the nodes keep running until
    /// [`Started::teardown`]. The text goes from the answers to the history file.
    pub async fn finish(&self, f: Finish<'_>) -> anyhow::Result<Ending> {
        let shared = &self.shared;
        let (cql, keyspace) = (&self.cql, &self.keyspace);
        let (mut finals, drain_s) = drain(shared, f.touched, f.drain_timeout).await;
        // The compensation chains of the steps that died, run to their ends.
        let dead_steps: Vec<String> = finals
            .iter()
            .filter(|((s, _), r)| {
                s == saga::STEP
                    && matches!(r, Answer::Ok(x) if x.status == pb::RetryStatus::Dead as i32)
            })
            .map(|((_, t), _)| t.clone())
            .collect();
        let saga_steps = f.touched.iter().filter(|(s, _)| s == saga::STEP).count();
        if saga_steps > 0 {
            let keys = saga::chain_keys(&dead_steps);
            let started = Instant::now();
            let mut chains = final_states(shared, &keys).await;
            while started.elapsed() < Duration::from_secs(45) {
                let mut all = finals.clone();
                all.extend(chains.clone());
                if dead_steps.iter().all(|t| saga::settled(&all, t)) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                chains = final_states(shared, &keys).await;
            }
            // The chains of the steps that did not die: none may exist.
            let others: Vec<String> = f
                .touched
                .iter()
                .filter(|(s, t)| s == saga::STEP && !dead_steps.contains(t))
                .map(|(_, t)| t.clone())
                .collect();
            chains.extend(final_states(shared, &saga::chain_keys(&others)).await);
            finals.extend(chains);
        }
        // Compaction: tiers 2-5 empty, Tier 1 at most today's day.
        let end_state =
            directory::wait_end_state_with(cql, keyspace, Duration::from_secs(30), &f.scan).await;
        let leftover = if end_state.is_empty() {
            Vec::new()
        } else {
            directory::leftover_pointers(cql, keyspace).await
        };
        shared.stop.store(true, Ordering::SeqCst);
        f.sampler.stop.store(true, Ordering::SeqCst);
        let orphans = f.sampler.task.await?;
        let letters = dead_letters(shared, f.pushed).await;
        for e in f.executors {
            e.abort();
        }

        let events = shared.history.snapshot();
        let t0 = f.t0;
        let input = checker::Input {
            events: &events,
            finals: &finals,
            letters: &letters,
            clock_err_ms: self.err_ms + 5,
            t0,
        };
        let unstored = if f.pushed.is_empty() {
            HashSet::new()
        } else {
            unstored_pushes(&self.log_dir)
        };
        let push_rules = checker::Push {
            services: f.pushed,
            timeout_ms: push::TIMEOUT_MS,
            unstored: &unstored,
        };
        let mut result = checker::check_with(&input, (!f.pushed.is_empty()).then_some(&push_rules));
        let saga_counts = if saga_steps > 0 {
            let (v, c) = saga::check(&events, &finals, &letters);
            result.violations.extend(v);
            Some(c)
        } else {
            None
        };
        let hold_counts = if f.touched.iter().any(|(s, _)| s == hold::SERVICE) {
            let (v, c) = hold::check(&events, &finals);
            result.violations.extend(v);
            Some(c)
        } else {
            None
        };

        let mut text = String::new();
        use std::fmt::Write;
        let mut answers: BTreeMap<String, usize> = BTreeMap::new();
        for e in &events {
            let (k, unknown, refused) = match &e.kind {
                Kind::Enqueue { answer, .. } => (
                    "enqueue item",
                    answer.is_unknown(),
                    matches!(answer, Answer::Refused(_)),
                ),
                Kind::Cancel { answer, .. } => (
                    "cancel",
                    answer.is_unknown(),
                    matches!(answer, Answer::Refused(_)),
                ),
                Kind::Ack { answer, .. } => (
                    "ack",
                    answer.is_unknown(),
                    matches!(answer, Answer::Refused(_)),
                ),
                Kind::Redrive { answer, .. } => (
                    "redrive",
                    answer.is_unknown(),
                    matches!(answer, Answer::Refused(_)),
                ),
                _ => continue,
            };
            let tag = if unknown {
                "unknown"
            } else if refused {
                "refused"
            } else {
                "ok"
            };
            *answers.entry(format!("{k} {tag}")).or_default() += 1;
        }
        let _ = writeln!(text, "answers: {}", fmt_counts(&answers));
        let _ = writeln!(
            text,
            "faults: {} ({})",
            f.fault_counts.values().sum::<usize>(),
            fmt_counts(f.fault_counts)
        );
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for e in &events {
            if let Kind::Ack { outcome, .. } = &e.kind {
                *outcomes.entry(format!("{outcome:?}")).or_default() += 1;
            }
        }
        let _ = writeln!(
            text,
            "deliveries: {} (acks: {}; ignored on purpose: {})",
            result.deliveries,
            fmt_counts(&outcomes),
            shared.ignored.load(Ordering::SeqCst)
        );
        if !f.pushed.is_empty() {
            let mut replies: BTreeMap<String, usize> = BTreeMap::new();
            for e in &events {
                if let Kind::PushAnswer { reply, .. } = &e.kind {
                    let k = match reply {
                        history::Reply::Status { code, .. } if (200..300).contains(code) => {
                            "2xx".to_string()
                        }
                        history::Reply::Status { code, .. } => code.to_string(),
                        history::Reply::Stall => "stall".to_string(),
                    };
                    *replies.entry(k).or_default() += 1;
                }
            }
            let _ = writeln!(
                text,
                "pushed ({}): {} requests (answers: {}); attempts pushed again: {}; after a 2xx: {} (explained by a fault or an unstored outcome: {}); outcomes logged as not stored: {}",
                f.pushed.join(", "),
                result.pushes,
                fmt_counts(&replies),
                result.push_duplicates,
                result.pushes_after_2xx,
                result.explained_pushes_after_2xx,
                unstored.len()
            );
        }
        if let Some(c) = &saga_counts {
            let _ = writeln!(
                text,
                "sagas: {} steps, {} died: chains run to their end {}, stopped at a dead compensation {}; {} compensation deliveries ({} after its SUCCEEDED was acknowledged); DEAD steps one of whose deliveries was acknowledged SUCCEEDED: {}",
                c.steps, c.dead, c.completed, c.stopped, c.deliveries, c.after_success, c.dead_over_success
            );
        }
        if let Some(c) = &hold_counts {
            let _ = writeln!(
                text,
                "holds: {} retries naming {:?} ({} deliveries, {} holds asked for by the executors; {} deliveries excused by a SIGSTOP)",
                c.retries,
                hold::DEPENDENCY,
                c.deliveries,
                c.holds,
                c.excused
            );
        }
        let _ = writeln!(
            text,
            "duplicates: {} (explained by a fault or an expired deadline: {}) against a bound of {}",
            result.duplicates, result.explained_duplicates, result.duplicate_bound
        );
        let _ = writeln!(
            text,
            "directory: {} samples, {} persisting orphans; end state: {}",
            orphans.samples,
            orphans.orphans.len(),
            if end_state.is_empty() {
                "empty but for today's Tier-1 row".to_string()
            } else {
                end_state.join("; ")
            }
        );
        let mut violations = result.violations;
        for (at, o) in &orphans.orphans {
            violations.push(checker::Violation {
                kind: if o.contains("low_water") {
                    "Tier-3 row below the low-water mark"
                } else {
                    "orphan directory row"
                },
                subject: format!("{o} (sampled at {} ms)", at - t0),
                lines: vec![],
            });
        }
        for e in &end_state {
            violations.push(checker::Violation {
                kind: "directory not empty at the end",
                subject: e.clone(),
                lines: vec![],
            });
        }
        let mut tx_lines: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            if let Some(k) = e.tx() {
                tx_lines.entry(k).or_default().push(i);
            }
        }
        for (s, t, what) in &leftover {
            let mut lines = tx_lines
                .get(&(s.as_str(), t.as_str()))
                .cloned()
                .unwrap_or_default();
            if lines.len() > 40 {
                lines.drain(..lines.len() - 40);
            }
            violations.push(checker::Violation {
                kind: "pointer left at the end",
                subject: format!("{s}/{t}: {what}"),
                lines,
            });
        }
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &violations {
            *by_kind.entry(v.kind).or_default() += 1;
        }
        let _ = writeln!(
            text,
            "violations: {} (expected 0){}{}",
            violations.len(),
            if by_kind.is_empty() { "" } else { ": " },
            fmt_counts(&by_kind)
        );
        const SHOWN: usize = 6;
        let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &violations {
            let n = shown.entry(v.kind).or_default();
            *n += 1;
            if *n > SHOWN {
                continue;
            }
            let _ = writeln!(text, "-- VIOLATION {}: {}", v.kind, v.subject);
            for &i in &v.lines {
                let _ = writeln!(
                    text,
                    "     {}",
                    history::Line {
                        index: i,
                        event: &events[i],
                        t0
                    }
                );
            }
        }
        for (k, n) in &by_kind {
            if *n > SHOWN {
                let _ = writeln!(text, "-- ... and {} more of {k}", n - SHOWN);
            }
        }
        // The full history, for diagnosis.
        let hist_file = self.log_dir.join("history.txt");
        let mut all = format!(
            "# seed {}, keyspace {keyspace}, t0 = {} ({} ms since the epoch, Cassandra clock)\n",
            shared.seed,
            chrono::DateTime::from_timestamp_millis(t0).map_or(String::new(), |d| d.to_rfc3339()),
            t0
        );
        for (i, e) in events.iter().enumerate() {
            let _ = writeln!(
                all,
                "{}",
                history::Line {
                    index: i,
                    event: e,
                    t0
                }
            );
        }
        let _ = std::fs::write(&hist_file, all);
        let _ = writeln!(
            text,
            "history: {} events in {} (times in ms from the start of the workload, Cassandra clock)",
            events.len(),
            hist_file.display()
        );
        Ok(Ending {
            text,
            violations: violations.len(),
            end_state,
            drain_s,
            deliveries: result.deliveries,
        })
    }

    /// Stops every node (SIGTERM, SIGKILL after 3 s) and drops the keyspace unless `keep`.
    pub async fn teardown(&self, keep: bool) {
        for n in &self.shared.nodes {
            n.lock().await.terminate(Duration::from_secs(3)).await;
        }
        if !keep {
            let _ = self
                .cql
                .query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", self.keyspace), ())
                .await;
        }
    }
}

/// The directory sampler of a run, stopped by [`Started::finish`].
pub struct DirectorySampling {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<directory::Samples>,
}

/// What [`Started::finish`] needs of the run.
pub struct Finish<'a> {
    /// When the workload started (the history's times are printed from it).
    pub t0: i64,
    /// Every transaction the workload touched.
    pub touched: &'a BTreeSet<(String, String)>,
    pub drain_timeout: Duration,
    pub sampler: DirectorySampling,
    /// Aborted once the drain is over.
    pub executors: Vec<tokio::task::JoinHandle<()>>,
    pub fault_counts: &'a BTreeMap<String, usize>,
    /// How the end state is read.
    pub scan: directory::Scan,
    /// The services with a push target (checked by the push rules; empty: none).
    pub pushed: &'a [&'a str],
}

/// What the end of a run found.
pub struct Ending {
    /// From the answers to the history file, one line each.
    pub text: String,
    /// Of the checker, the directory samples, the end state and the pointers left.
    pub violations: usize,
    /// What is left in the directory beyond today's day (empty: nothing).
    pub end_state: Vec<String>,
    pub drain_s: f64,
    pub deliveries: usize,
}

/// Executors answer SUCCEEDED from now on; waits until no transaction of `touched` is
/// SCHEDULED (or `timeout`). Returns every final state (read again at the end) and the
/// seconds it took.
async fn drain(
    shared: &Arc<Shared>,
    touched: &BTreeSet<(String, String)>,
    timeout: Duration,
) -> (BTreeMap<(String, String), Answer<pb::Retry>>, f64) {
    shared.draining.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let scheduled =
        |finals: &BTreeMap<(String, String), Answer<pb::Retry>>| -> BTreeSet<(String, String)> {
            finals
            .iter()
            .filter(|(_, r)| matches!(r, Answer::Ok(x) if x.status == pb::RetryStatus::Scheduled as i32))
            .map(|(k, _)| k.clone())
            .collect()
        };
    let mut finals = final_states(shared, touched).await;
    // Only those still SCHEDULED are read again while waiting; every one at the end.
    let mut pending = scheduled(&finals);
    let mut waited = false;
    while !pending.is_empty() && started.elapsed() <= timeout {
        tokio::time::sleep(Duration::from_secs(2)).await;
        pending = scheduled(&final_states(shared, &pending).await);
        waited = true;
    }
    if waited {
        finals = final_states(shared, touched).await;
    }
    (finals, started.elapsed().as_secs_f64())
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

impl Op {
    /// Counts the operation by kind and adds the transactions it touches.
    pub fn count(
        &self,
        counts: &mut BTreeMap<&'static str, usize>,
        touched: &mut BTreeSet<(String, String)>,
    ) {
        match self {
            Op::Enqueue { items, batch, .. } => {
                *counts
                    .entry(if *batch { "enqueue_batch" } else { "enqueue" })
                    .or_default() += 1;
                for (s, t, _) in items {
                    touched.insert((s.clone(), t.clone()));
                }
            }
            Op::Cancel { service, tx, .. } => {
                *counts.entry("cancel").or_default() += 1;
                touched.insert((service.clone(), tx.clone()));
            }
        }
    }
}

pub fn fmt_counts<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn perform(shared: Arc<Shared>, op: Op) {
    match op {
        Op::Enqueue { node, items, batch } => {
            let now = now_ms();
            let reqs: Vec<(pb::EnqueueRetryRequest, String)> = items
                .iter()
                .map(|(svc, tx, s)| {
                    let (schedule, asked) = match s {
                        Sched::Delay(ms) => (
                            pb::enqueue_retry_request::Schedule::Delay(dur(*ms)),
                            format!("delay={ms}ms"),
                        ),
                        Sched::DueIn(ms) => (
                            pb::enqueue_retry_request::Schedule::DueTime(ts(now + ms)),
                            format!("due_in={ms}ms"),
                        ),
                    };
                    (
                        pb::EnqueueRetryRequest {
                            service: svc.clone(),
                            transaction_id: tx.clone(),
                            payload: tx.as_bytes().to_vec(),
                            schedule: Some(schedule),
                            policy: Some(policy()),
                            attempt: 1,
                            last_error: "first try failed".into(),
                            compensations: if svc == saga::STEP {
                                saga::compensations(tx)
                            } else {
                                Vec::new()
                            },
                            dependency: if svc == hold::SERVICE {
                                hold::DEPENDENCY.into()
                            } else {
                                String::new()
                            },
                            ..Default::default()
                        },
                        asked,
                    )
                })
                .collect();
            let mut client = RetryServiceClient::new(shared.channels[node].clone());
            let start = now_ms();
            let answers: Vec<Answer<EnqueueOk>> = if batch {
                let r = call(client.enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
                    requests: reqs.iter().map(|(r, _)| r.clone()).collect(),
                }))
                .await;
                match r {
                    Ok(resp) => resp
                        .results
                        .into_iter()
                        .map(|r| match r.result {
                            Some(pb::enqueue_retry_result::Result::Response(x)) => {
                                Answer::Ok(enqueue_ok(&x))
                            }
                            Some(pb::enqueue_retry_result::Result::Error(e)) => {
                                Answer::from_item_error(e.code, &e.message)
                            }
                            None => Answer::Unknown("empty result".into()),
                        })
                        .collect(),
                    Err(s) => reqs.iter().map(|_| Answer::from_status(&s)).collect(),
                }
            } else {
                let r = call(client.enqueue_retry(reqs[0].0.clone())).await;
                vec![match r {
                    Ok(x) => Answer::Ok(enqueue_ok(&x)),
                    Err(s) => Answer::from_status(&s),
                }]
            };
            let end = now_ms();
            for ((req, asked), answer) in reqs.into_iter().zip(answers) {
                shared.history.push(Event {
                    start_ms: start,
                    end_ms: end,
                    kind: Kind::Enqueue {
                        node,
                        service: req.service,
                        tx: req.transaction_id,
                        asked,
                        batch,
                        answer,
                    },
                });
            }
        }
        Op::Cancel { node, service, tx } => {
            let mut client = RetryServiceClient::new(shared.channels[node].clone());
            let start = now_ms();
            let r = call(client.cancel_retry(pb::CancelRetryRequest {
                service: service.clone(),
                transaction_id: tx.clone(),
            }))
            .await;
            let end = now_ms();
            let answer = match r {
                Ok(x) => Answer::Ok((x.cancelled, x.status)),
                Err(s) => Answer::from_status(&s),
            };
            shared.history.push(Event {
                start_ms: start,
                end_ms: end,
                kind: Kind::Cancel {
                    node,
                    service,
                    tx,
                    answer,
                },
            });
        }
    }
}

fn enqueue_ok(x: &pb::EnqueueRetryResponse) -> EnqueueOk {
    EnqueueOk {
        due_ms: ts_ms(&x.due_time).unwrap_or(0),
        generation: x.generation,
        deduplicated: x.deduplicated,
    }
}

/// One executor stream of [`record_deliveries`].
pub struct StreamSpec<'a> {
    pub node: usize,
    pub service: &'a str,
    pub executor_id: String,
    pub max_in_flight: u32,
    /// How long a Subscribe may take to answer before it is tried again.
    pub subscribe_timeout: Duration,
}

/// Subscribes as `spec` says on `channel` (again after every break) until `stop`, records
/// every delivery in `history` when it arrives, and hands it, with its history index, to
/// `on_delivery`. The chaos executors and `node_loss` both read their deliveries this way.
pub async fn record_deliveries(
    stop: &AtomicBool,
    channel: &tonic::transport::Channel,
    history: &History,
    spec: StreamSpec<'_>,
    mut on_delivery: impl FnMut(usize, pb::Delivery),
) {
    while !stop.load(Ordering::SeqCst) {
        let mut client = ExecutorServiceClient::new(channel.clone());
        let sub = tokio::time::timeout(
            spec.subscribe_timeout,
            client.subscribe(pb::SubscribeRequest {
                service: spec.service.to_string(),
                executor_id: spec.executor_id.clone(),
                max_in_flight: spec.max_in_flight,
            }),
        )
        .await;
        let mut stream = match sub {
            Ok(Ok(s)) => s.into_inner(),
            _ => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        while let Ok(Some(d)) = stream.message().await {
            let at = now_ms();
            let idx = history.push(Event {
                start_ms: at,
                end_ms: at,
                kind: Kind::Delivery {
                    node: spec.node,
                    service: d.service.clone(),
                    tx: d.transaction_id.clone(),
                    delivery_id: d.delivery_id.clone(),
                    attempt: d.attempt,
                    due_ms: ts_ms(&d.due_time).unwrap_or(0),
                    deadline_ms: ts_ms(&d.ack_deadline).unwrap_or(0),
                },
            });
            on_delivery(idx, d);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The executor `executor_id` of one service on one node: subscribes (again after every
/// break), answers each delivery with an outcome chosen from the seed, on the node that
/// delivered it. Runs until `Shared::stop`; dropping it closes its stream (the node hands
/// what it had in flight to other executors).
pub async fn executor(shared: Arc<Shared>, node: usize, service: String, executor_id: String) {
    let spec = StreamSpec {
        node,
        service: &service,
        executor_id,
        max_in_flight: 16,
        subscribe_timeout: Duration::from_secs(3),
    };
    record_deliveries(
        &shared.stop,
        &shared.channels[node],
        &shared.history,
        spec,
        |idx, d| {
            tokio::spawn(answer(shared.clone(), node, idx, d));
        },
    )
    .await;
}

/// The deterministic choice for the n-th sighting of (service, tx, attempt).
fn choose(shared: &Shared, d: &pb::Delivery) -> (Option<Outcome>, Option<i64>, u64) {
    let n = {
        let mut seen = shared.seen.lock().expect("seen");
        let c = seen
            .entry((d.service.clone(), d.transaction_id.clone(), d.attempt))
            .or_insert(0);
        *c += 1;
        *c
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (shared.seed, &d.service, &d.transaction_id, d.attempt, n).hash(&mut h);
    let mut rng = StdRng::seed_from_u64(h.finish());
    let think = rng.random_range(0..=200);
    if shared.draining.load(Ordering::SeqCst) {
        return (Some(Outcome::Succeeded), None, think);
    }
    let r: f64 = rng.random();
    let after = rng.random_range(1_000..=2_000);
    let (o, a) = if r < 0.38 {
        (Some(Outcome::Succeeded), None)
    } else if r < 0.56 {
        (Some(Outcome::Retry), None)
    } else if r < 0.70 {
        (Some(Outcome::RetryAfter), Some(after))
    } else if r < 0.80 {
        (Some(Outcome::Failed), None)
    } else if r < 0.96 {
        (Some(Outcome::Snooze), Some(after))
    } else if shared.let_deadlines_pass {
        // Never answered: the ack deadline passes and the node redelivers.
        (None, None)
    } else {
        (Some(Outcome::Succeeded), None)
    };
    (o, a, think)
}

async fn answer(shared: Arc<Shared>, node: usize, idx: usize, d: pb::Delivery) {
    let (outcome, after, think) = choose(&shared, &d);
    tokio::time::sleep(Duration::from_millis(think)).await;
    let Some(outcome) = outcome else {
        shared.ignored.fetch_add(1, Ordering::SeqCst);
        return;
    };
    let error = match outcome {
        Outcome::Succeeded => String::new(),
        _ => format!("chaos-{outcome:?}-#{idx}"),
    };
    let (req, outcome, after, error) = if d.service == hold::SERVICE {
        // Its dependency decides: a hold while it is down, else SUCCEEDED.
        let now = now_ms();
        let down = !shared.draining.load(Ordering::SeqCst)
            && hold::down(&shared.outages.lock().expect("outages"), now);
        let (req, outcome) = hold::ack_request(&d, down);
        let error = req.error.clone();
        (req, outcome, None, error)
    } else {
        (
            ack_request(&d, outcome, after, &error),
            outcome,
            after,
            error,
        )
    };
    let mut client = ExecutorServiceClient::new(shared.channels[node].clone());
    let start = now_ms();
    let r = call(client.ack(req)).await;
    let end = now_ms();
    let answer = match r {
        Ok(x) => Answer::Ok(AckOk {
            next_due_ms: ts_ms(&x.next_due_time),
            dead_lettered: x.dead_lettered,
            snoozed: x.snoozed,
        }),
        Err(s) => Answer::from_status(&s),
    };
    shared.history.push(Event {
        start_ms: start,
        end_ms: end,
        kind: Kind::Ack {
            node,
            service: d.service,
            tx: d.transaction_id,
            delivery_id: d.delivery_id,
            delivery: idx,
            attempt: d.attempt,
            outcome,
            retry_after_ms: after,
            error,
            answer,
        },
    });
}

/// The ack of `d` with `outcome` chosen by [`choose`].
fn ack_request(
    d: &pb::Delivery,
    outcome: Outcome,
    after: Option<i64>,
    error: &str,
) -> pb::AckRequest {
    pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: match outcome {
            Outcome::Succeeded => pb::AckOutcome::Succeeded,
            Outcome::Failed => pb::AckOutcome::Failed,
            _ => pb::AckOutcome::Retry,
        } as i32,
        retry_after: after.map(dur),
        error: error.to_string(),
        snooze: outcome == Outcome::Snooze,
        ..Default::default()
    }
}

/// Runs the planned faults one after the other; every fault ends with its target running.
async fn inject(
    shared: Arc<Shared>,
    settings: NodeSettings,
    faults: Vec<PlannedFault>,
    cassandra: Option<u32>,
    t0: i64,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for f in faults {
        let wait = t0 + f.at_ms - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let start = now_ms();
        let detail;
        let node = match f.kind {
            FaultKind::CassandraPause => {
                let Some(pid) = cassandra else { continue };
                let inflight = shared.history.in_flight_at(start, None);
                {
                    let _pause = CassandraPause::start(pid);
                    tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                }
                detail = format!("SIGSTOP for {} ms; {inflight} in flight", f.value);
                None
            }
            FaultKind::Kill => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, Some(f.node));
                n.kill();
                tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                let skew = n.skew_ms;
                n.start(&settings, skew)?;
                let ready = n.wait_ready(Duration::from_secs(60)).await;
                detail = format!(
                    "SIGKILL, restarted after {} ms (ready: {ready}); {inflight} in flight",
                    f.value
                );
                Some(f.node)
            }
            FaultKind::Stop => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, Some(f.node));
                n.stop();
                tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                n.resume();
                detail = format!("SIGSTOP for {} ms; {inflight} in flight", f.value);
                Some(f.node)
            }
            FaultKind::Skew => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, Some(f.node));
                n.terminate(Duration::from_secs(3)).await;
                n.start(&settings, f.value)?;
                let ready = n.wait_ready(Duration::from_secs(60)).await;
                detail = format!(
                    "restarted (SIGTERM) with clock offset {} ms{} (ready: {ready}); {inflight} in flight",
                    f.value,
                    if f.value == 0 { " (clock sync on)" } else { ", clock sync off" }
                );
                Some(f.node)
            }
        };
        *counts.entry(format!("{:?}", f.kind)).or_default() += 1;
        shared.history.push(Event {
            start_ms: start,
            end_ms: now_ms(),
            kind: Kind::Fault {
                kind: f.kind,
                node,
                detail,
            },
        });
    }
    Ok(counts)
}

/// GetRetry of every transaction the workload touched.
async fn final_states(
    shared: &Shared,
    touched: &BTreeSet<(String, String)>,
) -> BTreeMap<(String, String), Answer<pb::Retry>> {
    use futures::StreamExt;
    let n = shared.channels.len();
    futures::stream::iter(touched.iter().enumerate())
        .map(|(i, (s, t))| {
            let ch = shared.channels[i % n].clone();
            async move {
                let mut c = RetryServiceClient::new(ch);
                let r = call(c.get_retry(pb::GetRetryRequest {
                    service: s.clone(),
                    transaction_id: t.clone(),
                }))
                .await;
                let a = match r {
                    Ok(x) => Answer::Ok(x),
                    Err(e) => Answer::from_status(&e),
                };
                ((s.clone(), t.clone()), a)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// The delivery ids whose push outcome a node logged as not stored (`push outcome not
/// stored`, at warn) in the node logs of `log_dir`: pushed again after their deadline.
pub fn unstored_pushes(log_dir: &std::path::Path) -> HashSet<String> {
    let mut out = HashSet::new();
    let Ok(dir) = std::fs::read_dir(log_dir) else {
        return out;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text
            .lines()
            .filter(|l| l.contains("push outcome not stored"))
        {
            if let Some(id) = logged_delivery_id(line) {
                out.insert(id);
            }
        }
    }
    out
}

/// The `delivery_id` field of a log line, in text (with or without colours) or JSON.
fn logged_delivery_id(line: &str) -> Option<String> {
    // Without ANSI escapes (ESC [ ... m).
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let rest = &plain[plain.find("delivery_id")? + "delivery_id".len()..];
    let rest = rest.trim_start_matches(['=', '"', ':', ' ']);
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// Every dead letter of the run's services (the streamed ones and `pushed`): (service, tx) →
/// last errors.
async fn dead_letters(shared: &Shared, pushed: &[&str]) -> HashMap<(String, String), Vec<String>> {
    let mut out: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut admin = AdminServiceClient::new(shared.channels[0].clone());
    for svc in SERVICES.iter().chain(saga::SERVICES).chain(pushed) {
        let mut token = String::new();
        loop {
            let r = call(admin.list_dead_letters(pb::ListDeadLettersRequest {
                service: svc.to_string(),
                page_size: 1000,
                page_token: token.clone(),
                include_redriven: true,
                ..Default::default()
            }))
            .await;
            match r {
                Ok(page) => {
                    for l in page.dead_letters {
                        out.entry((l.service, l.transaction_id))
                            .or_default()
                            .push(l.last_error);
                    }
                    if page.next_page_token.is_empty() {
                        break;
                    }
                    token = page.next_page_token;
                }
                Err(e) => {
                    eprintln!("chaos: ListDeadLetters({svc}) failed: {e}");
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::logged_delivery_id;

    #[test]
    fn the_delivery_id_of_a_logged_unstored_push_is_found_in_colour_and_json() {
        let text = "\u{1b}[2m2026-12-02T21:30:45.703924Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mrebound_server::push::pusher\u{1b}[0m\u{1b}[2m:\u{1b}[0m push outcome not stored; the delivery is pushed again after its deadline \u{1b}[3mservice\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"pushed\" \u{1b}[3mdelivery_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"1796247029349-10-1264499652\" \u{1b}[3merror\u{1b}[0m\u{1b}[2m=\u{1b}[0mdelivery";
        assert_eq!(
            logged_delivery_id(text).as_deref(),
            Some("1796247029349-10-1264499652")
        );
        let json = r#"{"level":"WARN","fields":{"message":"push outcome not stored","delivery_id":"17-1-2"}}"#;
        assert_eq!(logged_delivery_id(json).as_deref(), Some("17-1-2"));
        assert_eq!(logged_delivery_id("push outcome not stored"), None);
    }
}
