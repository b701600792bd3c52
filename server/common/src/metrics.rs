//! The process's one metrics registry, served at `/metrics` by the node in the Prometheus
//! text format, and what every crate's metrics share: the service label and its cap, the
//! histogram buckets. Each crate defines its own metrics, their names and help texts in its
//! `metric_definitions` module (this crate's own, the task owners' gauge, is here), and
//! registers them here (the alerts of deploy/prometheus/alerts.yml and docs/operations.md,
//! section 8 "Alerts", use those names).
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
//! The registry is per process: nodes started in one test process share it.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, OnceLock, RwLock,
    },
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Metric, Registry},
};

/// Metric names, without the `_total` suffix the text format adds to counters.
pub mod names {
    pub const TASKS: &str = "rebound_tasks";
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
pub struct OwnerLabels {
    /// The component that spawned the tasks (`tasks::Tasks::new`): `engine`, `ring`,
    /// `server`, `dispatcher`, `push`, `coalescer`.
    pub owner: &'static str,
}

/// A gauge of seconds or another fraction.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Buckets of a duration in seconds, from 1 ms to 10 s.
pub fn seconds_buckets() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// Buckets of a push request's duration in seconds, from 5 ms to a minute.
pub fn push_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// Buckets of a delivery's lateness in seconds, from 100 ms to an hour.
pub fn lateness_buckets() -> Histogram {
    Histogram::new([
        0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    ])
}

/// Buckets of a batch's size in items, from 1 to 1,000.
pub fn batch_buckets() -> Histogram {
    Histogram::new([1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0])
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

/// The registry every crate registers its metrics in, and the service names labelled.
struct Shared {
    registry: Mutex<Registry>,
    services: ServiceNames,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        registry: Mutex::new(Registry::default()),
        services: ServiceNames {
            cap: AtomicUsize::new(DEFAULT_MAX_SERVICES),
            known: RwLock::default(),
            other: OTHER_SERVICE.into(),
        },
    })
}

/// Registers `metric` under `name` with its help text: once per name and process (each
/// crate's `metric_definitions::metrics()` registers its set on its first call).
pub fn register(name: &str, help: &str, metric: impl Metric) {
    shared()
        .registry
        .lock()
        .expect("metrics registry lock")
        .register(name, help, metric);
}

/// Sets the cap on labelled services (`REBOUND_METRICS_MAX_SERVICES`).
pub fn set_max_services(cap: usize) {
    shared().services.cap.store(cap, Ordering::Relaxed);
}

/// The label `service` is counted under: itself, or `_other` past the cap.
pub fn service(service: &str) -> Arc<str> {
    shared().services.label(service)
}

/// Every registered metric in the Prometheus text format 0.0.4 (`CONTENT_TYPE`).
pub fn encode() -> String {
    let mut out = String::with_capacity(16 << 10);
    prometheus_client::encoding::text::encode(
        &mut out,
        &shared().registry.lock().expect("metrics registry lock"),
    )
    .expect("writing to a String cannot fail");
    classic(&out)
}

/// This crate's metrics: the task owners' gauge.
#[derive(Debug)]
pub struct CommonMetrics {
    pub tasks: Family<OwnerLabels, Gauge>,
}

/// This process's metrics of this crate, registered on the first call.
pub fn global() -> &'static CommonMetrics {
    static METRICS: OnceLock<CommonMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let m = CommonMetrics {
            tasks: Family::default(),
        };
        register(
            names::TASKS,
            "Tasks the node's components spawned that have not finished yet, by owner (engine, ring, server, dispatcher, push, coalescer); a count that only grows is a leak",
            m.tasks.clone(),
        );
        m
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn services_past_the_cap_share_one_label_and_counters_read_as_classic_text() {
        let family: Family<ServiceLabel, Counter> = Family::default();
        register("rebound_test_capped", "a test's counter", family.clone());
        register(
            "rebound_test_gauge",
            "a test's gauge",
            Gauge::<i64>::default(),
        );
        set_max_services(3);
        // Other tests of this process may have labelled services: fill up to the cap first.
        let a = service("cap-test-a");
        let b = service("cap-test-b");
        let c = service("cap-test-c");
        let d = service("cap-test-d");
        assert!(
            [&a, &b, &c, &d].iter().any(|s| &***s == OTHER_SERVICE),
            "past the cap of 3, a fourth name is counted under {OTHER_SERVICE}"
        );
        family
            .get_or_create(&ServiceLabel {
                service: service("cap-test-e"),
            })
            .inc();
        family
            .get_or_create(&ServiceLabel {
                service: service("cap-test-f"),
            })
            .inc();
        let text = encode();
        assert!(
            text.contains("rebound_test_capped_total{service=\"_other\"} 2"),
            "{text}"
        );
        assert!(text.contains("# HELP rebound_test_gauge "), "{text}");
        assert!(text.contains("# TYPE rebound_test_gauge gauge\n"), "{text}");
        assert!(
            text.contains("# TYPE rebound_test_capped_total counter\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }
}
