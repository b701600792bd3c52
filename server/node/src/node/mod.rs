//! A running Rebound node: opens its store (`REBOUND_STORE`: Cassandra, or the embedded store
//! for one node) and migrates it, sets its clock to the database's (clock sync, Cassandra),
//! builds the components, takes one lease-ring round (unless an `Ownership` is
//! given), then serves gRPC (the API, health and reflection on one port).
//!
//! Every task it runs has an owner (`NodeTasks`, see `tasks`). `Node::shutdown` signals them
//! all and closes the Subscribe streams, lets running calls and tasks finish until the
//! shutdown grace (`REBOUND_SHUTDOWN_GRACE_MS`) ends, then cuts the connections still open and
//! aborts the tasks still running (the ring has at least 5 s to hand its leases back):
//! shutdown never hangs, and no task outlives it.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::{
    net::TcpListener,
    sync::{oneshot, watch},
    time::Instant,
};

mod serve;

use crate::{
    admin::Admin,
    api::{AdminApi, Api, ExecutorApi},
    auth::{AdminGate, Auth},
    clock::{ClusterClock, SharedClock},
    clock_sync::{measure_offset, run_clock_sync, sync_clock},
    compactor::Compactor,
    config::{Config, StoreKind},
    connections::Connections,
    dispatch::Dispatcher,
    engine::Engine,
    ownership::Ownership,
    push::{client::Client, guard::Allow, PushOptions, Pusher},
    ring::{LeaseRing, RingOptions},
    store::{
        cassandra::{connect_with_wait, CassandraOptions, CassandraStore, Connection},
        embedded::EmbeddedStore,
        observed::Observed,
        MigrationStore, RetryStore,
    },
    tasks::Tasks,
    tls::ServerTls,
    writer::Writer,
};

/// Spawns `task` under `owner`, which is new and so accepts it.
fn own(owner: &Tasks, task: impl std::future::Future<Output = ()> + Send + 'static) {
    assert!(owner.spawn(task).is_ok(), "a new owner accepts tasks");
}

