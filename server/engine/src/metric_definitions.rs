//! Every metric the engine exports, with its name and help text: enqueues, deliveries and
//! acks, dead letters and compensations, holds, the backlog, lateness, the lease ring, the
//! clock offset, subscribers and pushes.
//! They are registered in the process's one registry (`rebound_common::metrics`) the first
//! time `metrics()` is called; the node calls it at start, so a scrape lists them all.

use std::sync::{Arc, OnceLock};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
};
use rebound_common::metrics::{
    self as registry, lateness_buckets, push_buckets, FloatGauge, ServiceLabel,
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
    pub const RING_SLOTS: &str = "rebound_ring_slots_held";
    pub const RING_SIZE: &str = "rebound_ring_slots";
    pub const COMPACTOR: &str = "rebound_compactor";
    pub const CLOCK_OFFSET: &str = "rebound_clock_offset_seconds";
    pub const SUBSCRIBERS: &str = "rebound_subscribers";
    pub const PUSH_REQUESTS: &str = "rebound_push_requests";
    pub const PUSH_DURATION: &str = "rebound_push_request_duration_seconds";
    pub const TIMER_ENTRIES: &str = "rebound_timer_entries";
    pub const TIMER_BYTES: &str = "rebound_timer_bytes";
    pub const TIMER_OUTCOMES: &str = "rebound_timer_entries_done";
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimerLabels {
    /// `delivered` (from memory), `resolved` (stale or gated when it fired), `left` (to the
    /// window scan: its lease, stream, pause, an older day, a failed read, or too late),
    /// `refused` (not armed: full, beyond the horizon, or its lane's range not held).
    pub outcome: &'static str,
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
pub struct PushLabels {
    pub service: Arc<str>,
    /// `2xx`, `3xx`, `4xx`, `5xx`, `timeout`, `error`, `refused`.
    pub result: &'static str,
}

/// The engine's metrics (one set per process).
#[derive(Debug)]
pub struct EngineMetrics {
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
    pub ring_slots: Gauge,
    pub ring_size: Gauge,
    pub compactor: Gauge,
    pub clock_offset: FloatGauge,
    pub subscribers: Family<ServiceLabel, Gauge>,
    pub timer_entries: Gauge,
    pub timer_bytes: Gauge,
    pub timer_outcomes: Family<TimerLabels, Counter>,
    pub push_requests: Family<PushLabels, Counter>,
    pub push_duration: Family<ServiceLabel, Histogram, fn() -> Histogram>,
}

/// This process's metrics of the engine, registered on the first call.
pub fn metrics() -> &'static EngineMetrics {
    static METRICS: OnceLock<EngineMetrics> = OnceLock::new();
    METRICS.get_or_init(EngineMetrics::register)
}

impl EngineMetrics {
    fn register() -> Self {
        use names::*;
        let m = EngineMetrics {
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
            ring_slots: Gauge::default(),
            ring_size: Gauge::default(),
            compactor: Gauge::default(),
            clock_offset: FloatGauge::default(),
            subscribers: Family::default(),
            timer_entries: Gauge::default(),
            timer_bytes: Gauge::default(),
            timer_outcomes: Family::default(),
            push_requests: Family::default(),
            push_duration: Family::new_with_constructor(push_buckets),
        };
        registry::register(
            ENQUEUES,
            "EnqueueRetry items by service and result (new, deduplicated, refused) and gRPC code",
            m.enqueues.clone(),
        );
        registry::register(
            TIMER_ENTRIES,
            "Retries this node's timer holds to deliver from memory at their due time",
            m.timer_entries.clone(),
        );
        registry::register(
            TIMER_BYTES,
            "Bytes the timer's entries are counted as (REBOUND_TIMER_MAX_BYTES bounds them)",
            m.timer_bytes.clone(),
        );
        registry::register(TIMER_OUTCOMES, "Timer entries by what became of them: delivered (from memory), resolved (stale or gated when they fired), left (to the window scan), refused (not armed: full, beyond the horizon, or not this node's range)", m.timer_outcomes.clone());
        registry::register(DELIVERIES, "Deliveries sent to executors by service and kind (first delivery of an attempt, or redelivery)", m.deliveries.clone());
        registry::register(ACKS, "Acks by service and outcome (succeeded, retry, failed, snoozed, dead_lettered, refused)", m.acks.clone());
        registry::register(
            DEAD_LETTERS,
            "Retries dead-lettered by service",
            m.dead_letters.clone(),
        );
        registry::register(COMPENSATIONS, "Compensations handed on to their service's retries (the first of a saga step that ended DEAD, or the next after one acknowledged SUCCEEDED), by the compensation's service", m.compensations.clone());
        registry::register(HELD_POSTPONED, "Retries postponed because the dependency they name is held, by service (no attempt used)", m.held_postponed.clone());
        registry::register(DEPENDENCY_HOLDS, "Dependency holds in force, as this node last read them (ListDependencyHolds names them)", m.dependency_holds.clone());
        registry::register(
            IN_FLIGHT,
            "Deliveries of this node awaiting an ack, by service",
            m.in_flight.clone(),
        );
        registry::register(PENDING, "Scheduled retries by service and due band, cluster-wide, as last measured by the compactor node (other nodes export none)", m.pending.clone());
        registry::register(OLDEST_OVERDUE, "Age of the oldest overdue window that still holds retries, by service (compactor node only)", m.oldest_overdue.clone());
        registry::register(
            BACKLOG_MEASURED,
            "When rebound_pending was last measured (Unix seconds; 0: never on this node)",
            m.backlog_measured.clone(),
        );
        registry::register(DELIVERY_LATENESS, "Delivery time minus due time, seconds, of every delivery (a redelivery counts from the same due time)", m.delivery_lateness.clone());
        registry::register(
            RING_SLOTS,
            "Ring slots this node holds a lease on",
            m.ring_slots.clone(),
        );
        registry::register(RING_SIZE, "Slots in the lease ring (REBOUND_SLOTS), the most rebound_ring_slots_held can add up to across the nodes; 0 on a node without the lease ring", m.ring_size.clone());
        registry::register(
            COMPACTOR,
            "1 when this node holds the compactor role (Node-0), else 0",
            m.compactor.clone(),
        );
        registry::register(
            CLOCK_OFFSET,
            "Offset applied to this node's clock to follow the database's, seconds",
            m.clock_offset.clone(),
        );
        registry::register(
            SUBSCRIBERS,
            "Open Subscribe streams on this node, by service",
            m.subscribers.clone(),
        );
        registry::register(PUSH_REQUESTS, "Push requests by service and result (2xx, 3xx, 4xx, 5xx, timeout, error: no response, refused: the address guard)", m.push_requests.clone());
        registry::register(
            PUSH_DURATION,
            "Push requests' duration by service, from resolving the host to the response's head",
            m.push_duration.clone(),
        );
        m
    }

    pub fn enqueue(&self, service: &str, result: &'static str, code: &'static str) {
        self.enqueues
            .get_or_create(&EnqueueLabels {
                service: registry::service(service),
                result,
                code,
            })
            .inc();
    }

    pub fn delivery(&self, service: &str, redelivery: bool) {
        let kind = if redelivery { "redelivery" } else { "first" };
        self.deliveries
            .get_or_create(&KindLabels {
                service: registry::service(service),
                kind,
            })
            .inc();
    }

    pub fn ack(&self, service: &str, outcome: &'static str) {
        self.acks
            .get_or_create(&OutcomeLabels {
                service: registry::service(service),
                outcome,
            })
            .inc();
    }

    /// Counts `n` timer entries that ended `outcome` (see `TimerLabels`).
    pub fn timer(&self, outcome: &'static str, n: u64) {
        self.timer_outcomes
            .get_or_create(&TimerLabels { outcome })
            .inc_by(n);
    }

    pub fn held_postponed(&self, service: &str) {
        self.held_postponed
            .get_or_create(&ServiceLabel {
                service: registry::service(service),
            })
            .inc();
    }

    pub fn dead_letter(&self, service: &str) {
        self.dead_letters
            .get_or_create(&ServiceLabel {
                service: registry::service(service),
            })
            .inc();
    }

    pub fn compensation(&self, service: &str) {
        self.compensations
            .get_or_create(&ServiceLabel {
                service: registry::service(service),
            })
            .inc();
    }

    /// One push request of `service` ended with `result` after `seconds`.
    pub fn push(&self, service: &str, result: &'static str, seconds: f64) {
        let service = registry::service(service);
        self.push_duration
            .get_or_create(&ServiceLabel {
                service: service.clone(),
            })
            .observe(seconds);
        self.push_requests
            .get_or_create(&PushLabels { service, result })
            .inc();
    }
}
