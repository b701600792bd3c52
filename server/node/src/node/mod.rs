//! A running Rebound node: opens its store (`REBOUND_STORE`: Cassandra, or the embedded store
//! for one node) and migrates it, sets its clock to the database's (clock sync, Cassandra),
//! builds the engine from its settings, prepares it (settings, holds, one lease-ring round
//! unless an `Ownership` is given) and starts it, then serves the engine's `Handle` over gRPC
//! (the API, health and reflection on one port) and HTTP.
//!
//! Every task it runs has an owner (`NodeTasks`, see `tasks`): its servers' and the engine's.
//! `Node::shutdown` signals them all and closes the Subscribe streams, lets running calls and
//! tasks finish until the shutdown grace (`REBOUND_SHUTDOWN_GRACE_MS`) ends, then cuts the
//! connections still open and aborts the tasks still running (the engine's `shutdown`: the
//! ring has at least 5 s to hand its leases back): shutdown never hangs, and no task outlives
//! it.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::{
    sync::{oneshot, watch},
    time::Instant,
};

mod serve;
mod start;

use crate::{
    auth::Auth,
    config::{Config, StoreKind},
    connections::Connections,
    keys::KeyFile,
    tls::ServerTls,
};
use rebound_common::tasks::Tasks;
use rebound_engine::{engine::Engine, ownership::Ownership};
use rebound_store::{
    clock::SharedClock, coalesced::Coalesced, observed::Observed, MigrationStore, RetryStore,
};
use rebound_store_cassandra::{connect_with_wait, CassandraOptions, CassandraStore, Connection};
use rebound_store_embedded::EmbeddedStore;

/// Spawns `task` under `owner`, which is new and so accepts it.
fn own(owner: &Tasks, task: impl std::future::Future<Output = ()> + Send + 'static) {
    assert!(owner.spawn(task).is_ok(), "a new owner accepts tasks");
}

/// Handle to a running node.
#[derive(Debug)]
pub struct Node {
    addr: SocketAddr,
    /// The credentials, the listeners' TLS and the secrets key file, for `reload`.
    auth: Arc<Auth>,
    tls: Option<Arc<ServerTls>>,
    keys: Option<KeyFile>,
    /// The metrics and probes listener's address (None: off).
    http_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    /// How the server task ended.
    served: oneshot::Receiver<anyhow::Result<()>>,
    grace: Duration,
    tasks: NodeTasks,
    pub boot_epoch: i64,
}

/// The Cassandra connection settings of `c` (validated by `Config::validate`); reads the
/// Cassandra TLS files when they are set.
pub fn cassandra_options(c: &Config) -> anyhow::Result<CassandraOptions> {
    let tls = match &c.cassandra_tls_ca_file {
        None => None,
        Some(ca) => Some(
            crate::tls::cassandra_client_config(
                ca,
                c.cassandra_tls_cert_file.as_deref(),
                c.cassandra_tls_key_file.as_deref(),
            )
            .map_err(anyhow::Error::msg)?,
        ),
    };
    Ok(CassandraOptions {
        contact_points: c.cassandra_contact_points.clone(),
        keyspace: c.keyspace.clone(),
        replication: c.replication.clone(),
        region: c.region.clone(),
        cluster: c.cluster.clone(),
        consistency: c.consistency.clone(),
        serial_consistency: c.serial_consistency.clone(),
        request_timeout: Duration::from_millis(c.cassandra_request_timeout_ms),
        connect_timeout: Duration::from_millis(c.cassandra_connect_timeout_ms),
        tls,
        local_dc: c.cassandra_local_dc.clone(),
    })
}

/// The owners of every task a node runs: the gRPC and HTTP servers and their connections,
/// and the engine's (its loops, the lease ring, the dispatcher's workers and redeliveries,
/// the pushers, the writer's and the store's coalesced flushes).
#[derive(Debug, Clone)]
pub struct NodeTasks {
    server: Arc<Tasks>,
    connections: Arc<Connections>,
    engine: Arc<Engine>,
}

impl NodeTasks {
    /// Tasks and connections of the node not finished yet, by owner; all 0 once
    /// `Node::shutdown` has returned.
    pub fn live(&self) -> Vec<(&'static str, usize)> {
        let mut live = vec![
            ("server", self.server.live()),
            ("connections", self.connections.live()),
        ];
        live.extend(self.engine.live_tasks());
        live
    }
}

