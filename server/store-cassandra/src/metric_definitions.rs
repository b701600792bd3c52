//! Every metric the Cassandra store exports, with its name and help text: its requests'
//! durations and failures, by operation.
//! They are registered in the process's one registry (`rebound_common::metrics`) the first
//! time `metrics()` is called; the node calls it at start, so a scrape lists them all.

use std::sync::{Arc, OnceLock};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
};
use rebound_common::metrics::{self as registry, seconds_buckets};

/// Metric names, without the `_total` suffix the text format adds to counters.
pub mod names {
    pub const STORE_DURATION: &str = "rebound_store_request_duration_seconds";
    pub const STORE_ERRORS: &str = "rebound_store_request_errors";
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The store's request name, e.g. `SELECT transactions`.
    pub operation: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub operation: Arc<str>,
    /// `unavailable`, `timeout`, `unknown_outcome`, `internal`, ...
    pub kind: &'static str,
}

/// The Cassandra store's metrics (one set per process).
#[derive(Debug)]
pub struct CassandraMetrics {
    pub store_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    pub store_errors: Family<ErrorLabels, Counter>,
}

/// This process's metrics of the Cassandra store, registered on the first call.
pub fn metrics() -> &'static CassandraMetrics {
    static METRICS: OnceLock<CassandraMetrics> = OnceLock::new();
    METRICS.get_or_init(CassandraMetrics::register)
}

impl CassandraMetrics {
    fn register() -> Self {
        use names::*;
        let m = CassandraMetrics {
            store_duration: Family::new_with_constructor(seconds_buckets),
            store_errors: Family::default(),
        };
        registry::register(
            STORE_DURATION,
            "Store request duration by operation, seconds",
            m.store_duration.clone(),
        );
        registry::register(
            STORE_ERRORS,
            "Store requests that failed, by operation and kind",
            m.store_errors.clone(),
        );
        m
    }

    pub fn store_request(&self, operation: &Arc<str>, seconds: f64, error: Option<&'static str>) {
        let operation = operation.clone();
        if let Some(kind) = error {
            self.store_errors
                .get_or_create(&ErrorLabels {
                    operation: operation.clone(),
                    kind,
                })
                .inc();
        }
        self.store_duration
            .get_or_create(&OperationLabels { operation })
            .observe(seconds);
    }
}
