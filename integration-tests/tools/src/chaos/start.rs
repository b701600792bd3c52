//! The start of a run: the cluster ([`start_cluster`]), and what runs on it until the end
//! ([`Started`]: executors, push watchers, the directory sampler, the fault injector).

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicUsize},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::sync::Mutex as AsyncMutex;

use super::{
    cluster::{self, Node, NodeSettings},
    directory,
    executors::{executor, record_deliveries, StreamSpec},
    faults::{self, PlannedFault},
    history::{self, History},
    hold, saga, Options, Shared, LEASE_TTL_MS, REQUEST_TIMEOUT_MS, SERVICES, SKEW_MARGIN_MS,
    WINDOW_SECONDS,
};

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
    /// One node more than `Options::nodes`, not started: the join fault's. Executors
    /// subscribe to it too (their streams reconnect until it runs); the workload never
    /// calls it.
    pub spare: bool,
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
    let spare = s.spare.then_some(nodes.len());
    if s.spare {
        let mut n = Node::new(nodes.len(), cluster::free_port());
        if s.http {
            n.http_port = Some(cluster::free_port());
        }
        nodes.push(n);
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
        spare,
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
        tokio::spawn(faults::inject(
            self.shared.clone(),
            self.settings.clone(),
            faults,
            cassandra,
            t0,
        ))
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
    pub(super) stop: Arc<AtomicBool>,
    pub(super) task: tokio::task::JoinHandle<directory::Samples>,
}