/// Applies the schema migrations to the configured store (the `migrate` command).
pub async fn run_migrations(config: &Config, clock: &SharedClock) -> anyhow::Result<Vec<i32>> {
    match config.store {
        // Connect and migrate only: no statements to prepare.
        StoreKind::Cassandra => Ok(connect_and_migrate(config, clock).await?.1),
        StoreKind::Embedded => Ok(open_store(config, clock).await?.applied),
    }
}

/// An open, migrated store, observed (`store::observed`: both stores are measured and traced
/// alike); the Cassandra store with its single state-row calls coalesced
/// (`store::coalesced`).
struct OpenStore {
    store: Arc<dyn RetryStore>,
    applied: Vec<i32>,
}

/// Opens the configured store (`REBOUND_STORE`) and brings its schema up to date.
async fn open_store(config: &Config, clock: &SharedClock) -> anyhow::Result<OpenStore> {
    match config.store {
        StoreKind::Cassandra => {
            let opts = cassandra_options(config)?;
            let (connection, applied) = connect_and_migrate(config, clock).await?;
            let cassandra = Arc::new(
                CassandraStore::new(&connection, &opts)
                    .await
                    .context("preparing statements")?,
            );
            // Single state-row calls coalesced into Cassandra-sized batches, then observed.
            let coalesced = Arc::new(Coalesced::new(
                cassandra,
                rebound_store_cassandra::COALESCING,
            ));
            Ok(OpenStore {
                store: Arc::new(Observed::new(coalesced, "cassandra")),
                applied,
            })
        }
        StoreKind::Embedded => {
            let dir = config
                .data_dir
                .as_deref()
                .context("REBOUND_DATA_DIR is required with REBOUND_STORE=embedded")?;
            // Opening may repair the file after a crash, in time with its size: off the runtime.
            let (path, region, cluster, store_clock) = (
                dir.to_path_buf(),
                config.region.clone(),
                config.cluster.clone(),
                clock.clone(),
            );
            let store = tokio::task::spawn_blocking(move || {
                EmbeddedStore::open(&path, &region, &cluster, store_clock)
            })
            .await
            .context("opening the embedded store")?
            .with_context(|| format!("opening the embedded store in {dir:?} (REBOUND_DATA_DIR)"))?;
            let applied = store
                .migrate(clock.now_ms())
                .await
                .context("preparing the embedded store")?;
            let store = Arc::new(store);
            Ok(OpenStore {
                store: Arc::new(Observed::new(store, "embedded")),
                applied,
            })
        }
    }
}

/// Connects (waiting for Cassandra up to `cassandra_startup_wait_ms`) and brings the keyspace
/// up to date; returns the connection and the migrations this call applied.
async fn connect_and_migrate(
    config: &Config,
    clock: &SharedClock,
) -> anyhow::Result<(Connection, Vec<i32>)> {
    let opts = cassandra_options(config)?;
    let connection = connect_with_wait(
        &opts,
        Duration::from_millis(config.cassandra_startup_wait_ms),
    )
    .await
    .context("connecting to Cassandra")?;
    let applied = connection
        .migrate(&opts.keyspace, &config.replication, clock.now_ms())
        .await
        .context("applying migrations")?;
    Ok((connection, applied))
}

impl Node {
    /// Starts a node. `config.listen` may use port 0; `local_addr` tells the bound address.
    /// Its dispatch ranges and compactor role come from the lease ring.
    pub async fn start(config: Config, clock: SharedClock) -> anyhow::Result<Node> {
        Node::start_with(config, clock, None).await
    }

