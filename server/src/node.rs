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
use rebound_proto::v1 as pb;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{oneshot, watch},
    time::Instant,
};
use tokio_stream::StreamExt;

use crate::{
    admin::Admin,
    api::{AdminApi, Api, ExecutorApi},
    auth::{AdminGate, Auth},
    clock::{ClusterClock, SharedClock},
    clock_sync::{measure_offset, run_clock_sync, sync_clock},
    compactor::Compactor,
    config::{Config, StoreKind},
    connections::Connections,
    dispatch::{
        hub::{Hub, HubLimits},
        DispatchOptions, Dispatcher,
    },
    holds::Holds,
    ownership::Ownership,
    push::{client::Client, guard::Allow, PushOptions, Pusher},
    ring::{LeaseRing, RingOptions},
    services::Services,
    store::{
        cassandra::{connect_with_wait, CassandraOptions, CassandraStore, Connection},
        embedded::EmbeddedStore,
        MigrationStore, RetryStore,
    },
    tasks::Tasks,
    tls::{MaybeTls, ServerTls, TlsListener},
    writer::{Writer, WriterOptions},
};

/// How often the embedded store deletes its expired rows (reads skip them regardless).
const EMBEDDED_SWEEP_EVERY: Duration = Duration::from_secs(10);

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
    /// The store.
    pub store: Arc<dyn RetryStore>,
    /// The Cassandra store, typed, for its request counters (None on the embedded store).
    pub cassandra: Option<Arc<CassandraStore>>,
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
    /// The Cassandra store's coalescers (none on the embedded store).
    store: Option<Arc<CassandraStore>>,
}

