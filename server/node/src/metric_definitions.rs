//! Every metric the node's transport exports, with its name and help text: gRPC calls, the
//! readiness probe, connections, the request byte budget and span export.
//! They are registered in the process's one registry (`rebound_common::metrics`) the first
//! time `metrics()` is called; the node registers every crate's at start (`node::start`),
//! so a scrape lists them all.

use std::sync::OnceLock;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
};
use rebound_common::metrics::{self as registry, seconds_buckets};

/// Metric names, without the `_total` suffix the text format adds to counters.
pub mod names {
    pub const RPC_DURATION: &str = "rebound_rpc_duration_seconds";
    pub const SPANS_DROPPED: &str = "rebound_spans_dropped";
    pub const READY: &str = "rebound_ready";
    pub const INFLIGHT_REQUEST_BYTES: &str = "rebound_inflight_request_bytes";
    pub const REQUESTS_SHED: &str = "rebound_requests_shed";
    pub const CONNECTIONS: &str = "rebound_connections";
    pub const CONNECTIONS_CLOSED: &str = "rebound_connections_closed";
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub method: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Spans: `queue_full` or `export_failed`; shed requests: `inflight_bytes`; closed
    /// connections: `limit`, `header_timeout`.
    pub reason: &'static str,
}

/// The node's metrics (one set per process).
#[derive(Debug)]
pub struct NodeMetrics {
    pub rpc_duration: Family<RpcLabels, Histogram, fn() -> Histogram>,
    pub spans_dropped: Family<ReasonLabels, Counter>,
    pub ready: Gauge,
    pub inflight_request_bytes: Gauge,
    pub requests_shed: Family<ReasonLabels, Counter>,
    pub connections: Gauge,
    pub connections_closed: Family<ReasonLabels, Counter>,
}

/// This process's metrics of the node, registered on the first call.
pub fn metrics() -> &'static NodeMetrics {
    static METRICS: OnceLock<NodeMetrics> = OnceLock::new();
    METRICS.get_or_init(NodeMetrics::register)
}

impl NodeMetrics {
    fn register() -> Self {
        use names::*;
        let m = NodeMetrics {
            rpc_duration: Family::new_with_constructor(seconds_buckets),
            spans_dropped: Family::default(),
            ready: Gauge::default(),
            inflight_request_bytes: Gauge::default(),
            requests_shed: Family::default(),
            connections: Gauge::default(),
            connections_closed: Family::default(),
        };
        registry::register(
            RPC_DURATION,
            "gRPC call duration by method and code, seconds (streams: until the first response)",
            m.rpc_duration.clone(),
        );
        registry::register(SPANS_DROPPED, "Trace spans dropped, by reason (queue_full: the export queue was full; export_failed: the collector refused or did not answer)", m.spans_dropped.clone());
        registry::register(
            READY,
            "1 when /readyz answers 200, as of the last probe",
            m.ready.clone(),
        );
        registry::register(
            INFLIGHT_REQUEST_BYTES,
            "Request bytes this node holds now, against REBOUND_MAX_INFLIGHT_BYTES",
            m.inflight_request_bytes.clone(),
        );
        registry::register(REQUESTS_SHED, "Requests refused with RESOURCE_EXHAUSTED to shed load, by reason (inflight_bytes: the request byte budget was full)", m.requests_shed.clone());
        registry::register(CONNECTIONS, "Open connections on the gRPC port, TLS handshakes included, against REBOUND_MAX_CONNECTIONS", m.connections.clone());
        registry::register(CONNECTIONS_CLOSED, "gRPC connections the node closed, by reason (limit: refused at accept, REBOUND_MAX_CONNECTIONS was reached; header_timeout: no complete request headers within REBOUND_REQUEST_HEADER_TIMEOUT_MS)", m.connections_closed.clone());
        m
    }

    pub fn span_dropped(&self, reason: &'static str, n: u64) {
        self.spans_dropped
            .get_or_create(&ReasonLabels { reason })
            .inc_by(n);
    }

    pub fn connection_closed(&self, reason: &'static str) {
        self.connections_closed
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}