    /// Starts a node; `ownership` replaces the lease ring when given (e.g. `WholeRing`).
    pub async fn start_with(
        config: Config,
        clock: SharedClock,
        ownership: Option<Arc<dyn Ownership>>,
    ) -> anyhow::Result<Node> {
        config.validate()?;
        let (auth, tls) = start::secrets(&config)?;
        let OpenStore { store, applied } = open_store(&config, &clock).await?;
        if !applied.is_empty() {
            tracing::info!(?applied, store = ?config.store, keyspace = %config.keyspace, "schema migrated");
        }
        start::check_shared_settings(&config, store.as_ref()).await?;
        let (clock, cluster_clock) = start::node_clock(&config, &store, clock).await;
        let boot_epoch = clock.now_ms();
        let listeners = start::Listeners::bind(&config).await?;
        rebound_common::metrics::set_max_services(config.metrics_max_services);
        start::register_metrics();
        let advertised = listeners.advertised.clone();
        let (shutdown, _) = watch::channel(false);
        let engine = Arc::new(
            Engine::build(
                store.clone(),
                store.clone(),
                ownership,
                clock.clone(),
                config.engine_settings()?.options(boot_epoch, &advertised),
                shutdown.subscribe(),
            )
            .map_err(anyhow::Error::msg)?,
        );
        // Before the first read of the settings, so that sealed targets open.
        let keys = start::secrets_keys(&config, &engine)?;
        engine.prepare().await.map_err(anyhow::Error::msg)?;
        engine.start(cluster_clock);
        let tasks = NodeTasks {
            server: Arc::new(Tasks::new("server")),
            connections: Arc::default(),
            engine: engine.clone(),
        };
        let parts = start::Parts {
            config: &config,
            engine: &engine,
            tls: &tls,
        };
        let handle = parts.handle();
        let start::Listeners {
            grpc: listener,
            addr,
            http: http_listener,
            http_addr,
            ..
        } = listeners;
        if !auth.is_on() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "no credentials file (REBOUND_CREDENTIALS_FILE): anyone who can reach this address can call every method, AdminService included");
        }
        if let Some(l) = http_listener {
            let router = parts.http_router(&auth, &handle).await?;
            serve::serve_http(l, router, &tls, &tasks.server, &shutdown)?;
        }
        let grpc = parts.grpc_services(&auth, handle.clone());
        let served =
            serve::serve_grpc(&config, grpc, listener, &tls, handle, &tasks, &shutdown).await?;
        let grace = Duration::from_millis(config.shutdown_grace_ms);
        tracing::info!(%addr, http = ?http_addr, node_id = %config.node_id, boot_epoch, store = ?config.store, keyspace = %config.keyspace, "rebound node serving");
        Ok(Node {
            auth,
            tls,
            keys,
            http_addr,
            addr,
            shutdown,
            served,
            grace,
            tasks,
            boot_epoch,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Reads the TLS files, the credentials file and the secrets key file again (SIGHUP):
    /// new connections get the new certificate and client CAs, every call from now on the new
    /// credentials, every push target write from now on the new first key (and stored
    /// targets open with the new keys at the next settings refresh); open connections, and
    /// their Subscribe streams, go on. Each part whose files fail to load stays as it was,
    /// and the error says which.
    pub fn reload(&self) -> anyhow::Result<()> {
        let tls = match &self.tls {
            Some(t) => t.reload(),
            None => Ok(()),
        };
        let auth = self
            .auth
            .reload()
            .map_err(|e| format!("REBOUND_CREDENTIALS_FILE: {e}"));
        let keys = match &self.keys {
            Some(k) => k
                .reload()
                .map_err(|e| format!("REBOUND_SECRETS_KEY_FILE: {e}")),
            None => Ok(()),
        };
        let failed: Vec<String> = [tls, auth, keys]
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(anyhow::anyhow!(failed.join("; ")))
        }
    }

    /// Where `/metrics`, `/healthz` and `/readyz` are served (None: the listener is off).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The owners of this node's tasks, to count them.
    pub fn tasks(&self) -> NodeTasks {
        self.tasks.clone()
    }

    /// The engine this node serves (its counters, and its components for tests).
    pub fn engine(&self) -> &Engine {
        &self.tasks.engine
    }

    /// Stops the node: signals every component to stop and closes the Subscribe streams, lets
    /// running calls and tasks finish within the grace period (`REBOUND_SHUTDOWN_GRACE_MS`),
    /// then aborts what is left. No task of the node outlives this call.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.grace;
        let _ = self.shutdown.send(true);
        let io = self.tasks.engine.io_counts();
        tracing::info!(
            state_reads = io.state_reads.flushes,
            state_rows_read = io.state_reads.items,
            state_writes = io.state_writes.flushes,
            state_rows_written = io.state_writes.items,
            pointer_writes = io.pointer_writes,
            pointers = io.pointers,
            "coalesced store requests since start (state rows: Cassandra only)"
        );
        self.tasks.engine.wake();
        // The server task ends by the deadline (it cuts the connections still open then).
        let served = self.served.await.context("server task");
        let tasks = &self.tasks;
        tasks.server.shutdown(deadline).await;
        tasks.connections.shutdown(deadline).await;
        tasks.engine.shutdown(deadline).await;
        served?
    }

    /// Waits until the server stops on its own (it only does so on an error).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.served).await.context("server task")?
    }
}
