//! `/api/v1/live`: this process's own counters since it started, per service, and the delivery
//! lateness histogram. The page polls it and turns differences into rates; it never walks the
//! directory.
//!
//! Design: prometheus-client has no public iteration over a `Family`'s label sets, so the
//! counters are read the way Prometheus reads them: a small registry of its own holds clones
//! of the five metrics the page shows (a `Family` or `Histogram` clone shares its samples),
//! is encoded in the text format, and [`parse_samples`] sums the samples per service. The
//! alternative, atomic counters kept beside the metrics, would add work to every enqueue,
//! delivery and ack and a second set of numbers to keep in step with `/metrics`; this way
//! the page shows exactly what `/metrics` does, and the cost (encoding five families) is paid
//! only when the page asks.
//!
//! What is counted (`metrics.rs` names): `enqueued` = accepted enqueue items
//! (`rebound_enqueues_total` with `result` `new` or `deduplicated`), `delivered` = every
//! delivery, first or redelivery (`rebound_deliveries_total`), `acked` = every ack whatever
//! its outcome (`rebound_acks_total`), `dead_lettered` = `rebound_dead_letters_total`;
//! `in_flight` and `subscribers` are this node's deliveries awaiting an ack and open
//! Subscribe streams (`Hub::stats`). Services past `REBOUND_METRICS_MAX_SERVICES` are counted
//! under `_other`, as in `/metrics`. The registry is per process, so nodes started in one
//! test process share these counters.

use std::{
    collections::{BTreeMap, HashMap},
    sync::OnceLock,
};

use prometheus_client::registry::Registry;
use serde_json::{json, Value};

use rebound_engine::metric_definitions as metrics;

/// One sample of the text format: its name, its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of a Prometheus / OpenMetrics text; lines that are comments, or that do not
/// read as `name{labels} value`, are skipped. Total: any text gives some list.
pub fn parse_samples(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"}` and what follows the closing brace. Values may hold `\\`, `\"`, `\n`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(tail) = s.strip_prefix('}') {
            return Some((labels, tail));
        }
        let (key, after) = s.split_once('=')?;
        let after = after.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        s = &after[end + 1..];
    }
}

/// The registry of the counters the page shows (clones share the global metrics' samples).
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let m = metrics::metrics();
        let mut r = Registry::default();
        r.register("enqueues", "", m.enqueues.clone());
        r.register("deliveries", "", m.deliveries.clone());
        r.register("acks", "", m.acks.clone());
        r.register("dead_letters", "", m.dead_letters.clone());
        r.register("lateness", "", m.delivery_lateness.clone());
        r
    })
}

/// One service's counters.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    pub enqueued: u64,
    pub delivered: u64,
    pub acked: u64,
    pub dead_lettered: u64,
    pub in_flight: u64,
    pub subscribers: u64,
}

/// The lateness histogram: count, sum, and cumulative buckets by upper bound.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Lateness {
    pub count: u64,
    pub sum_seconds: f64,
    pub buckets: Vec<(f64, u64)>,
}