/// Handle to a running node.
#[derive(Debug)]
pub struct Node {
    addr: SocketAddr,
    /// The credentials and the listeners' TLS, for `reload`.
    auth: Arc<Auth>,
    tls: Option<Arc<ServerTls>>,
    /// The metrics and probes listener's address (None: off).
    http_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    /// How the server task ended.
    served: oneshot::Receiver<anyhow::Result<()>>,
    grace: Duration,
    tasks: NodeTasks,
    pub writer: Arc<Writer>,
    pub dispatcher: Arc<Dispatcher>,
    pub compactor: Arc<Compactor>,
    pub boot_epoch: i64,
    pub ring: Option<Arc<LeaseRing>>,
    /// The store (its counters and tasks through `StoreLifecycle`).
    pub store: Arc<dyn RetryStore>,
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

/// The owners of every task a node runs: the gRPC server, the background loops, the lease
/// ring, the dispatcher's workers and redeliveries, and the writer's and the store's coalesced
/// flushes.
#[derive(Debug, Clone)]
pub struct NodeTasks {
    server: Arc<Tasks>,
    background: Arc<Tasks>,
    ring: Arc<Tasks>,
    connections: Arc<Connections>,
    dispatcher: Arc<Dispatcher>,
    /// The pushers' workers and requests.
    push: Arc<Pusher>,
    /// The writer's coalescers (group commit, pointers).
    writer: Arc<Writer>,
    /// The store's own tasks (the Cassandra store's coalesced flushes).
    store: Arc<dyn RetryStore>,
}

impl NodeTasks {
    /// Tasks and connections of the node not finished yet, by owner; all 0 once
    /// `Node::shutdown` has returned.
    pub fn live(&self) -> Vec<(&'static str, usize)> {
        let mut live = vec![
            ("server", self.server.live()),
            ("connections", self.connections.live()),
            ("background", self.background.live()),
            ("ring", self.ring.live()),
            ("dispatcher", self.dispatcher.tasks().live()),
            ("push", self.push.tasks().live()),
            (
                "writer",
                self.writer.flush_tasks().iter().map(|t| t.live()).sum(),
            ),
        ];
        live.extend(
            self.store
                .task_owners()
                .into_iter()
                .map(|(owner, tasks)| (owner, tasks.live())),
        );
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
/// alike).
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
            Ok(OpenStore {
                store: Arc::new(Observed::new(cassandra, "cassandra")),
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
        let auth = Arc::new(match &config.credentials_file {
            Some(path) => {
                Auth::load(path).map_err(|e| anyhow::anyhow!("REBOUND_CREDENTIALS_FILE: {e}"))?
            }
            None => Auth::off(),
        });
        // Read before anything starts, so that a bad file stops the node at once.
        let tls = match config.tls_files() {
            Some(files) => Some(Arc::new(
                ServerTls::load(files).map_err(anyhow::Error::msg)?,
            )),
            None => None,
        };
        let OpenStore { store, applied } = open_store(&config, &clock).await?;
        if !applied.is_empty() {
            tracing::info!(?applied, store = ?config.store, keyspace = %config.keyspace, "schema migrated");
        }
        // Every use of the clock below (windows, leases, backoff, the boot epoch) runs on
        // Cassandra's time when clock sync is on.
        let (clock, cluster_clock) = if config.clock_sync {
            let cc = Arc::new(ClusterClock::new(clock));
            if let Err(e) = sync_clock(store.as_ref(), &cc, config.skew_margin_ms as i64).await {
                tracing::warn!(error = %e, "could not read Cassandra's clock; running on this node's own clock until it can");
            }
            (cc.clone() as SharedClock, Some(cc))
        } else {
            (clock, None)
        };
        let boot_epoch = clock.now_ms();
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {} (REBOUND_LISTEN)", config.listen))?;
        let addr = listener.local_addr()?;
        crate::metrics::global().set_max_services(config.metrics_max_services);
        let http_listener = match config.http_listen {
            None => None,
            Some(a) => match TcpListener::bind(a).await {
                Ok(l) => Some(l),
                // The default address, taken (another node on this machine): go on without.
                Err(e) if !config.http_listen_set && e.kind() == std::io::ErrorKind::AddrInUse => {
                    tracing::warn!(address = %a, "the metrics and probes listener's default address is in use (another node on this machine?); serving without it: set REBOUND_HTTP_LISTEN to give this node its own");
                    None
                }
                Err(e) => {
                    return Err(
                        anyhow::Error::new(e).context(format!("binding {a} (REBOUND_HTTP_LISTEN)"))
                    )
                }
            },
        };
        let http_addr = match &http_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        // What GetRing tells executors: the configured address, else the bound one, with the
        // host name in place of an unspecified IP (0.0.0.0 is no use to a client).
        let advertised = match &config.advertise {
            Some(a) => a.clone(),
            None if addr.ip().is_unspecified() => format!("{}:{}", config.node_id, addr.port()),
            None => addr.to_string(),
        };
        let (ring, ownership): (Option<Arc<LeaseRing>>, Arc<dyn Ownership>) = match ownership {
            Some(o) => (None, o),
            None => {
                let ring = Arc::new(LeaseRing::new(
                    store.clone(),
                    clock.clone(),
                    RingOptions {
                        node_id: config.node_id.clone(),
                        address: advertised.clone(),
                        boot_epoch,
                        slots: config.slots,
                        lease_ttl_ms: config.lease_ttl_ms as i64,
                        clock_deadband_ms: (config.skew_margin_ms / 2) as i64,
                    },
                ));
                crate::metrics::global()
                    .ring_size
                    .set(i64::from(config.slots));
                (Some(ring.clone()), ring)
            }
        };
        let (shutdown, _) = watch::channel(false);
        let Engine {
            services,
            holds,
            writer,
            hub,
            dispatcher,
            compactor,
        } = Engine::build(
            store.clone(),
            store.clone(),
            ownership.clone(),
            clock.clone(),
            config.engine_options(boot_epoch),
            shutdown.subscribe(),
        );
        services
            .refresh()
            .await
            .context("reading service settings")?;
        holds.refresh().await.context("reading dependency holds")?;
        // One ring round before any call is served: this node's heartbeat (and so its clock,
        // see `peers`) is known to the others before it writes anything they might read.
        if let Some(r) = &ring {
            // A clock off by more than half the margin with clock sync off: announce this
            // node, then wait until every other node has read its heartbeat (one lease
            // lifetime) before taking a lease or writing anything, so that they judge its
            // leases and windows in its clock from the first one on.
            if !config.clock_sync {
                if let Some(offset) = measure_offset(store.as_ref(), clock.as_ref()).await {
                    if offset.abs() * 2 > config.skew_margin_ms as i64 {
                        tracing::warn!(
                            offset_ms = offset,
                            "this node's clock differs from Cassandra's by more than half the skew margin and clock sync is off (REBOUND_CLOCK_SYNC): the other nodes will judge its windows and leases in its own clock; waiting one lease lifetime before serving so they know it"
                        );
                        if let Err(e) = r.announce().await {
                            tracing::warn!(error = %e, "cannot announce this node, will retry");
                        }
                        tokio::time::sleep(Duration::from_millis(config.lease_ttl_ms)).await;
                    }
                }
            }
            if let Err(e) = r.cycle().await {
                tracing::warn!(error = %e, "first lease ring round failed, will retry");
            }
        }
        let push_client =
            Client::new(Allow::parse(&config.push_allow).map_err(|e| anyhow::anyhow!(e))?)
                .map_err(|e| anyhow::anyhow!("push client: {e}"))?;
        let pusher = Arc::new(Pusher::new(
            dispatcher.clone(),
            services.clone(),
            clock.clone(),
            PushOptions {
                client: push_client,
            },
        ));
        let tasks = NodeTasks {
            server: Arc::new(Tasks::new("server")),
            background: Arc::new(Tasks::new("node")),
            ring: Arc::new(Tasks::new("ring")),
            connections: Arc::default(),
            dispatcher: dispatcher.clone(),
            push: pusher.clone(),
            writer: writer.clone(),
            store: store.clone(),
        };
        if let Some(r) = &ring {
            own(&tasks.ring, r.clone().run(shutdown.subscribe()));
        }
        own(
            &tasks.background,
            services.clone().run(
                Duration::from_millis(config.settings_refresh_ms),
                shutdown.subscribe(),
            ),
        );
        own(
            &tasks.background,
            holds
                .clone()
                .run(crate::holds::REFRESH_EVERY, shutdown.subscribe()),
        );
        own(&tasks.background, dispatcher.clone().run_scanner());
        own(&tasks.background, pusher.run(shutdown.subscribe()));
        own(
            &tasks.background,
            dispatcher.clone().run_reaper(Duration::from_millis(100)),
        );
        own(
            &tasks.background,
            compactor.clone().run(
                Duration::from_millis(config.compaction_interval_ms),
                shutdown.subscribe(),
            ),
        );
        own(
            &tasks.background,
            crate::backlog::run(
                store.clone(),
                ownership.clone(),
                clock.clone(),
                writer.grid(),
                // A window's count is cached once it is closed by the compactor's gate margin.
                config.compactor_options().gate_margin_ms,
                Duration::from_millis(config.stats_interval_ms),
                shutdown.subscribe(),
            ),
        );
        if let Some(background) = store.clone().background(shutdown.subscribe()) {
            own(&tasks.background, background);
        }
        if let Some(cc) = cluster_clock {
            own(
                &tasks.background,
                run_clock_sync(
                    store.clone(),
                    cc,
                    Duration::from_millis(config.clock_sync_interval_ms),
                    config.skew_margin_ms as i64,
                    shutdown.subscribe(),
                ),
            );
        }

        if !auth.is_on() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "no credentials file (REBOUND_CREDENTIALS_FILE): anyone who can reach this address can call every method, AdminService included");
        }
        let admin = Arc::new(Admin {
            store: store.clone(),
            services: services.clone(),
            holds: holds.clone(),
            writer: writer.clone(),
            hub: hub.clone(),
            ownership: ownership.clone(),
            ring: ring.clone(),
            clock: clock.clone(),
            node_id: config.node_id.clone(),
            address: advertised.clone(),
            slots: config.slots,
            skew_margin_ms: config.skew_margin_ms as i64,
            orphan_grace_ms: config.orphan_grace_ms(),
            dead_letter_retention_seconds: config.dead_letter_retention_seconds,
            peer_tls: tls.clone(),
        });
        if let Some(l) = http_listener {
            // Every migration this store has once started is applied: /readyz checks that
            // they still read as applied (a keyspace dropped under the node does not).
            let migrations = store
                .applied_migrations()
                .await
                .context("reading the applied migrations")?
                .len();
            let probe = Arc::new(crate::http::Probe::new(
                store.clone(),
                ring.clone(),
                ownership.clone(),
                hub.clone(),
                clock.clone(),
                migrations,
            ));
            let dashboard = Arc::new(crate::dashboard::Dashboard {
                admin: admin.clone(),
                auth: auth.clone(),
                window_seconds: config.window_seconds,
                trace_url_template: config.trace_url_template.clone(),
            });
            let router = crate::http::router(probe, Some(dashboard));
            serve::serve_http(l, router, &tls, &tasks.server, &shutdown)?;
        }
        let grpc = serve::GrpcServices {
            api: Api {
                auth: auth.clone(),
                writer: writer.clone(),
                max_payload_bytes: config.max_payload_bytes,
                max_batch_items: config.max_batch_items,
            },
            executor: ExecutorApi {
                auth: auth.clone(),
                ring: ring.clone(),
                node_id: config.node_id.clone(),
                address: advertised.clone(),
                dispatcher: dispatcher.clone(),
                max_delay: Duration::from_secs(config.max_delay_seconds),
            },
            admin: AdminApi {
                admin: admin.clone(),
            },
            admin_gate: AdminGate(auth.clone()),
        };
        let served = serve::serve_grpc(
            &config,
            grpc,
            listener,
            &tls,
            hub.clone(),
            &tasks,
            &shutdown,
        )
        .await?;
        let grace = Duration::from_millis(config.shutdown_grace_ms);
        tracing::info!(%addr, http = ?http_addr, node_id = %config.node_id, boot_epoch, store = ?config.store, keyspace = %config.keyspace, "rebound node serving");
        Ok(Node {
            auth,
            tls,
            http_addr,
            store: store.clone(),
            addr,
            shutdown,
            served,
            grace,
            tasks,
            writer,
            dispatcher,
            compactor,
            boot_epoch,
            ring,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Reads the TLS files and the credentials file again (SIGHUP): new connections get the
    /// new certificate and client CAs, and every call from now on the new credentials; open
    /// connections, and their Subscribe streams, go on. Each part whose files fail to load
    /// stays as it was, and the error says which.
    pub fn reload(&self) -> anyhow::Result<()> {
        let tls = match &self.tls {
            Some(t) => t.reload(),
            None => Ok(()),
        };
        let auth = self
            .auth
            .reload()
            .map_err(|e| format!("REBOUND_CREDENTIALS_FILE: {e}"));
        match (tls, auth) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(anyhow::anyhow!(e)),
            (Err(a), Err(b)) => Err(anyhow::anyhow!("{a}; {b}")),
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

    /// Stops the node: signals every component to stop and closes the Subscribe streams, lets
    /// running calls and tasks finish within the grace period (`REBOUND_SHUTDOWN_GRACE_MS`),
    /// then aborts what is left. No task of the node outlives this call.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.grace;
        let _ = self.shutdown.send(true);
        let (reads, writes) = self.store.state_io_counts();
        let (pointer_writes, pointers) = self.writer.pointer_writes();
        tracing::info!(
            state_reads = reads.flushes,
            state_rows_read = reads.items,
            state_writes = writes.flushes,
            state_rows_written = writes.items,
            pointer_writes,
            pointers,
            "coalesced store requests since start (state rows: Cassandra only)"
        );
        self.dispatcher.wake();
        // The server task ends by the deadline (it cuts the connections still open then).
        let served = self.served.await.context("server task");
        let tasks = &self.tasks;
        tasks.server.shutdown(deadline).await;
        tasks.connections.shutdown(deadline).await;
        // The loops return on the stop signal; the workers and redeliveries once their lease
        // checks fail and their streams are closed (work dropped unresolved is replayed).
        tasks.background.shutdown(deadline).await;
        tasks.push.tasks().shutdown(deadline).await;
        tasks.dispatcher.tasks().shutdown(deadline).await;
        for flushes in tasks.writer.flush_tasks() {
            flushes.shutdown(deadline).await;
        }
        // The ring hands its leases back so that other nodes take over at once; it may take
        // longer than the grace period for that.
        tasks
            .ring
            .shutdown(deadline.max(Instant::now() + Duration::from_secs(5)))
            .await;
        // Last, as the tasks above write through them.
        for (_, flushes) in tasks.store.task_owners() {
            flushes.shutdown(deadline).await;
        }
        served?
    }

    /// Waits until the server stops on its own (it only does so on an error).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.served).await.context("server task")?
    }
}
