//! Parsing of durations and times from the command line, and the text forms of the API's
//! messages. The JSON forms live in `rebound_proto::json` (the node's dashboard API gives the
//! same shapes); they are re-exported here.

use std::time::Duration;

use base64::Engine as _;
use chrono::Utc;
pub use rebound_proto::json::{
    dead_letter_json, duration_json, inspect_json, limits_json, node_stats_json, policy_json,
    retry_json, ring_json, service_stats_json, status_name, time_json, time_text,
};
use rebound_proto::v1 as pb;
use serde_json::{json, Value};

// ---- parsing ----------------------------------------------------------------------------------

/// A duration as people write it: `1500ms`, `30s`, `5m`, `1h`, `1h 30m`, `2d`; a bare number
/// is seconds (`0`, `2.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a non-negative number of seconds"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{s:?} is not a duration such as 1500ms, 30s, 5m, 1h ({e})"))
}

/// A time in RFC 3339 (`2026-11-30T06:10:00Z`, `2026-11-30T07:10:00+01:00`), or `now`.
pub fn parse_time(s: &str) -> Result<prost_types::Timestamp, String> {
    if s.trim().eq_ignore_ascii_case("now") {
        return Ok(rebound_proto::json::timestamp_of(Utc::now()));
    }
    rebound_proto::json::time_from_text(s)
}

/// A `--compensation` value: SERVICE=TRANSACTION_ID, split at the first `=` (a service name
/// has none).
pub fn parse_compensation(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((service, tx)) if !service.is_empty() && !tx.is_empty() => {
            Ok((service.to_string(), tx.to_string()))
        }
        _ => Err(format!("expected SERVICE=TRANSACTION_ID, got {s:?}")),
    }
}

/// `key=value` (the value may contain `=`; the key may not be empty).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not key=value")),
    }
}

pub fn duration_to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

// ---- scalar forms -------------------------------------------------------------------------------

/// `-` for an unset time.
pub fn time_cell(t: Option<&prost_types::Timestamp>) -> String {
    t.map_or_else(|| "-".to_string(), time_text)
}

/// `1m 30s`; negative durations, which the API never sends, read as zero.
pub fn duration_text(d: &prost_types::Duration) -> String {
    let std = Duration::try_from(*d).unwrap_or(Duration::ZERO);
    humantime::format_duration(std).to_string()
}

/// Like [`duration_text`], to whole seconds (for ages).
pub fn age_text(d: &prost_types::Duration) -> String {
    let secs = d.seconds.max(0) as u64;
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// The payload as text when it is UTF-8, else as base64 (marked so).
pub fn payload_text(p: &[u8]) -> String {
    match std::str::from_utf8(p) {
        Ok(s) => s.to_string(),
        Err(_) => format!(
            "base64:{}",
            base64::engine::general_purpose::STANDARD.encode(p)
        ),
    }
}

// ---- messages ---------------------------------------------------------------------------------

/// The policy fields in display order, each as text (`None`: unset).
pub fn policy_fields(p: Option<&pb::RetryPolicy>) -> Vec<(&'static str, Option<String>)> {
    let d = pb::RetryPolicy::default();
    let p = p.unwrap_or(&d);
    let dur = |d: &Option<prost_types::Duration>| d.as_ref().map(duration_text);
    vec![
        ("max_attempts", p.max_attempts.map(|n| n.to_string())),
        ("unlimited_attempts", p.unlimited_attempts.map(yes_no)),
        ("initial_backoff", dur(&p.initial_backoff)),
        ("max_backoff", dur(&p.max_backoff)),
        ("multiplier", p.multiplier.map(|m| m.to_string())),
        ("jitter", p.jitter.map(|j| j.to_string())),
        ("max_retry_duration", dur(&p.max_retry_duration)),
        ("ack_timeout", dur(&p.ack_timeout)),
        (
            "max_deliveries_per_attempt",
            p.max_deliveries_per_attempt.map(|n| n.to_string()),
        ),
        (
            "non_retryable_error_classes",
            (!p.non_retryable_error_classes.is_empty())
                .then(|| p.non_retryable_error_classes.join(",")),
        ),
    ]
}

/// The fields that are set, as `name=value ...`; `-` when none is.
pub fn policy_summary(p: Option<&pb::RetryPolicy>) -> String {
    let set: Vec<String> = policy_fields(p)
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(" ")
    }
}

