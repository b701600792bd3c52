//! A running Rebound node: connects to Cassandra, migrates, builds the components and serves
//! gRPC (the API, health and reflection on one port). It owns every task it spawns and stops
//! them on shutdown; open streams are cut after a grace period so shutdown never hangs.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use rebound_proto::v1 as pb;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tokio_stream::{wrappers::TcpListenerStream, StreamExt};

use crate::{
    admin::Admin,
    api::{AdminApi, Api, ExecutorApi},
    auth::{AdminGate, Auth},
    clock::{offset_sample, Clock, ClusterClock, SharedClock},
    compactor::Compactor,
    config::Config,
    dispatch::{
        hub::{Hub, HubLimits},
        DispatchOptions, Dispatcher,
    },
    ownership::Ownership,
    ring::{LeaseRing, RingOptions},
    services::Services,
    store::{
        cassandra::{connect_with_wait, CassandraOptions, CassandraStore},
        migrate::migrate,
        LeaseStore, RetryStore,
    },
    writer::{Writer, WriterOptions},
};

/// Room on top of the payload cap for the rest of a message (ids, attributes, batch framing).
const MESSAGE_OVERHEAD: usize = 1 << 20;

/// An offset change smaller than this is measurement noise and is not applied, so the
/// node's clock does not wobble back and forth by a millisecond or two at every sync.
const CLOCK_SYNC_DEADBAND_MS: i64 = 50;

/// Measures this node's clock against Cassandra's (`currentTimestamp()` of a coordinator):
/// five samples, the one with the shortest round trip wins, and its offset is applied.
pub async fn sync_clock(
    store: &dyn LeaseStore,
    clock: &ClusterClock,
    skew_margin_ms: i64,
) -> Result<i64, crate::store::StoreError> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..5 {
        let sent = clock.base_now_ms();
        let server = store.server_time_ms().await?;
        let (offset, rtt) = offset_sample(sent, server, clock.base_now_ms());
        if best.is_none_or(|(_, r)| rtt < r) {
            best = Some((offset, rtt));
        }
    }
    let (offset, rtt) = best.expect("five samples");
    let before = clock.offset_ms().unwrap_or(0);
    if (offset - before).abs() >= CLOCK_SYNC_DEADBAND_MS {
        clock.set_offset_ms(offset);
        if offset.abs() * 2 > skew_margin_ms {
            tracing::warn!(
                offset_ms = offset,
                rtt_ms = rtt,
                skew_margin_ms,
                "this node's clock differs from Cassandra's by more than half the skew margin \
                 (REBOUND_SKEW_MARGIN_MS); the node runs on Cassandra's time, but check NTP"
            );
        } else {
            tracing::info!(
                offset_ms = offset,
                rtt_ms = rtt,
                "clock offset from Cassandra applied"
            );
        }
    }
    Ok(clock.offset_ms().unwrap_or(0))
}

/// This node's offset from Cassandra's clock (best of three by round trip), without applying
/// it; None when the database cannot tell its time.
async fn measure_offset(store: &dyn LeaseStore, clock: &dyn Clock) -> Option<i64> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..3 {
        let sent = clock.now_ms();
        let server = store.server_time_ms().await.ok()?;
        let (offset, rtt) = offset_sample(sent, server, clock.now_ms());
        if best.is_none_or(|(_, r)| rtt < r) {
            best = Some((offset, rtt));
        }
    }
    best.map(|(o, _)| o)
}

async fn run_clock_sync(
    store: Arc<dyn LeaseStore>,
    clock: Arc<ClusterClock>,
    every: Duration,
    skew_margin_ms: i64,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match sync_clock(store.as_ref(), &clock, skew_margin_ms).await {
            Ok(_) => {}
            // The database cannot report its clock at all: nothing to retry.
            Err(crate::store::StoreError::Internal(_)) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read Cassandra's clock; keeping the last offset")
            }
        }
    }
}

/// Handle to a running node.
#[derive(Debug)]
pub struct Node {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
    pub writer: Arc<Writer>,
    pub dispatcher: Arc<Dispatcher>,
    pub compactor: Arc<Compactor>,
    pub boot_epoch: i64,
    background: Vec<JoinHandle<()>>,
    ring_task: Option<JoinHandle<()>>,
    pub ring: Option<Arc<LeaseRing>>,
    /// The store, typed, for its request counters.
    pub cassandra: Arc<CassandraStore>,
}

/// Applies the schema migrations to the configured keyspace (the `migrate` command).
pub async fn run_migrations(config: &Config, clock: &SharedClock) -> anyhow::Result<Vec<i32>> {
    Ok(connect_and_migrate(config, clock).await?.1)
}

