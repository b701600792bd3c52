//! Every metric the node exports, its name and its help text, in one place (the alerts of
//! deploy/prometheus/alerts.yml and docs/operations.md, section 8 "Alerts", use them).
//! Served at `/metrics` by `http` in the Prometheus text format.
//!
//! The crate is `prometheus-client`, the Prometheus project's own Rust client: typed label
//! sets checked at compile time, no global macros, no `unsafe`, one lock-free atomic per
//! sample on the hot path (after the first lookup of a label set, a read lock and a hash).
//! OpenTelemetry metrics with a Prometheus exporter would also work, but its Prometheus
//! exporter is the least mature part of the Rust SDK and would put a second pipeline between
//! a counter and its scrape; traces are OpenTelemetry's job here, metrics Prometheus's.
//!
//! Labels are bounded: at most a service name, an enum-like value (result, kind, outcome,
//! band, gRPC code, store operation) or a method name, never a transaction id or an
//! attribute. Service names are labelled for the first `REBOUND_METRICS_MAX_SERVICES`
//! (default 200) distinct services this process sees; later ones are counted under
//! `service="_other"`, so a caller inventing names cannot grow the scrape without bound.
//!
//! The registry is per process (`global()`): nodes started in one test process share it.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, OnceLock, RwLock,
    },
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Metric names, without the `_total` suffix the text format adds to counters.
pub mod names {
    pub const ENQUEUES: &str = "rebound_enqueues";
    pub const DELIVERIES: &str = "rebound_deliveries";
    pub const ACKS: &str = "rebound_acks";
    pub const DEAD_LETTERS: &str = "rebound_dead_letters";
    pub const COMPENSATIONS: &str = "rebound_compensations";
    pub const HELD_POSTPONED: &str = "rebound_held_postponed";
    pub const DEPENDENCY_HOLDS: &str = "rebound_dependency_holds";
    pub const IN_FLIGHT: &str = "rebound_in_flight";
    pub const PENDING: &str = "rebound_pending";
    pub const OLDEST_OVERDUE: &str = "rebound_oldest_overdue_seconds";
    pub const BACKLOG_MEASURED: &str = "rebound_backlog_measured_timestamp_seconds";
    pub const DELIVERY_LATENESS: &str = "rebound_delivery_lateness_seconds";
    pub const RPC_DURATION: &str = "rebound_rpc_duration_seconds";
    pub const STORE_DURATION: &str = "rebound_store_request_duration_seconds";
    pub const STORE_ERRORS: &str = "rebound_store_request_errors";
    pub const STORE_CALL_DURATION: &str = "rebound_store_call_duration_seconds";
    pub const STORE_CALL_ERRORS: &str = "rebound_store_call_errors";
    pub const COALESCED_BATCH: &str = "rebound_coalesced_batch_size";
    pub const RING_SLOTS: &str = "rebound_ring_slots_held";
    pub const RING_SIZE: &str = "rebound_ring_slots";
    pub const COMPACTOR: &str = "rebound_compactor";
    pub const CLOCK_OFFSET: &str = "rebound_clock_offset_seconds";
    pub const SUBSCRIBERS: &str = "rebound_subscribers";
    pub const SPANS_DROPPED: &str = "rebound_spans_dropped";
    pub const READY: &str = "rebound_ready";
    pub const INFLIGHT_REQUEST_BYTES: &str = "rebound_inflight_request_bytes";
    pub const REQUESTS_SHED: &str = "rebound_requests_shed";
    pub const CONNECTIONS: &str = "rebound_connections";
    pub const CONNECTIONS_CLOSED: &str = "rebound_connections_closed";
    pub const TASKS: &str = "rebound_tasks";
    pub const PUSH_REQUESTS: &str = "rebound_push_requests";
    pub const PUSH_DURATION: &str = "rebound_push_request_duration_seconds";
}