/// `rate=100/s burst=20 concurrent=50`, or `unlimited`.
pub fn limits_summary(l: Option<&pb::ServiceLimits>) -> String {
    let d = pb::ServiceLimits::default();
    let l = l.unwrap_or(&d);
    let mut parts = Vec::new();
    if let Some(r) = l.max_dispatch_per_second {
        parts.push(format!("rate={r}/s"));
    }
    if let Some(b) = l.dispatch_burst {
        parts.push(format!("burst={b}"));
    }
    if let Some(c) = l.max_concurrent {
        parts.push(format!("concurrent={c}"));
    }
    if parts.is_empty() {
        "unlimited".into()
    } else {
        parts.join(" ")
    }
}

/// A push target as JSON (null when there is none): timeout in seconds, headers as an
/// object, secrets and header values as the node answered them (masked).
pub fn push_target_json(t: Option<&pb::PushTarget>) -> Value {
    let Some(t) = t else { return Value::Null };
    let sorted: std::collections::BTreeMap<&String, &String> = t.headers.iter().collect();
    let headers: serde_json::Map<String, Value> = sorted
        .into_iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "url": t.url,
        "timeout": duration_json(t.timeout.as_ref()),
        "headers": headers,
        "signing_secrets": t.signing_secrets,
        "max_concurrent": t.max_concurrent,
        "updated_at": time_json(t.updated_at.as_ref()),
    })
}

/// `rebound_proto::json::service_info_json` with the service's push target
/// (`push_target`, null when it has none).
pub fn service_info_json(s: &pb::ServiceInfo) -> Value {
    let mut v = rebound_proto::json::service_info_json(s);
    if let Value::Object(m) = &mut v {
        m.insert(
            "push_target".into(),
            push_target_json(s.push_target.as_ref()),
        );
    }
    v
}

/// The push target's URL, or `-`.
pub fn push_summary(t: Option<&pb::PushTarget>) -> String {
    t.map_or_else(|| "-".to_string(), |t| t.url.clone())
}

