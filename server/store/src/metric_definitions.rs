//! Every metric of the storage contract's layers, with its name and help text: each
//! contract call (`observed`), and the size of each coalesced request (`coalesced`, and the
//! writer's coalescing of pointers and enqueue groups).
//! They are registered in the process's one registry (`rebound_common::metrics`) the first
//! time `metrics()` is called; the node calls it at start, so a scrape lists them all.

use std::sync::OnceLock;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
};
use rebound_common::metrics::{self as registry, batch_buckets, seconds_buckets};

/// Metric names, without the `_total` suffix the text format adds to counters.
pub mod names {
    pub const STORE_CALL_DURATION: &str = "rebound_store_call_duration_seconds";
    pub const STORE_CALL_ERRORS: &str = "rebound_store_call_errors";
    pub const COALESCED_BATCH: &str = "rebound_coalesced_batch_size";
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `cassandra` or `embedded`.
    pub store: &'static str,
    /// The storage contract's method, e.g. `get_states`.
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallErrorLabels {
    pub store: &'static str,
    pub method: &'static str,
    /// `unavailable`, `unknown_outcome`, `internal`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    /// `state_reads`, `state_writes`, `state_settles`, `pointer_writes`, `enqueue_group`.
    pub kind: &'static str,
}

/// The storage layers' metrics (one set per process).
#[derive(Debug)]
pub struct StoreMetrics {
    pub store_call_duration: Family<CallLabels, Histogram, fn() -> Histogram>,
    pub store_call_errors: Family<CallErrorLabels, Counter>,
    pub coalesced_batch: Family<BatchLabels, Histogram, fn() -> Histogram>,
}

/// This process's metrics of the storage layers, registered on the first call.
pub fn metrics() -> &'static StoreMetrics {
    static METRICS: OnceLock<StoreMetrics> = OnceLock::new();
    METRICS.get_or_init(StoreMetrics::register)
}

impl StoreMetrics {
    fn register() -> Self {
        use names::*;
        let m = StoreMetrics {
            store_call_duration: Family::new_with_constructor(seconds_buckets),
            store_call_errors: Family::default(),
            coalesced_batch: Family::new_with_constructor(batch_buckets),
        };
        registry::register(STORE_CALL_DURATION, "Storage contract calls' duration, by store and method, seconds (a call may make several requests, or share one)", m.store_call_duration.clone());
        registry::register(
            STORE_CALL_ERRORS,
            "Storage contract calls that failed, by store, method and kind",
            m.store_call_errors.clone(),
        );
        registry::register(
            COALESCED_BATCH,
            "Items per coalesced store request, by kind",
            m.coalesced_batch.clone(),
        );
        m
    }

    /// One call of the storage contract (`rebound_store::Observed`).
    pub fn store_call(
        &self,
        store: &'static str,
        method: &'static str,
        seconds: f64,
        error: Option<&'static str>,
    ) {
        if let Some(kind) = error {
            self.store_call_errors
                .get_or_create(&CallErrorLabels {
                    store,
                    method,
                    kind,
                })
                .inc();
        }
        self.store_call_duration
            .get_or_create(&CallLabels { store, method })
            .observe(seconds);
    }

    pub fn coalesced(&self, kind: &'static str, items: usize) {
        self.coalesced_batch
            .get_or_create(&BatchLabels { kind })
            .observe(items as f64);
    }
}