/// Sums the samples of [`registry`]'s text per service.
pub fn summarize(samples: &[Sample]) -> (BTreeMap<String, Counts>, Lateness) {
    let mut per: BTreeMap<String, Counts> = BTreeMap::new();
    let mut lateness = Lateness::default();
    for s in samples {
        let n = if s.value.is_finite() && s.value > 0.0 {
            s.value as u64
        } else {
            0
        };
        let service = || s.label("service").unwrap_or("").to_string();
        match s.name.as_str() {
            "enqueues_total" if s.label("result") != Some("refused") => {
                per.entry(service()).or_default().enqueued += n;
            }
            "enqueues_total" => {
                per.entry(service()).or_default();
            }
            "deliveries_total" => per.entry(service()).or_default().delivered += n,
            "acks_total" => per.entry(service()).or_default().acked += n,
            "dead_letters_total" => per.entry(service()).or_default().dead_lettered += n,
            "lateness_count" => lateness.count = n,
            "lateness_sum" => lateness.sum_seconds = s.value,
            "lateness_bucket" => {
                let le = match s.label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => match v.parse() {
                        Ok(v) => v,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                lateness.buckets.push((le, n));
            }
            _ => {}
        }
    }
    lateness.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    (per, lateness)
}

/// The counters of every service `visible` accepts, with this node's in-flight deliveries
/// and subscribers (`hub`, from `Hub::stats`), and the lateness histogram, as JSON.
pub fn snapshot(hub: HashMap<String, (u64, u32)>, visible: impl Fn(&str) -> bool) -> Value {
    let mut text = String::new();
    // Encoding into a String cannot fail; should it, the page shows zeros.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry());
    let (mut per, lateness) = summarize(&parse_samples(&text));
    for (service, (in_flight, subscribers)) in hub {
        let c = per.entry(service).or_default();
        c.in_flight += in_flight;
        c.subscribers += u64::from(subscribers);
    }
    let services: Vec<Value> = per
        .into_iter()
        .filter(|(s, _)| !s.is_empty() && visible(s))
        .map(|(service, c)| {
            json!({
                "service": service,
                "enqueued": c.enqueued,
                "delivered": c.delivered,
                "acked": c.acked,
                "dead_lettered": c.dead_lettered,
                "in_flight": c.in_flight,
                "subscribers": c.subscribers,
            })
        })
        .collect();
    let buckets: Vec<Value> = lateness
        .buckets
        .iter()
        .map(|(le, n)| {
            let le = if le.is_finite() {
                json!(le)
            } else {
                json!("+Inf")
            };
            json!({"le": le, "count": n})
        })
        .collect();
    json!({
        "services": services,
        "lateness": {
            "count": lateness.count,
            "sum_seconds": lateness.sum_seconds,
            "buckets": buckets,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_summed_per_service() {
        let text = r#"# HELP enqueues .
# TYPE enqueues counter
enqueues_total{service="a",result="new",code="OK"} 3
enqueues_total{service="a",result="deduplicated",code="OK"} 2
enqueues_total{service="a",result="refused",code="INVALID_ARGUMENT"} 7
enqueues_total{service="b \"q\" \\ x",result="refused",code="NOT_FOUND"} 1
deliveries_total{service="a",kind="first"} 4
deliveries_total{service="a",kind="redelivery"} 1
acks_total{service="a",outcome="succeeded"} 3
acks_total{service="a",outcome="retry"} 1
dead_letters_total{service="a"} 1
lateness_sum 1.5
lateness_count 5
lateness_bucket{le="0.1"} 1
lateness_bucket{le="+Inf"} 5
lateness_bucket{le="1.0"} 4
# EOF
"#;
        let (per, lat) = summarize(&parse_samples(text));
        assert_eq!(
            per["a"],
            Counts {
                enqueued: 5,
                delivered: 5,
                acked: 4,
                dead_lettered: 1,
                ..Default::default()
            }
        );
        assert_eq!(per[r#"b "q" \ x"#], Counts::default());
        assert_eq!(lat.count, 5);
        assert_eq!(lat.sum_seconds, 1.5);
        assert_eq!(lat.buckets, vec![(0.1, 1), (1.0, 4), (f64::INFINITY, 5)]);
    }

    #[test]
    fn the_registry_reads_the_global_counters() {
        let m = metrics::metrics();
        m.enqueue("live-test-svc", "new", "OK");
        m.delivery("live-test-svc", false);
        m.ack("live-test-svc", "succeeded");
        let v = snapshot(
            HashMap::from([("live-test-svc".to_string(), (2, 1))]),
            |s| s == "live-test-svc",
        );
        let s = &v["services"][0];
        assert_eq!(s["service"], "live-test-svc");
        assert!(s["enqueued"].as_u64().unwrap() >= 1, "{v}");
        assert!(s["delivered"].as_u64().unwrap() >= 1, "{v}");
        assert_eq!(s["in_flight"], 2);
        assert_eq!(s["subscribers"], 1);
        assert_eq!(v["services"].as_array().unwrap().len(), 1);
        assert!(v["lateness"]["buckets"].as_array().unwrap().len() > 3);
    }

    proptest::proptest! {
        #[test]
        fn parsing_is_total(text in "(?s).{0,200}") {
            let _ = summarize(&parse_samples(&text));
        }

        #[test]
        fn parsing_is_total_on_sample_like_lines(
            text in "([a-z_]{1,8}(\\{([a-z]{1,3}=\"[a-z\\\\\"]{0,4}\",?){0,3}\\}?)? ?[0-9.+Inf-]{0,5}\n){0,6}"
        ) {
            let _ = summarize(&parse_samples(&text));
        }
    }
}