pub fn retry_text(r: &pb::Retry) -> String {
    let attributes = if r.attributes.is_empty() {
        "-".to_string()
    } else {
        let sorted: std::collections::BTreeMap<_, _> = r.attributes.iter().collect();
        sorted
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let location = r.location.as_ref().map_or("-".to_string(), |l| {
        format!(
            "day {} window {} instance {} bucket {}",
            l.day, l.window, l.instance, l.bucket
        )
    });
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    crate::table::key_values(&[
        ("service", r.service.clone()),
        ("transaction_id", r.transaction_id.clone()),
        ("status", status_name(r.status)),
        ("attempt", r.attempt.to_string()),
        ("generation", r.generation.to_string()),
        ("due_time", time_cell(r.due_time.as_ref())),
        ("last_error", or_dash(&r.last_error)),
        ("payload", or_dash(&payload_text(&r.payload))),
        ("attributes", attributes),
        ("policy", policy_summary(r.policy.as_ref())),
        ("first_enqueued_at", time_cell(r.first_enqueued_at.as_ref())),
        ("last_enqueued_at", time_cell(r.last_enqueued_at.as_ref())),
        ("updated_at", time_cell(r.updated_at.as_ref())),
        ("location", location),
        ("enqueue_count", r.enqueue_count.to_string()),
        ("delivery_count", r.delivery_count.to_string()),
        ("dependency", or_dash(&r.dependency)),
        (
            "chain",
            r.chain.as_ref().map_or("-".to_string(), chain_text),
        ),
    ])
}

/// A retry's attempt history as a table, oldest first (`Retry.attempts`), with a line for
/// the attempts dropped between the first and the rest.
pub fn attempts_text(r: &pb::Retry) -> String {
    if r.attempts.is_empty() {
        return "no attempts recorded\n".to_string();
    }
    let mut t = crate::table::Table::new(&[
        "ATTEMPT",
        "OUTCOME",
        "DELIVERED_AT",
        "TOOK",
        "NODE",
        "EXECUTOR",
        "RETRY_AFTER",
        "ERROR",
    ]);
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    for a in &r.attempts {
        let error = match (a.error.is_empty(), a.error_class.is_empty()) {
            (_, true) => or_dash(&a.error),
            (true, false) => format!("[{}]", a.error_class),
            (false, false) => format!("[{}] {}", a.error_class, a.error),
        };
        t.row(vec![
            a.attempt.to_string(),
            rebound_proto::json::attempt_outcome_name(a.outcome),
            time_cell(a.delivered_at.as_ref()),
            a.duration.as_ref().map_or("-".to_string(), duration_text),
            or_dash(&a.node_id),
            or_dash(&a.executor_id),
            a.retry_after
                .as_ref()
                .map_or("-".to_string(), duration_text),
            error,
        ]);
    }
    let mut text = t.render();
    if r.attempts_dropped > 0 {
        text.push_str(&format!(
            "({} attempts between the first and these are not kept)\n",
            r.attempts_dropped
        ));
    }
    text
}

/// A compensation chain on one line: the saga step, this retry's place, and each compensation
/// with its status.
pub fn chain_text(c: &pb::CompensationChain) -> String {
    let steps: Vec<String> = c
        .compensations
        .iter()
        .enumerate()
        .map(|(i, m)| {
            format!(
                "{}. {} {} {}",
                i + 1,
                m.service,
                m.transaction_id,
                rebound_proto::json::chain_status_name(m.status)
            )
        })
        .collect();
    format!(
        "saga {} {}, position {} of {}: {}",
        c.saga_service,
        c.saga_transaction_id,
        c.position,
        c.compensations.len(),
        steps.join("; ")
    )
}

/// The share of the Murmur3 token space the ranges cover, in percent.
pub fn token_share(ranges: &[pb::TokenRange]) -> f64 {
    let width: i128 = ranges
        .iter()
        .map(|t| (i128::from(t.end) - i128::from(t.start) + 1).max(0))
        .sum();
    width as f64 * 100.0 / (1u128 << 64) as f64
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn durations_in_human_units() {
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("-3").is_err());
        assert!(parse_duration("soon").unwrap_err().contains("30s"));
    }

    #[test]
    fn times_in_rfc3339() {
        let t = parse_time("2026-11-30T06:10:00.250Z").unwrap();
        assert_eq!(t.seconds, 1_796_019_000);
        assert_eq!(t.nanos, 250_000_000);
        let t2 = parse_time("2026-11-30T07:10:00.250+01:00").unwrap();
        assert_eq!(t, t2);
        assert_eq!(time_text(&t), "2026-11-30T06:10:00.250Z");
        assert_eq!(
            time_text(&prost_types::Timestamp {
                seconds: 1_796_019_000,
                nanos: 0
            }),
            "2026-11-30T06:10:00Z"
        );
        assert!(parse_time("2026-11-30 06:10").is_err());
        assert!(parse_time("now").is_ok());
    }

    #[test]
    fn key_values_split_at_the_first_equals() {
        assert_eq!(
            parse_key_value("k=a=b").unwrap(),
            ("k".to_string(), "a=b".to_string())
        );
        assert_eq!(parse_key_value("k=").unwrap(), ("k".into(), "".into()));
        assert!(parse_key_value("=v").is_err());
        assert!(parse_key_value("kv").is_err());
    }

    /// The JSON forms are `rebound_proto::json`'s (tested there); the text forms are here.
    #[test]
    fn policy_summary_lists_the_fields_set() {
        let p = pb::RetryPolicy {
            max_attempts: Some(3),
            initial_backoff: Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000,
            }),
            non_retryable_error_classes: vec!["http.400".into()],
            ..Default::default()
        };
        assert_eq!(
            policy_summary(Some(&p)),
            "max_attempts=3 initial_backoff=1s 500ms non_retryable_error_classes=http.400"
        );
        assert_eq!(policy_summary(None), "-");
    }

    #[test]
    fn limits_summary_names_what_is_set() {
        assert_eq!(limits_summary(None), "unlimited");
        let l = pb::ServiceLimits {
            max_dispatch_per_second: Some(100.0),
            dispatch_burst: None,
            max_concurrent: Some(50),
        };
        assert_eq!(limits_summary(Some(&l)), "rate=100/s concurrent=50");
        assert_eq!(limits_json(Some(&l))["dispatch_burst"], Value::Null);
    }

    #[test]
    fn service_json_carries_the_push_target() {
        let mut s = pb::ServiceInfo {
            service: "orders".into(),
            ..Default::default()
        };
        assert_eq!(service_info_json(&s)["push_target"], Value::Null);
        assert_eq!(service_info_json(&s)["service"], "orders");
        assert_eq!(push_summary(None), "-");
        s.push_target = Some(pb::PushTarget {
            url: "https://h.example/".into(),
            signing_secrets: vec!["whsec_…abcd".into()],
            ..Default::default()
        });
        let j = service_info_json(&s);
        assert_eq!(j["push_target"]["url"], "https://h.example/");
        assert_eq!(j["push_target"]["timeout"], Value::Null);
        assert_eq!(j["push_target"]["signing_secrets"][0], "whsec_…abcd");
        assert_eq!(push_summary(s.push_target.as_ref()), "https://h.example/");
    }

    #[test]
    fn retry_text_shows_a_binary_payload_as_base64() {
        let r = pb::Retry {
            service: "orders".into(),
            transaction_id: "o-1".into(),
            status: pb::RetryStatus::Scheduled as i32,
            payload: vec![0xff, 0x00],
            ..Default::default()
        };
        let text = retry_text(&r);
        assert!(text.contains("payload            base64:/wA=\n"), "{text}");
        assert!(text.contains("status             SCHEDULED\n"), "{text}");
    }

    #[test]
    fn whole_token_space_is_a_hundred_percent() {
        let all = [pb::TokenRange {
            start: i64::MIN,
            end: i64::MAX,
        }];
        assert!((token_share(&all) - 100.0).abs() < 1e-9);
        let half = [pb::TokenRange {
            start: i64::MIN,
            end: -1,
        }];
        assert!((token_share(&half) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_leap_second_is_a_valid_timestamp() {
        let t = parse_time("2016-12-31T23:59:60.5Z").unwrap();
        assert_eq!(t, parse_time("2017-01-01T00:00:00.5Z").unwrap());
        assert!((0..1_000_000_000).contains(&t.nanos));
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                "[0-9]{1,25}(\\.[0-9]{0,12})?(ns|us|ms|s|m|h|d|w|M|y)?( [0-9]{1,22}[a-z]{1,3}){0,3}",
                "[+-]?[0-9.eE]{0,30}",
                "[0-9]{4,6}-[0-9]{1,2}-[0-9]{1,2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|[+-][0-9]{2}:[0-9]{2})",
                prop::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn durations_are_total(s in text()) {
                let _ = parse_duration(&s);
            }

            #[test]
            fn durations_round_trip(secs in 0u64..10_000_000_000, millis in 0u32..1000) {
                let d = Duration::new(secs, millis * 1_000_000);
                let text = humantime::format_duration(d).to_string();
                prop_assert_eq!(parse_duration(&text).unwrap(), d);
            }

            #[test]
            fn times_are_total_and_valid(s in text()) {
                if let Ok(t) = parse_time(&s) {
                    prop_assert!((0..1_000_000_000).contains(&t.nanos), "{t:?}");
                }
            }

            #[test]
            fn key_values_are_total(s in text()) {
                if let Ok((k, v)) = parse_key_value(&s) {
                    prop_assert_eq!(format!("{k}={v}"), s);
                }
            }
        }
    }
}
