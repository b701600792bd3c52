//! The plain HTTP listener (`REBOUND_HTTP_LISTEN`, default `127.0.0.1:9464`, empty: off):
//! `/metrics` (Prometheus text format, `metrics`), `/healthz` (the process answers) and
//! `/readyz` (migrations applied, store reachable, this node's heartbeat in the ring).
//!
//! `/readyz` probes the store at most once a second whatever the request rate, each probe
//! bounded by two seconds: it answers 503 while the store is down and 200 again once it is
//! back, without a restart.
//!
//! The dashboard (`dashboard`, `docs/dashboard.md`) is served here too: its page at `/` and
//! its JSON API under `/api/v1/`. `/metrics`, `/healthz` and `/readyz` stay unauthenticated.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
    routing::get,
    Router,
};

use rebound_common::metrics;
use rebound_engine::handle::Handle;

/// How long one readiness answer is reused.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// The longest a store probe may take before the node reads as not ready.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the listener reads.
pub struct Probe {
    pub handle: Handle,
    /// How many schema migrations the store reported applied once the node had migrated it.
    pub migrations: usize,
    last: tokio::sync::Mutex<Option<(Instant, Readiness)>>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}

/// The answer of `/readyz`: each check and whether it passed.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub checks: Vec<(&'static str, Result<(), String>)>,
}

impl Readiness {
    pub fn ready(&self) -> bool {
        self.checks.iter().all(|(_, r)| r.is_ok())
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for (name, r) in &self.checks {
            match r {
                Ok(()) => out.push_str(&format!("{name}: ok\n")),
                Err(e) => out.push_str(&format!("{name}: FAIL ({e})\n")),
            }
        }
        out
    }
}

impl Probe {
    pub fn new(handle: Handle, migrations: usize) -> Self {
        Probe {
            handle,
            migrations,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// Readiness, probed at most once per `PROBE_EVERY`.
    pub async fn readiness(&self) -> Readiness {
        let mut last = self.last.lock().await;
        if let Some((at, r)) = last.as_ref() {
            if at.elapsed() < PROBE_EVERY {
                return r.clone();
            }
        }
        let r = self.probe().await;
        crate::metric_definitions::metrics()
            .ready
            .set(i64::from(r.ready()));
        *last = Some((Instant::now(), r.clone()));
        r
    }

    async fn probe(&self) -> Readiness {
        let store =
            match tokio::time::timeout(PROBE_TIMEOUT, self.handle.applied_migrations()).await {
                Ok(Ok(applied)) => Ok(applied),
                Ok(Err(e)) => Err(format!("the store did not answer: {e}")),
                Err(_) => Err(format!(
                    "the store did not answer within {} ms",
                    PROBE_TIMEOUT.as_millis()
                )),
            };
        let migrations = match &store {
            Ok(applied) if applied.len() >= self.migrations => Ok(()),
            Ok(applied) => Err(format!(
                "{} of {} schema migrations applied",
                applied.len(),
                self.migrations
            )),
            Err(_) => Err("unknown while the store is unreachable".into()),
        };
        let ring = self.handle.ring_health();
        Readiness {
            checks: vec![
                ("store", store.map(|_| ())),
                ("migrations", migrations),
                ("ring", ring),
            ],
        }
    }

    /// Sets the gauges read from this node's own state, then encodes every metric.
    pub fn scrape(&self) -> String {
        self.handle.refresh_gauges();
        metrics::encode()
    }
}

async fn metrics_handler(State(p): State<Arc<Probe>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], p.scrape())
}

async fn healthz() -> impl IntoResponse {
    "ok\n"
}

async fn readyz(State(p): State<Arc<Probe>>) -> impl IntoResponse {
    let r = p.readiness().await;
    let code = if r.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, r.text())
}

/// The listener's routes: the probes and metrics, and the dashboard when given.
pub fn router(probe: Arc<Probe>, dashboard: Option<Arc<crate::dashboard::Dashboard>>) -> Router {
    let probes = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probe);
    match dashboard {
        Some(d) => probes.merge(crate::dashboard::router(d)),
        None => probes,
    }
}
