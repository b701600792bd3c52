//! A layer over any store: each call of the contract is timed into the store-call metrics
//! (`rebound_store_call_duration_seconds` and `rebound_store_call_errors_total`, by store and
//! method) and, when the current span is traced and sampled, runs in a span of its own. The
//! node wraps whichever store it opened, so both are measured and traced alike. The
//! Cassandra store also times each CQL request it makes (`rebound_store_request_*`): a call
//! may make several requests, or share one with other calls (coalescing).

use std::{future::Future, sync::Arc, time::Instant};

use futures::future::BoxFuture;
use opentelemetry::trace::TraceContextExt;
use rebound_common::{coalesce::Counts, tasks::Tasks};
use tracing::{field::Empty, Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{StoreError, StoreLifecycle, StoreResult};

/// `inner`, observed. `store` names it in the metrics and spans (`cassandra`, `embedded`).
#[derive(Debug)]
pub struct Observed<S: ?Sized> {
    inner: Arc<S>,
    store: &'static str,
}

impl<S: ?Sized> Observed<S> {
    pub fn new(inner: Arc<S>, store: &'static str) -> Self {
        Self { inner, store }
    }

    /// The store underneath.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    pub(crate) async fn call<T: Outcome>(
        &self,
        method: &'static str,
        fut: impl Future<Output = T>,
    ) -> T {
        let span = if rebound_common::trace::enabled()
            && Span::current().context().span().span_context().is_sampled()
        {
            tracing::info_span!(
                target: "rebound_server::store",
                "store",
                otel.name = format!("store {method}"),
                otel.kind = "internal",
                otel.status_code = Empty,
                rebound.store = self.store,
                error.type = Empty,
            )
        } else {
            Span::none()
        };
        let started = Instant::now();
        let out = fut.instrument(span.clone()).await;
        let failed = out.failure();
        crate::metric_definitions::metrics().store_call(
            self.store,
            method,
            started.elapsed().as_secs_f64(),
            failed,
        );
        if let Some(kind) = failed {
            rebound_common::trace::failed(&span, kind);
        }
        out
    }
}

/// What a call's answer says about failure.
pub(crate) trait Outcome {
    fn failure(&self) -> Option<&'static str>;
}

impl<T> Outcome for StoreResult<T> {
    fn failure(&self) -> Option<&'static str> {
        self.as_ref().err().map(StoreError::kind)
    }
}

impl Outcome for Vec<StoreResult<()>> {
    fn failure(&self) -> Option<&'static str> {
        self.iter()
            .find_map(|r| r.as_ref().err().map(StoreError::kind))
    }
}

/// The lifecycle is the inner store's: its loop, its tasks and its counts.
impl<S: StoreLifecycle + ?Sized> StoreLifecycle for Observed<S> {
    fn background(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<BoxFuture<'static, ()>> {
        self.inner.clone().background(stop)
    }

    fn task_owners(&self) -> Vec<(&'static str, &Tasks)> {
        self.inner.task_owners()
    }

    fn state_io_counts(&self) -> (Counts, Counts) {
        self.inner.state_io_counts()
    }
}