/// The label a service stands under when the cap on labelled services is reached.
pub const OTHER_SERVICE: &str = "_other";
/// Default cap on distinct service labels (`REBOUND_METRICS_MAX_SERVICES`).
pub const DEFAULT_MAX_SERVICES: usize = 200;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabel {
    pub service: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnqueueLabels {
    pub service: Arc<str>,
    /// `new`, `deduplicated` or `refused`.
    pub result: &'static str,
    /// The gRPC code (`OK` unless refused).
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub service: Arc<str>,
    /// Deliveries: `first` or `redelivery`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub service: Arc<str>,
    /// `succeeded`, `retry`, `failed`, `snoozed`, `dead_lettered` or `refused`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BandLabels {
    pub service: Arc<str>,
    /// `overdue`, `within_minute`, `within_hour`, `within_day`, `later`.
    pub band: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub method: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The store's request name, e.g. `SELECT transactions`.
    pub operation: Arc<str>,
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
pub struct ErrorLabels {
    pub operation: Arc<str>,
    /// `unavailable`, `timeout`, `unknown_outcome`, `internal`, ...
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    /// `state_reads`, `state_writes`, `state_settles`, `pointer_writes`, `enqueue_group`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Spans: `queue_full` or `export_failed`; shed requests: `inflight_bytes`; closed
    /// connections: `limit`, `header_timeout`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabels {
    pub service: Arc<str>,
    /// `2xx`, `3xx`, `4xx`, `5xx`, `timeout`, `error`, `refused`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OwnerLabels {
    /// The component that spawned the tasks (`tasks::Tasks::new`): `node`, `ring`,
    /// `server`, `dispatcher`, `coalescer`.
    pub owner: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn seconds_buckets() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

fn push_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

fn lateness_buckets() -> Histogram {
    Histogram::new([
        0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    ])
}

fn batch_buckets() -> Histogram {
    Histogram::new([1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0])
}

/// The node's metrics (one set per process).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub enqueues: Family<EnqueueLabels, Counter>,
    pub deliveries: Family<KindLabels, Counter>,
    pub acks: Family<OutcomeLabels, Counter>,
    pub dead_letters: Family<ServiceLabel, Counter>,
    pub compensations: Family<ServiceLabel, Counter>,
    pub held_postponed: Family<ServiceLabel, Counter>,
    pub dependency_holds: Gauge,
    pub in_flight: Family<ServiceLabel, Gauge>,
    pub pending: Family<BandLabels, Gauge>,
    pub oldest_overdue: Family<ServiceLabel, FloatGauge>,
    pub backlog_measured: FloatGauge,
    pub delivery_lateness: Histogram,
    pub rpc_duration: Family<RpcLabels, Histogram, fn() -> Histogram>,
    pub store_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    pub store_errors: Family<ErrorLabels, Counter>,
    pub store_call_duration: Family<CallLabels, Histogram, fn() -> Histogram>,
    pub store_call_errors: Family<CallErrorLabels, Counter>,
    pub coalesced_batch: Family<BatchLabels, Histogram, fn() -> Histogram>,
    pub ring_slots: Gauge,
    pub ring_size: Gauge,
    pub compactor: Gauge,
    pub clock_offset: FloatGauge,
    pub subscribers: Family<ServiceLabel, Gauge>,
    pub spans_dropped: Family<ReasonLabels, Counter>,
    pub ready: Gauge,
    pub inflight_request_bytes: Gauge,
    pub requests_shed: Family<ReasonLabels, Counter>,
    pub connections: Gauge,
    pub connections_closed: Family<ReasonLabels, Counter>,
    pub tasks: Family<OwnerLabels, Gauge>,
    pub push_requests: Family<PushLabels, Counter>,
    pub push_duration: Family<ServiceLabel, Histogram, fn() -> Histogram>,
    services: ServiceNames,
}

/// The service names given labels of their own, up to the cap.
#[derive(Debug)]
struct ServiceNames {
    cap: AtomicUsize,
    known: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
}

impl ServiceNames {
    fn label(&self, service: &str) -> Arc<str> {
        if let Some(s) = self.known.read().expect("labels lock").get(service) {
            return s.clone();
        }
        let mut known = self.known.write().expect("labels lock");
        if let Some(s) = known.get(service) {
            return s.clone();
        }
        if known.len() >= self.cap.load(Ordering::Relaxed) {
            return self.other.clone();
        }
        let s: Arc<str> = service.into();
        known.insert(s.clone());
        s
    }
}

/// The media type of `Metrics::encode`.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The classic Prometheus text format of an OpenMetrics text: a counter's `# HELP` and
/// `# TYPE` lines name it with its `_total` suffix, as its samples do, and there is no
/// `# EOF` line. Every Prometheus text parser reads the result.
fn classic(openmetrics: &str) -> String {
    let mut counters: HashSet<&str> = HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name);
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        match meta {
            Some((head, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(head);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

static GLOBAL: OnceLock<Metrics> = OnceLock::new();

/// This process's metrics.
pub fn global() -> &'static Metrics {
    GLOBAL.get_or_init(Metrics::new)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        use names::*;
        let mut r = Registry::default();
        let m = Metrics {
            enqueues: Family::default(),
            deliveries: Family::default(),
            acks: Family::default(),
            dead_letters: Family::default(),
            compensations: Family::default(),
            held_postponed: Family::default(),
            dependency_holds: Gauge::default(),
            in_flight: Family::default(),
            pending: Family::default(),
            oldest_overdue: Family::default(),
            backlog_measured: FloatGauge::default(),
            delivery_lateness: lateness_buckets(),
            rpc_duration: Family::new_with_constructor(seconds_buckets),
            store_duration: Family::new_with_constructor(seconds_buckets),
            store_errors: Family::default(),
            store_call_duration: Family::new_with_constructor(seconds_buckets),
            store_call_errors: Family::default(),
            coalesced_batch: Family::new_with_constructor(batch_buckets),
            ring_slots: Gauge::default(),
            ring_size: Gauge::default(),
            compactor: Gauge::default(),
            clock_offset: FloatGauge::default(),
            subscribers: Family::default(),
            spans_dropped: Family::default(),
            ready: Gauge::default(),
            inflight_request_bytes: Gauge::default(),
            requests_shed: Family::default(),
            connections: Gauge::default(),
            connections_closed: Family::default(),
            tasks: Family::default(),
            push_requests: Family::default(),
            push_duration: Family::new_with_constructor(push_buckets),
            services: ServiceNames {
                cap: AtomicUsize::new(DEFAULT_MAX_SERVICES),
                known: RwLock::default(),
                other: OTHER_SERVICE.into(),
            },
            registry: Registry::default(),
        };
        r.register(
            ENQUEUES,
            "EnqueueRetry items by service and result (new, deduplicated, refused) and gRPC code",
            m.enqueues.clone(),
        );
        r.register(
            DELIVERIES,
            "Deliveries sent to executors by service and kind (first delivery of an attempt, or redelivery)",
            m.deliveries.clone(),
        );
        r.register(
            ACKS,
            "Acks by service and outcome (succeeded, retry, failed, snoozed, dead_lettered, refused)",
            m.acks.clone(),
        );
        r.register(
            DEAD_LETTERS,
            "Retries dead-lettered by service",
            m.dead_letters.clone(),
        );
        r.register(
            COMPENSATIONS,
            "Compensations handed on to their service's retries (the first of a saga step that ended DEAD, or the next after one acknowledged SUCCEEDED), by the compensation's service",
            m.compensations.clone(),
        );
        r.register(
            HELD_POSTPONED,
            "Retries postponed because the dependency they name is held, by service (no attempt used)",
            m.held_postponed.clone(),
        );
        r.register(
            DEPENDENCY_HOLDS,
            "Dependency holds in force, as this node last read them (ListDependencyHolds names them)",
            m.dependency_holds.clone(),
        );
        r.register(
            IN_FLIGHT,
            "Deliveries of this node awaiting an ack, by service",
            m.in_flight.clone(),
        );
        r.register(
            PENDING,
            "Scheduled retries by service and due band, cluster-wide, as last measured by the compactor node (other nodes export none)",
            m.pending.clone(),
        );
        r.register(
            OLDEST_OVERDUE,
            "Age of the oldest overdue window that still holds retries, by service (compactor node only)",
            m.oldest_overdue.clone(),
        );
        r.register(
            BACKLOG_MEASURED,
            "When rebound_pending was last measured (Unix seconds; 0: never on this node)",
            m.backlog_measured.clone(),
        );
        r.register(
            DELIVERY_LATENESS,
            "Delivery time minus due time, seconds, of every delivery (a redelivery counts from the same due time)",
            m.delivery_lateness.clone(),
        );
        r.register(
            RPC_DURATION,
            "gRPC call duration by method and code, seconds (streams: until the first response)",
            m.rpc_duration.clone(),
        );
        r.register(
            STORE_DURATION,
            "Store request duration by operation, seconds",
            m.store_duration.clone(),
        );
        r.register(
            STORE_ERRORS,
            "Store requests that failed, by operation and kind",
            m.store_errors.clone(),
        );
        r.register(
            STORE_CALL_DURATION,
            "Storage contract calls' duration, by store and method, seconds (a call may make several requests, or share one)",
            m.store_call_duration.clone(),
        );
        r.register(
            STORE_CALL_ERRORS,
            "Storage contract calls that failed, by store, method and kind",
            m.store_call_errors.clone(),
        );
        r.register(
            COALESCED_BATCH,
            "Items per coalesced store request, by kind",
            m.coalesced_batch.clone(),
        );
        r.register(
            RING_SLOTS,
            "Ring slots this node holds a lease on",
            m.ring_slots.clone(),
        );
        r.register(
            RING_SIZE,
            "Slots in the lease ring (REBOUND_SLOTS), the most rebound_ring_slots_held can add up to across the nodes; 0 on a node without the lease ring",
            m.ring_size.clone(),
        );
        r.register(
            COMPACTOR,
            "1 when this node holds the compactor role (Node-0), else 0",
            m.compactor.clone(),
        );
        r.register(
            CLOCK_OFFSET,
            "Offset applied to this node's clock to follow the database's, seconds",
            m.clock_offset.clone(),
        );
        r.register(
            SUBSCRIBERS,
            "Open Subscribe streams on this node, by service",
            m.subscribers.clone(),
        );
        r.register(
            SPANS_DROPPED,
            "Trace spans dropped, by reason (queue_full: the export queue was full; export_failed: the collector refused or did not answer)",
            m.spans_dropped.clone(),
        );
        r.register(
            READY,
            "1 when /readyz answers 200, as of the last probe",
            m.ready.clone(),
        );
        r.register(
            INFLIGHT_REQUEST_BYTES,
            "Request bytes this node holds now, against REBOUND_MAX_INFLIGHT_BYTES",
            m.inflight_request_bytes.clone(),
        );
        r.register(
            REQUESTS_SHED,
            "Requests refused with RESOURCE_EXHAUSTED to shed load, by reason (inflight_bytes: the request byte budget was full)",
            m.requests_shed.clone(),
        );
        r.register(
            CONNECTIONS,
            "Open connections on the gRPC port, TLS handshakes included, against REBOUND_MAX_CONNECTIONS",
            m.connections.clone(),
        );
        r.register(
            CONNECTIONS_CLOSED,
            "gRPC connections the node closed, by reason (limit: refused at accept, REBOUND_MAX_CONNECTIONS was reached; header_timeout: no complete request headers within REBOUND_REQUEST_HEADER_TIMEOUT_MS)",
            m.connections_closed.clone(),
        );
        r.register(
            TASKS,
            "Tasks the node's components spawned that have not finished yet, by owner (node, ring, server, dispatcher, push, coalescer); a count that only grows is a leak",
            m.tasks.clone(),
        );
        r.register(
            PUSH_REQUESTS,
            "Push requests by service and result (2xx, 3xx, 4xx, 5xx, timeout, error: no response, refused: the address guard)",
            m.push_requests.clone(),
        );
        r.register(
            PUSH_DURATION,
            "Push requests' duration by service, from resolving the host to the response's head",
            m.push_duration.clone(),
        );
        Metrics { registry: r, ..m }
    }

    /// Sets the cap on labelled services (`REBOUND_METRICS_MAX_SERVICES`).
    pub fn set_max_services(&self, cap: usize) {
        self.services.cap.store(cap, Ordering::Relaxed);
    }

    /// The label `service` is counted under: itself, or `_other` past the cap.
    pub fn service(&self, service: &str) -> Arc<str> {
        self.services.label(service)
    }

    /// Every metric in the Prometheus text format 0.0.4 (`CONTENT_TYPE`).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        classic(&out)
    }

    pub fn enqueue(&self, service: &str, result: &'static str, code: &'static str) {
        self.enqueues
            .get_or_create(&EnqueueLabels {
                service: self.service(service),
                result,
                code,
            })
            .inc();
    }

    pub fn delivery(&self, service: &str, redelivery: bool) {
        let kind = if redelivery { "redelivery" } else { "first" };
        self.deliveries
            .get_or_create(&KindLabels {
                service: self.service(service),
                kind,
            })
            .inc();
    }

    pub fn ack(&self, service: &str, outcome: &'static str) {
        self.acks
            .get_or_create(&OutcomeLabels {
                service: self.service(service),
                outcome,
            })
            .inc();
    }

    pub fn held_postponed(&self, service: &str) {
        self.held_postponed
            .get_or_create(&ServiceLabel {
                service: self.service(service),
            })
            .inc();
    }

    pub fn dead_letter(&self, service: &str) {
        self.dead_letters
            .get_or_create(&ServiceLabel {
                service: self.service(service),
            })
            .inc();
    }

    pub fn compensation(&self, service: &str) {
        self.compensations
            .get_or_create(&ServiceLabel {
                service: self.service(service),
            })
            .inc();
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

    pub fn span_dropped(&self, reason: &'static str, n: u64) {
        self.spans_dropped
            .get_or_create(&ReasonLabels { reason })
            .inc_by(n);
    }

    /// One push request of `service` ended with `result` after `seconds`.
    pub fn push(&self, service: &str, result: &'static str, seconds: f64) {
        let service = self.service(service);
        self.push_duration
            .get_or_create(&ServiceLabel {
                service: service.clone(),
            })
            .observe(seconds);
        self.push_requests
            .get_or_create(&PushLabels { service, result })
            .inc();
    }

    pub fn connection_closed(&self, reason: &'static str) {
        self.connections_closed
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_past_the_cap_share_one_label() {
        let m = Metrics::new();
        m.set_max_services(2);
        assert_eq!(&*m.service("a"), "a");
        assert_eq!(&*m.service("b"), "b");
        assert_eq!(&*m.service("c"), OTHER_SERVICE);
        assert_eq!(&*m.service("a"), "a");
        m.enqueue("c", "new", "OK");
        m.enqueue("d", "new", "OK");
        let text = m.encode();
        assert!(
            text.contains(
                "rebound_enqueues_total{service=\"_other\",result=\"new\",code=\"OK\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("# HELP rebound_ring_slots_held "), "{text}");
        assert!(text.contains("# TYPE rebound_ring_slots gauge\n"), "{text}");
        assert!(
            text.contains("# TYPE rebound_enqueues_total counter\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }
}