impl NodeTasks {
    /// Tasks and connections of the node not finished yet, by owner; all 0 once
    /// `Node::shutdown` has returned.
    pub fn live(&self) -> Vec<(&'static str, usize)> {
        let (reads, writes) = match &self.store {
            Some(c) => {
                let [r, w] = c.flush_tasks();
                (r.live(), w.live())
            }
            None => (0, 0),
        };
        vec![
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
            ("state reads", reads),
            ("state writes", writes),
        ]
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

/// An open, migrated store.
struct OpenStore {
    store: Arc<dyn RetryStore>,
    cassandra: Option<Arc<CassandraStore>>,
    embedded: Option<Arc<EmbeddedStore>>,
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
                store: cassandra.clone(),
                cassandra: Some(cassandra),
                embedded: None,
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
                store: store.clone(),
                cassandra: None,
                embedded: Some(store),
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
        let OpenStore {
            store,
            cassandra,
            embedded,
            applied,
        } = open_store(&config, &clock).await?;
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
        let services = Arc::new(Services::new(
            store.clone(),
            store.clone(),
            clock.clone(),
            config.default_policy.clone(),
        ));
        services
            .refresh()
            .await
            .context("reading service settings")?;
        let holds = Arc::new(Holds::new(store.clone(), clock.clone(), &config.node_id));
        holds.refresh().await.context("reading dependency holds")?;
        let writer = Writer::new(
            store.clone(),
            clock.clone(),
            WriterOptions::from_config(&config, boot_epoch),
            services.clone(),
        );
        let (shutdown, mut stop_rx) = watch::channel(false);
        let hub = Arc::new(Hub::new(
            clock.clone(),
            boot_epoch,
            HubLimits {
                max_subscribers: config.max_subscribers,
                max_in_flight_bytes: config.max_in_flight_bytes,
            },
        ));
        let dispatcher = Arc::new(Dispatcher::new(
            hub.clone(),
            store.clone(),
            writer.clone(),
            services.clone(),
            holds.clone(),
            ownership.clone(),
            clock.clone(),
            DispatchOptions {
                skew_margin_ms: config.skew_margin_ms as i64,
                fence_margin_ms: (config.lease_ttl_ms / 5) as i64,
                scan_interval: Duration::from_millis(config.scan_interval_ms),
                workers_per_service: 4,
                // State reads in flight per bucket being fed; they coalesce into `IN` reads. 64
                // drained 4,600-4,900/s against 3,700-3,800/s with 16 in 20k `bench rebound`
                // runs; the 1M drain stayed at about 3,200-3,300/s.
                read_ahead: 64,
                dead_letter_ttl_seconds: config.dead_letter_retention_seconds,
                orphan_grace_ms: crate::writer::orphan_grace_ms(&config),
            },
            shutdown.subscribe(),
        ));
        let compactor = Arc::new(Compactor::new(
            store.clone(),
            ownership.clone(),
            clock.clone(),
            writer.grid(),
            // Gate 2 with twice the skew margin: a late writer has a full extra margin.
            2 * config.skew_margin_ms as i64,
            (config.lease_ttl_ms / 5) as i64,
        ));
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
            store: cassandra.clone(),
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
                2 * config.skew_margin_ms as i64,
                Duration::from_millis(config.stats_interval_ms),
                shutdown.subscribe(),
            ),
        );
        if let Some(embedded) = embedded {
            own(
                &tasks.background,
                embedded.run_sweeper(EMBEDDED_SWEEP_EVERY, shutdown.subscribe()),
            );
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
        let max_message = config.max_message_bytes();
        let api = Api {
            auth: auth.clone(),
            writer: writer.clone(),
            max_payload_bytes: config.max_payload_bytes,
            max_batch_items: config.max_batch_items,
        };
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<pb::retry_service_server::RetryServiceServer<Api>>()
            .await;
        health
            .set_serving::<pb::executor_service_server::ExecutorServiceServer<ExecutorApi>>()
            .await;
        health
            .set_serving::<pb::admin_service_server::AdminServiceServer<AdminApi>>()
            .await;
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(rebound_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(rebound_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;

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
            orphan_grace_ms: crate::writer::orphan_grace_ms(&config),
            dead_letter_retention_seconds: config.dead_letter_retention_seconds,
            peer_tls: tls.clone(),
        });
        let max_payload_bytes = config.max_payload_bytes;
        let request_budget = crate::budget::RequestBudget::new(config.max_inflight_bytes);
        // What bounds the connections (`connections`): how many, how fast a request's
        // headers must come, keep-alive, streams per connection, header size.
        let limits = crate::connections::Limits::of(&config);
        let router = tonic::transport::Server::builder()
            .max_concurrent_streams(limits.max_concurrent_streams)
            .http2_keepalive_interval(Some(limits.keepalive_interval))
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .http2_max_header_list_size(crate::connections::MAX_HEADER_LIST_BYTES)
            .layer(crate::telemetry::rpc::RpcLayer)
            .layer(crate::budget::BudgetLayer::new(request_budget))
            .layer(tower::util::MapResponseLayer::new(
                move |r: http::Response<tonic::body::Body>| {
                    crate::error::oversized_request(r, max_payload_bytes)
                },
            ))
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(
                pb::retry_service_server::RetryServiceServer::new(api)
                    .max_decoding_message_size(max_message),
            )
            .add_service(pb::executor_service_server::ExecutorServiceServer::new(
                ExecutorApi {
                    auth: auth.clone(),
                    ring: ring.clone(),
                    node_id: config.node_id.clone(),
                    address: advertised.clone(),
                    dispatcher: dispatcher.clone(),
                    max_delay: Duration::from_secs(config.max_delay_seconds),
                },
            ))
            .add_service(
                pb::admin_service_server::AdminServiceServer::with_interceptor(
                    AdminApi {
                        admin: admin.clone(),
                    },
                    AdminGate(auth.clone()),
                ),
            );

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
            let mut http_stop = shutdown.subscribe();
            let stopped = async move {
                let _ = http_stop.wait_for(|s| *s).await;
            };
            let dashboard = Arc::new(crate::dashboard::Dashboard {
                admin: admin.clone(),
                auth: auth.clone(),
                window_seconds: config.window_seconds,
                trace_url_template: config.trace_url_template.clone(),
            });
            let router = crate::http::router(probe, Some(dashboard));
            match &tls {
                None => own(&tasks.server, async move {
                    let served = axum::serve(
                        l,
                        router.into_make_service_with_connect_info::<crate::tls::ConnInfo>(),
                    )
                    .with_graceful_shutdown(stopped)
                    .await;
                    if let Err(e) = served {
                        tracing::warn!(error = %e, "the metrics and probes listener failed");
                    }
                }),
                Some(tls) => {
                    let (tx, rx) = tokio::sync::mpsc::channel(16);
                    let local = l.local_addr()?;
                    let tls = tls.clone();
                    own(
                        &tasks.server,
                        crate::tls::accept(
                            tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true)),
                            crate::tls::HANDSHAKE_TIMEOUT,
                            Some,
                            move || tls.http_acceptor(),
                            tx,
                            shutdown.subscribe(),
                        ),
                    );
                    own(&tasks.server, async move {
                        let served = axum::serve(
                            TlsListener { rx, local },
                            router.into_make_service_with_connect_info::<crate::tls::ConnInfo>(),
                        )
                        .with_graceful_shutdown(stopped)
                        .await;
                        if let Err(e) = served {
                            tracing::warn!(error = %e, "the metrics and probes listener failed");
                        }
                    });
                }
            }
        }
        let mut serve_stop = shutdown.subscribe();
        let serve_hub = hub.clone();
        let grace = Duration::from_millis(config.shutdown_grace_ms);
        // TCP_NODELAY (`bench rebound`: single enqueue p99 48 ms without, 11 ms with) and
        // TCP keep-alive on every accepted connection; the gate closes those past
        // REBOUND_MAX_CONNECTIONS, and `HeaderWatch` those whose requests' headers are late.
        let tcp = crate::connections::tcp_incoming(listener, &limits);
        let gate = Arc::new(crate::connections::Gate::new(
            tasks.connections.clone(),
            limits.max_connections,
        ));
        let header_timeout = limits.request_header_timeout;
        type Incoming = std::pin::Pin<
            Box<
                dyn futures::Stream<
                        Item = std::io::Result<
                            crate::connections::HeaderWatch<
                                MaybeTls<crate::connections::Connection<TcpStream>>,
                            >,
                        >,
                    > + Send,
            >,
        >;
        let incoming: Incoming = match &tls {
            None => Box::pin(crate::connections::plain(tcp, gate, header_timeout)),
            Some(tls) => {
                // Handshakes run beside the server (`tls::accept`), within the header timeout;
                // it sees finished ones, whose first request is then due that long after
                // their accept.
                let (tx, rx) = tokio::sync::mpsc::channel(16);
                let tls = tls.clone();
                own(
                    &tasks.server,
                    crate::tls::accept(
                        tcp,
                        header_timeout,
                        move |c| gate.admit(c),
                        move || tls.grpc_acceptor(),
                        tx,
                        shutdown.subscribe(),
                    ),
                );
                Box::pin(
                    tokio_stream::wrappers::ReceiverStream::new(rx).map(move |(s, _)| {
                        let opened = s.get_ref().0.opened();
                        Ok(crate::connections::HeaderWatch::new(
                            MaybeTls::Tls(Box::new(s)),
                            opened,
                            header_timeout,
                        ))
                    }),
                )
            }
        };
        let connections = tasks.connections.clone();
        let (served_tx, served) = oneshot::channel();
        own(&tasks.server, async move {
            let serve = router.serve_with_incoming_shutdown(incoming, async move {
                let _ = serve_stop.wait_for(|s| *s).await.map(|_| ());
                // End every subscription so graceful shutdown is not held by them.
                serve_hub.close_all();
                health
                    .set_not_serving::<pb::retry_service_server::RetryServiceServer<Api>>()
                    .await;
            });
            tokio::pin!(serve);
            let result = tokio::select! {
                r = &mut serve => r.map_err(anyhow::Error::from),
                _ = async { stop_rx.wait_for(|s| *s).await.map(|_| ()) } => {
                    match tokio::time::timeout(grace, &mut serve).await {
                        Ok(r) => r.map_err(anyhow::Error::from),
                        Err(_) => {
                            tracing::warn!(grace_ms = grace.as_millis() as u64, "connections still open after the grace period, closing them");
                            connections.shutdown(Instant::now()).await;
                            // Served once the cut connections are gone.
                            let _ = tokio::time::timeout(Duration::from_secs(1), &mut serve).await;
                            Ok(())
                        }
                    }
                }
            };
            let _ = served_tx.send(result);
        });
        tracing::info!(%addr, http = ?http_addr, node_id = %config.node_id, boot_epoch, store = ?config.store, keyspace = %config.keyspace, "rebound node serving");
        Ok(Node {
            auth,
            tls,
            http_addr,
            store: store.clone(),
            cassandra,
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
        let (reads, writes) = self
            .cassandra
            .as_ref()
            .map(|c| c.state_io_counts())
            .unwrap_or_default();
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
        if let Some(store) = &tasks.store {
            for flushes in store.flush_tasks() {
                flushes.shutdown(deadline).await;
            }
        }
        served?
    }

    /// Waits until the server stops on its own (it only does so on an error).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.served).await.context("server task")?
    }
}
