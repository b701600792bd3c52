//! A layer over any store: each call of the contract is timed into the store-call metrics
//! (`rebound_store_call_duration_seconds` and `rebound_store_call_errors_total`, by store and
//! method) and, when the current span is traced and sampled, runs in a span of its own. The
//! node wraps whichever store it opened, so both are measured and traced alike. The
//! Cassandra store also times each CQL request it makes (`rebound_store_request_*`): a call
//! may make several requests, or share one with other calls (coalescing).

use std::{future::Future, sync::Arc, time::Instant};

use async_trait::async_trait;
use futures::{future::BoxFuture, stream::BoxStream};
use opentelemetry::trace::TraceContextExt;
use rebound_common::{coalesce::Counts, tasks::Tasks};
use tracing::{field::Empty, Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{
    window::WindowId, Cas, DeadLetter, DeadLetterRow, DeadLetterStore, DirectoryStore, HoldRow,
    HoldStore, InstanceRow, LeaseChange, LeaseRow, LeaseStore, Location, Member, MigrationStore,
    Pointer, ProbeClaim, ServiceRow, ServiceStore, StateStore, StoreError, StoreLifecycle,
    StoreResult, TokenRange, TxState,
};

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

    async fn call<T: Outcome>(&self, method: &'static str, fut: impl Future<Output = T>) -> T {
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
        rebound_common::metrics::global().store_call(
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
trait Outcome {
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

/// Implements a trait of the contract on `Observed<S>` by passing every call through `call`.
macro_rules! observe {
    ($trait:ident { $(
        async fn $name:ident(&self $(, $arg:ident : $ty:ty)* $(,)?) -> $ret:ty;
    )* }) => {
        #[async_trait]
        impl<S: $trait + ?Sized> $trait for Observed<S> {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.call(stringify!($name), self.inner.$name($($arg),*)).await
                }
            )*
        }
    };
}

observe!(DirectoryStore {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()>;
    async fn put_window(&self, window: WindowId) -> StoreResult<()>;
    async fn put_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()>;
    async fn put_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()>;
    async fn put_pointer(
        &self,
        service: &str,
        location: &Location,
        pointer: &Pointer,
    ) -> StoreResult<()>;
    async fn put_pointers(
        &self,
        service: &str,
        location: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()>;
    async fn put_pointer_groups(
        &self,
        groups: &[(String,
        Location,
        Vec<Pointer>)],
    ) -> StoreResult<()>;
    async fn list_years(&self) -> StoreResult<Vec<i32>>;
    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>>;
    async fn list_instances(
        &self,
        window: WindowId,
        range: TokenRange,
    ) -> StoreResult<Vec<InstanceRow>>;
    async fn list_buckets(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>>;
    async fn stream_pointers(
        &self,
        service: &str,
        location: &Location,
    ) -> StoreResult<BoxStream<'static, StoreResult<Pointer>>>;
    async fn delete_pointer_partition(&self, service: &str, location: &Location) -> StoreResult<()>;
    async fn delete_late_pointer(
        &self,
        service: &str,
        location: &Location,
        transaction_id: &str,
    ) -> StoreResult<()>;
    async fn delete_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()>;
    async fn delete_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()>;
    async fn window_has_instances(&self, window: WindowId) -> StoreResult<bool>;
    async fn delete_window_instances(&self, window: WindowId) -> StoreResult<()>;
    async fn delete_window(&self, window: WindowId) -> StoreResult<()>;
    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()>;
    async fn count_pointers(&self, service: &str, location: &Location) -> StoreResult<u64>;
    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool>;
    async fn window_listed(&self, window: WindowId) -> StoreResult<bool>;
    async fn low_water(&self, day: i32) -> StoreResult<u32>;
    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()>;
    async fn delete_low_water(&self, day: i32) -> StoreResult<()>;
    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>>;
});

observe!(StateStore {
    async fn put_state(&self, state: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()>;
    async fn cancel_state(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()>;
    async fn get_state(&self, service: &str, transaction_id: &str) -> StoreResult<Option<TxState>>;
    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>>;
    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>>;
    async fn settle_state(&self, state: &TxState, ttl_seconds: u32) -> StoreResult<()>;
    async fn put_state_if(
        &self,
        state: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool>;
    async fn cancel_state_if(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool>;
});

observe!(LeaseStore {
    async fn server_time_ms(&self) -> StoreResult<i64>;
    async fn heartbeat(&self, member: &Member, ttl_seconds: u32) -> StoreResult<()>;
    async fn list_members(&self) -> StoreResult<Vec<Member>>;
    async fn read_lease(&self, slot: i32) -> StoreResult<Option<LeaseRow>>;
    async fn peek_leases(&self, slots: &[i32]) -> StoreResult<Vec<LeaseRow>>;
    async fn create_lease(&self, lease: &LeaseRow) -> StoreResult<Cas>;
    async fn replace_lease(
        &self,
        lease: &LeaseRow,
        expected_epoch: i64,
        change: LeaseChange,
    ) -> StoreResult<Cas>;
});

observe!(ServiceStore {
    async fn list_services(&self) -> StoreResult<Vec<ServiceRow>>;
    async fn touch_service(&self, service: &str, now_ms: i64) -> StoreResult<()>;
    async fn set_service_paused(&self, service: &str, paused: bool, now_ms: i64) -> StoreResult<()>;
    async fn set_service_policy(
        &self,
        service: &str,
        policy: &[u8],
        now_ms: i64,
    ) -> StoreResult<()>;
    async fn set_service_limits(
        &self,
        service: &str,
        limits: &[u8],
        now_ms: i64,
    ) -> StoreResult<()>;
    async fn set_service_push(&self, service: &str, push: &[u8], now_ms: i64) -> StoreResult<()>;
});

observe!(DeadLetterStore {
    async fn put_dead_letter(&self, letter: &DeadLetter, ttl_seconds: u32) -> StoreResult<()>;
    async fn stream_dead_letters(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<BoxStream<'static, StoreResult<DeadLetterRow>>>;
    async fn mark_redriven(&self, letter: &DeadLetter, now_ms: i64) -> StoreResult<()>;
    async fn delete_dead_letter_day(&self, service: &str, day: i32) -> StoreResult<()>;
    async fn delete_dead_letter_range(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<()>;
});

observe!(HoldStore {
    async fn put_hold(&self, hold: &HoldRow, ttl_seconds: u32) -> StoreResult<()>;
    async fn list_holds(&self) -> StoreResult<Vec<HoldRow>>;
    async fn claim_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        now_ms: i64,
        stale_before_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<ProbeClaim>;
    async fn answer_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        answered_at_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<bool>;
});

observe!(MigrationStore {
    async fn migrate(&self, now_ms: i64) -> StoreResult<Vec<i32>>;
    async fn applied_migrations(&self) -> StoreResult<Vec<i32>>;
});

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
