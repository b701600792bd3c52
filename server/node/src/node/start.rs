//! The steps of `Node::start_with`, each from the configuration: the secrets, the clock, the
//! listeners, the settings every node shares, and, on the built engine (`Parts`), the handle
//! that gRPC and the dashboard share, the HTTP routes and the gRPC services.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;

use super::serve::GrpcServices;
use crate::{
    api::{AdminApi, Api, ExecutorApi},
    auth::{Auth, AuthLayer},
    config::{Config, StoreKind},
    keys::KeyFile,
    tls::ServerTls,
};
use rebound_engine::{clock_sync::sync_clock, engine::Engine, handle::Handle};
use rebound_store::{
    clock::{ClusterClock, SharedClock},
    RetryStore,
};

/// Registers every crate's metrics this node exports, so that the first scrape lists them
/// all: the node's own, the engine's, the storage layers', the Cassandra store's and the task
/// owners'.
pub(super) fn register_metrics() {
    crate::metric_definitions::metrics();
    rebound_engine::metric_definitions::metrics();
    rebound_store::metric_definitions::metrics();
    rebound_store_cassandra::metric_definitions::metrics();
    rebound_common::metrics::global();
}

/// The credentials and the listeners' TLS, read before anything starts, so that a bad file
/// stops the node at once.
pub(super) fn secrets(config: &Config) -> anyhow::Result<(Arc<Auth>, Option<Arc<ServerTls>>)> {
    let auth = Arc::new(match &config.credentials_file {
        Some(path) => {
            Auth::load(path).map_err(|e| anyhow::anyhow!("REBOUND_CREDENTIALS_FILE: {e}"))?
        }
        None => Auth::off(),
    });
    let tls = match config.tls_files() {
        Some(files) => Some(Arc::new(
            ServerTls::load(files).map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    Ok((auth, tls))
}

/// The secrets key file (`REBOUND_SECRETS_KEY_FILE`), read into the engine's keys; None
/// when it is not set (push targets' secrets are then stored in clear).
pub(super) fn secrets_keys(config: &Config, engine: &Engine) -> anyhow::Result<Option<KeyFile>> {
    let Some(path) = &config.secrets_key_file else {
        tracing::info!("no REBOUND_SECRETS_KEY_FILE: push targets' signing secrets and header values are stored in clear");
        return Ok(None);
    };
    let file = KeyFile::load(path, engine.services().secrets().clone())
        .map_err(|e| anyhow::anyhow!("REBOUND_SECRETS_KEY_FILE: {e}"))?;
    Ok(Some(file))
}

/// The clock every component runs on: Cassandra's when clock sync is on (windows, leases,
/// backoff and the boot epoch then follow it), else `clock`; and the synced clock to keep in
/// sync.
pub(super) async fn node_clock(
    config: &Config,
    store: &Arc<dyn RetryStore>,
    clock: SharedClock,
) -> (SharedClock, Option<Arc<ClusterClock>>) {
    if !config.clock_sync {
        return (clock, None);
    }
    let cc = Arc::new(ClusterClock::new(clock));
    if let Err(e) = sync_clock(store.as_ref(), &cc, config.skew_margin_ms as i64).await {
        tracing::warn!(error = %e, "could not read Cassandra's clock; running on this node's own clock until it can");
    }
    (cc.clone() as SharedClock, Some(cc))
}

/// The bound listeners: gRPC, and the metrics, probes and dashboard listener when on.
pub(super) struct Listeners {
    pub grpc: TcpListener,
    pub addr: SocketAddr,
    pub http: Option<TcpListener>,
    pub http_addr: Option<SocketAddr>,
    /// What GetRing tells executors: the configured address, else the bound one, with the
    /// host name in place of an unspecified IP (0.0.0.0 is no use to a client).
    pub advertised: String,
}

impl Listeners {
    pub async fn bind(config: &Config) -> anyhow::Result<Listeners> {
        let grpc = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {} (REBOUND_LISTEN)", config.listen))?;
        let addr = grpc.local_addr()?;
        let http = match config.http_listen {
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
        let http_addr = match &http {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let advertised = match &config.advertise {
            Some(a) => a.clone(),
            None if addr.ip().is_unspecified() => format!("{}:{}", config.node_id, addr.port()),
            None => addr.to_string(),
        };
        Ok(Listeners {
            grpc,
            addr,
            http,
            http_addr,
            advertised,
        })
    }
}

/// The built parts of a node, which its transport runs on.
pub(super) struct Parts<'a> {
    pub config: &'a Config,
    pub engine: &'a Engine,
    pub tls: &'a Option<Arc<ServerTls>>,
}

impl Parts<'_> {
    /// The engine's handle that AdminService, the API and the dashboard share, asking peers
    /// over this node's gRPC.
    pub fn handle(&self) -> Handle {
        let peers = crate::peers::PeerClient {
            tls: self.tls.clone(),
        };
        self.engine.handle(Some(Arc::new(peers)))
    }

    /// The HTTP listener's routes: `/metrics`, the probes, and the dashboard.
    pub async fn http_router(
        &self,
        auth: &Arc<Auth>,
        handle: &Handle,
    ) -> anyhow::Result<axum::Router> {
        // Every migration this store has once started is applied: /readyz checks that they
        // still read as applied (a keyspace dropped under the node does not).
        let migrations = handle
            .applied_migrations()
            .await
            .context("reading the applied migrations")?
            .len();
        let probe = Arc::new(crate::http::Probe::new(handle.clone(), migrations));
        let dashboard = Arc::new(crate::dashboard::Dashboard {
            handle: handle.clone(),
            auth: auth.clone(),
            window_seconds: self.config.window_seconds,
            trace_url_template: self.config.trace_url_template.clone(),
        });
        Ok(crate::http::router(probe, Some(dashboard)))
    }

    /// The gRPC services: RetryService, ExecutorService and AdminService, and the layer that
    /// authenticates their calls (AdminService's with an admin credential).
    pub fn grpc_services(&self, auth: &Arc<Auth>, handle: Handle) -> GrpcServices {
        let config = self.config;
        GrpcServices {
            api: Api {
                handle: handle.clone(),
                max_payload_bytes: config.max_payload_bytes,
                max_batch_items: config.max_batch_items,
            },
            executor: ExecutorApi {
                handle: handle.clone(),
            },
            admin: AdminApi { handle },
            auth: AuthLayer::new(auth.clone()),
        }
    }
}

/// Records this node's window size, slots and lanes where its namespace has none recorded,
/// and refuses to start when they differ from the recorded ones (docs/architecture.md,
/// "Settings every node shares").
pub(super) async fn check_shared_settings(
    config: &Config,
    store: &dyn rebound_store::RetryStore,
) -> anyhow::Result<()> {
    use rebound_engine::shared_settings::{check, SharedSetting};
    let mine = [
        SharedSetting::new(
            "window_seconds",
            "REBOUND_WINDOW_SECONDS",
            config.window_seconds,
        ),
        SharedSetting::new("slots", "REBOUND_SLOTS", config.slots),
        SharedSetting::new("lanes", "REBOUND_LANES", config.lanes),
    ];
    let namespace = match config.store {
        StoreKind::Cassandra => format!(
            "keyspace {} (region {}, cluster {})",
            config.keyspace, config.region, config.cluster
        ),
        StoreKind::Embedded => "the data directory (REBOUND_DATA_DIR)".to_string(),
    };
    let wait = Duration::from_millis(config.cassandra_startup_wait_ms);
    check(store, &config.node_id, &namespace, &mine, wait)
        .await
        .map_err(anyhow::Error::msg)
}
