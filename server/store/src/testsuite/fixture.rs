//! What a store under test provides, and helpers shared by the suite's tests.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use futures::{stream::BoxStream, TryStreamExt};

use crate::{
    policy::RetryPolicy, window::WindowId, Location, Pointer, RetryStore, Status, StoreResult,
    TxState,
};

/// One store under test, fresh for one test.
#[async_trait]
pub trait Fixture: Send + Sync {
    /// The store: migrated, empty, in its own namespace.
    fn store(&self) -> Arc<dyn RetryStore>;
    /// Another store on the same database in another `ns` (region, cluster), or None when
    /// the store cannot share its database (then the isolation test checks nothing).
    fn other_ns(&self) -> Option<Arc<dyn RetryStore>>;
    /// What the fixture's own `migrate` applied when it made the store (all of them).
    fn first_migration(&self) -> Vec<i32>;
    /// The store's clock, in ms: what TTLs and `server_time_ms` follow.
    fn now_ms(&self) -> i64;
    /// Lets `d` pass on the store's clock: a TTL that ran out within it has expired after.
    async fn advance(&self, d: Duration);
    /// How many rows a paged read fetches per page.
    fn page_size(&self) -> usize;
}

/// Making and dropping a fixture (not object safe; the macro calls it).
#[async_trait]
pub trait Setup: Fixture + Sized {
    async fn setup(test: &str) -> Self;
    async fn teardown(self);
}

pub const SVC: &str = "svc";

pub fn window(day: i32, index: u32) -> WindowId {
    WindowId { day, index }
}

pub fn loc(window: WindowId, instance: &str, bucket: u32) -> Location {
    Location {
        window,
        instance: instance.to_string(),
        bucket,
    }
}

pub fn pointer(id: &str, generation: i64) -> Pointer {
    Pointer {
        transaction_id: id.to_string(),
        generation,
        attempt: 2,
        enqueued_at_ms: 1_700_000_000_000 + generation,
        due_at_ms: Some(1_700_000_060_000 - generation),
    }
}

/// A SCHEDULED state row with every field set to something other than its default.
pub fn state(service: &str, id: &str, generation: i64) -> TxState {
    TxState {
        service: service.to_string(),
        transaction_id: id.to_string(),
        status: Status::Scheduled,
        generation,
        attempt: 3,
        payload: format!("payload of {id}").into_bytes(),
        attributes: BTreeMap::from([
            ("k1".to_string(), "v1".to_string()),
            ("k2".to_string(), String::new()),
        ]),
        policy: RetryPolicy {
            max_attempts: 9,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(60),
            multiplier: 1.5,
            jitter: 0.1,
            max_retry_duration: Some(Duration::from_secs(3600)),
            ack_timeout: Duration::from_secs(7),
            max_deliveries_per_attempt: 2,
            non_retryable: vec!["Fatal".to_string(), "BadInput".to_string()],
        },
        first_enqueued_at_ms: 1_700_000_000_000,
        last_enqueued_at_ms: 1_700_000_001_000,
        updated_at_ms: 1_700_000_002_000,
        due_at_ms: 1_700_000_010_000,
        last_error: "503 from upstream".to_string(),
        location: Some(loc(window(19_700, 42), "inst-1", 3)),
        enqueue_count: 2,
        delivery_count: 4,
        dependency: "payments-gateway".to_string(),
        saga: Default::default(),
        // Every store keeps the attempt history with the row.
        history: crate::history::History {
            attempts: vec![crate::history::AttemptRecord {
                attempt: 3,
                delivered_at_ms: 1_700_000_000_000,
                ended_at_ms: 1_700_000_000_250,
                node_id: "n1".to_string(),
                executor_id: "worker-7".to_string(),
                end: crate::history::AttemptEnd::Retry,
                error: "connection refused".to_string(),
                error_class: "5xx".to_string(),
                retry_after_ms: Some(2_000),
                deliveries: 1,
            }],
            dropped: 1,
        },
        legacy_columns: false,
        base_generation: generation,
        cancelled_generation: None,
        succeeded_generation: None,
        // The enqueue's trace context is part of the stored row (issue 16).
        trace: crate::context::TextContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
            tracestate: "rojo=00f067aa0ba902b7".to_string(),
        },
        written: Default::default(),
    }
}

pub async fn all<T>(s: StoreResult<BoxStream<'static, StoreResult<T>>>) -> Vec<T> {
    s.expect("open stream").try_collect().await.expect("stream")
}

pub async fn pointers_of(store: &dyn RetryStore, service: &str, l: &Location) -> Vec<Pointer> {
    all(store.stream_pointers(service, l).await).await
}

pub fn ids(ps: &[Pointer]) -> Vec<&str> {
    ps.iter().map(|p| p.transaction_id.as_str()).collect()
}