/// Connects (waiting for Cassandra up to `cassandra_startup_wait_ms`) and brings the keyspace
/// up to date; returns the session and the migrations this call applied.
async fn connect_and_migrate(
    config: &Config,
    clock: &SharedClock,
) -> anyhow::Result<(scylla::client::session::Session, Vec<i32>)> {
    let opts = CassandraOptions::from_config(config);
    let session = connect_with_wait(
        &opts,
        Duration::from_millis(config.cassandra_startup_wait_ms),
    )
    .await
    .context("connecting to Cassandra")?;
    let applied = migrate(
        &session,
        &opts.keyspace,
        &config.replication,
        clock.now_ms(),
    )
    .await
    .context("applying migrations")?;
    Ok((session, applied))
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
        let opts = CassandraOptions::from_config(&config);
        let (session, applied) = connect_and_migrate(&config, &clock).await?;
        let session = Arc::new(session);
        if !applied.is_empty() {
            tracing::info!(?applied, keyspace = %opts.keyspace, "schema migrated");
        }
        let cassandra = Arc::new(
            CassandraStore::new(session.clone(), &opts)
                .await
                .context("preparing statements")?,
        );
        let store: Arc<dyn RetryStore> = cassandra.clone();
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
        let writer = Arc::new(Writer::new(
            store.clone(),
            clock.clone(),
            WriterOptions::from_config(&config, boot_epoch),
            services.clone(),
        ));
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
        let ring_task = ring
            .clone()
            .map(|r| tokio::spawn(r.run(shutdown.subscribe())));
        let mut background = vec![
            tokio::spawn(services.clone().run(
                Duration::from_millis(config.settings_refresh_ms),
                shutdown.subscribe(),
            )),
            tokio::spawn(dispatcher.clone().run_scanner()),
            tokio::spawn(dispatcher.clone().run_reaper(Duration::from_millis(100))),
            tokio::spawn(compactor.clone().run(
                Duration::from_millis(config.compaction_interval_ms),
                shutdown.subscribe(),
            )),
        ];
        if let Some(cc) = cluster_clock {
            background.push(tokio::spawn(run_clock_sync(
                store.clone(),
                cc,
                Duration::from_millis(config.clock_sync_interval_ms),
                config.skew_margin_ms as i64,
                shutdown.subscribe(),
            )));
        }

        if !auth.is_on() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "no credentials file (REBOUND_CREDENTIALS_FILE): anyone who can reach this address can call every method, AdminService included");
        }
        let max_message = config.max_payload_bytes.saturating_mul(4) + MESSAGE_OVERHEAD;
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

        let max_payload_bytes = config.max_payload_bytes;
        let router = tonic::transport::Server::builder()
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
                        admin: Arc::new(Admin {
                            store: store.clone(),
                            services: services.clone(),
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
                        }),
                    },
                    AdminGate(auth.clone()),
                ),
            );

        let mut serve_stop = shutdown.subscribe();
        let serve_hub = hub.clone();
        let grace = Duration::from_millis(config.shutdown_grace_ms);
        // tonic sets TCP_NODELAY only on connections it accepts itself, not on a stream of
        // them: without it Nagle's algorithm meets the client's delayed ACK and a small
        // response can wait 40 ms (`bench rebound`: single enqueue p99 48 ms without, 11 ms
        // with).
        let incoming = TcpListenerStream::new(listener).map(|conn| {
            if let Ok(c) = &conn {
                if let Err(e) = c.set_nodelay(true) {
                    tracing::warn!(error = %e, "could not set TCP_NODELAY on a connection");
                }
            }
            conn
        });
        let task = tokio::spawn(async move {
            let serve = router.serve_with_incoming_shutdown(incoming, async move {
                let _ = serve_stop.wait_for(|s| *s).await.map(|_| ());
                // End every subscription so graceful shutdown is not held by them.
                serve_hub.close_all();
                health
                    .set_not_serving::<pb::retry_service_server::RetryServiceServer<Api>>()
                    .await;
            });
            tokio::pin!(serve);
            tokio::select! {
                r = &mut serve => r.map_err(anyhow::Error::from),
                _ = async { stop_rx.wait_for(|s| *s).await.map(|_| ()) } => {
                    match tokio::time::timeout(grace, &mut serve).await {
                        Ok(r) => r.map_err(anyhow::Error::from),
                        Err(_) => {
                            tracing::warn!(grace_ms = grace.as_millis() as u64, "connections still open after the grace period, closing them");
                            Ok(())
                        }
                    }
                }
            }
        });
        tracing::info!(%addr, node_id = %config.node_id, boot_epoch, keyspace = %config.keyspace, "rebound node serving");
        Ok(Node {
            cassandra,
            addr,
            shutdown,
            task,
            writer,
            dispatcher,
            compactor,
            boot_epoch,
            background,
            ring_task,
            ring,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting calls, lets running calls finish within the grace period, then stops.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        let (reads, writes) = self.cassandra.state_io_counts();
        let (pointer_writes, pointers) = self.writer.pointer_writes();
        tracing::info!(
            state_reads = reads.flushes,
            state_rows_read = reads.items,
            state_writes = writes.flushes,
            state_rows_written = writes.items,
            pointer_writes,
            pointers,
            "coalesced Cassandra requests since start"
        );
        self.dispatcher.wake();
        let served = self.task.await.context("server task")?;
        for t in self.background {
            t.abort();
            let _ = t.await;
        }
        // The ring hands its leases back so that other nodes take over at once.
        if let Some(t) = self.ring_task {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        served
    }

    /// Waits until the server stops on its own (it only does so on an error).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.task).await.context("server task")?
    }
}
