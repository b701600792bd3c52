//! Parsing of durations and times from the command line, and the JSON and text forms of the
//! API's messages.

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use rebound_proto::v1 as pb;
use serde_json::{json, Map, Value};

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
    let t = s.trim();
    let at: DateTime<Utc> = if t.eq_ignore_ascii_case("now") {
        Utc::now()
    } else {
        DateTime::parse_from_rfc3339(t)
            .map_err(|e| {
                format!("{s:?} is not an RFC 3339 time such as 2026-11-30T06:10:00Z ({e})")
            })?
            .with_timezone(&Utc)
    };
    // A leap second (`23:59:60`) reads as 1e9 nanoseconds or more, which is no valid
    // timestamp: fold it into the next second.
    let nanos = at.timestamp_subsec_nanos();
    Ok(prost_types::Timestamp {
        seconds: at.timestamp() + i64::from(nanos / 1_000_000_000),
        nanos: (nanos % 1_000_000_000) as i32,
    })
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

/// RFC 3339 in UTC, with as many fraction digits as needed.
pub fn time_text(t: &prost_types::Timestamp) -> String {
    match DateTime::<Utc>::from_timestamp(t.seconds, t.nanos.clamp(0, 999_999_999) as u32) {
        Some(at) => at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        None => format!("{}s {}ns since the epoch", t.seconds, t.nanos),
    }
}

pub fn time_json(t: Option<&prost_types::Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(time_text(t)))
}

/// `-` for an unset time.
pub fn time_cell(t: Option<&prost_types::Timestamp>) -> String {
    t.map_or_else(|| "-".to_string(), time_text)
}

pub fn seconds(d: &prost_types::Duration) -> f64 {
    d.seconds as f64 + f64::from(d.nanos) / 1e9
}

pub fn duration_json(d: Option<&prost_types::Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(seconds(d)))
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

/// The name of a `RetryStatus` without its prefix: `SCHEDULED`, `DEAD`, ...
pub fn status_name(v: i32) -> String {
    match pb::RetryStatus::try_from(v) {
        Ok(s) => s
            .as_str_name()
            .trim_start_matches("RETRY_STATUS_")
            .to_string(),
        Err(_) => format!("UNKNOWN_{v}"),
    }
}

/// The payload as text when it is UTF-8, else as base64 (marked so).
fn payload_text(p: &[u8]) -> String {
    match std::str::from_utf8(p) {
        Ok(s) => s.to_string(),
        Err(_) => format!(
            "base64:{}",
            base64::engine::general_purpose::STANDARD.encode(p)
        ),
    }
}

// ---- messages ---------------------------------------------------------------------------------

/// Every policy field, `null` when unset (for a stored policy: left to the node default).
pub fn policy_json(p: Option<&pb::RetryPolicy>) -> Value {
    let d = pb::RetryPolicy::default();
    let p = p.unwrap_or(&d);
    json!({
        "max_attempts": p.max_attempts,
        "unlimited_attempts": p.unlimited_attempts,
        "initial_backoff": duration_json(p.initial_backoff.as_ref()),
        "max_backoff": duration_json(p.max_backoff.as_ref()),
        "multiplier": p.multiplier,
        "jitter": p.jitter,
        "max_retry_duration": duration_json(p.max_retry_duration.as_ref()),
        "ack_timeout": duration_json(p.ack_timeout.as_ref()),
        "max_deliveries_per_attempt": p.max_deliveries_per_attempt,
        "non_retryable_error_classes": p.non_retryable_error_classes,
    })
}

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

pub fn limits_json(l: Option<&pb::ServiceLimits>) -> Value {
    let d = pb::ServiceLimits::default();
    let l = l.unwrap_or(&d);
    json!({
        "max_dispatch_per_second": l.max_dispatch_per_second,
        "dispatch_burst": l.dispatch_burst,
        "max_concurrent": l.max_concurrent,
    })
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

pub fn service_info_json(s: &pb::ServiceInfo) -> Value {
    json!({
        "service": s.service,
        "paused": s.paused,
        "paused_at": time_json(s.paused_at.as_ref()),
        "updated_at": time_json(s.updated_at.as_ref()),
        "policy": policy_json(s.policy.as_ref()),
        "effective_policy": policy_json(s.effective_policy.as_ref()),
        "limits": limits_json(s.limits.as_ref()),
    })
}

pub fn retry_json(r: &pb::Retry) -> Value {
    let attributes: Map<String, Value> = r
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "service": r.service,
        "transaction_id": r.transaction_id,
        "status": status_name(r.status),
        "attempt": r.attempt,
        "generation": r.generation.to_string(),
        "due_time": time_json(r.due_time.as_ref()),
        "last_error": r.last_error,
        "payload": std::str::from_utf8(&r.payload).ok(),
        "payload_base64": base64::engine::general_purpose::STANDARD.encode(&r.payload),
        "attributes": attributes,
        "policy": policy_json(r.policy.as_ref()),
        "first_enqueued_at": time_json(r.first_enqueued_at.as_ref()),
        "last_enqueued_at": time_json(r.last_enqueued_at.as_ref()),
        "updated_at": time_json(r.updated_at.as_ref()),
        "location": r.location.as_ref().map(|l| json!({
            "day": l.day,
            "window": l.window,
            "instance": l.instance,
            "bucket": l.bucket,
        })),
        "enqueue_count": r.enqueue_count,
        "delivery_count": r.delivery_count,
    })
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
    ])
}

pub fn dead_letter_json(d: &pb::DeadLetter) -> Value {
    json!({
        "service": d.service,
        "transaction_id": d.transaction_id,
        "attempt": d.attempt,
        "last_error": d.last_error,
        "dead_at": time_json(d.dead_at.as_ref()),
        "redriven_at": time_json(d.redriven_at.as_ref()),
    })
}

pub fn bands_json(b: Option<&pb::DueBands>) -> Value {
    let d = pb::DueBands::default();
    let b = b.unwrap_or(&d);
    json!({
        "overdue": b.overdue,
        "within_minute": b.within_minute,
        "within_hour": b.within_hour,
        "within_day": b.within_day,
        "later": b.later,
    })
}

pub fn service_stats_json(s: &pb::ServiceStats) -> Value {
    json!({
        "service": s.service,
        "pending": s.pending,
        "bands": bands_json(s.bands.as_ref()),
        "in_flight": s.in_flight,
        "dead_lettered": s.dead_lettered,
        "oldest_due_age": duration_json(s.oldest_due_age.as_ref()),
        "paused": s.paused,
        "windows": s.windows.iter().map(|w| json!({
            "day": w.day,
            "window": w.window,
            "pending": w.pending,
            "window_start": time_json(w.window_start.as_ref()),
        })).collect::<Vec<_>>(),
    })
}

pub fn node_stats_json(n: &pb::NodeStats) -> Value {
    json!({
        "node_id": n.node_id,
        "address": n.address,
        "held_slots": n.held_slots,
        "compactor": n.compactor,
        "in_flight": n.in_flight,
        "subscribers": n.subscribers,
        "reachable": n.reachable,
    })
}

pub fn ring_json(r: &pb::Ring) -> Value {
    json!({
        "nodes": r.nodes.iter().map(|n| json!({
            "node_id": n.node_id,
            "address": n.address,
            "compactor": n.compactor,
            "ranges": n.ranges.iter().map(|t| json!({
                "start": t.start.to_string(),
                "end": t.end.to_string(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// The share of the Murmur3 token space the ranges cover, in percent.
pub fn token_share(ranges: &[pb::TokenRange]) -> f64 {
    let width: i128 = ranges
        .iter()
        .map(|t| (i128::from(t.end) - i128::from(t.start) + 1).max(0))
        .sum();
    width as f64 * 100.0 / (1u128 << 64) as f64
}

pub fn inspect_json(day: &str, window: u32, w: &pb::InspectWindowResponse) -> Value {
    json!({
        "day": day,
        "window": window,
        "window_start": time_json(w.window_start.as_ref()),
        "window_end": time_json(w.window_end.as_ref()),
        "window_seconds": w.window_seconds,
        "readable": w.readable,
        "day_listed": w.day_listed,
        "window_listed": w.window_listed,
        "low_water": w.low_water,
        "instances": w.instances.iter().map(|i| json!({
            "instance_token": i.instance_token.to_string(),
            "service": i.service,
            "instance": i.instance,
            "buckets": i.buckets.iter().map(|b| json!({
                "bucket": b.bucket,
                "pointers": b.pointers,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn enums_by_short_name() {
        assert_eq!(status_name(pb::RetryStatus::Scheduled as i32), "SCHEDULED");
        assert_eq!(status_name(pb::RetryStatus::Dead as i32), "DEAD");
        assert_eq!(status_name(99), "UNKNOWN_99");
    }

    #[test]
    fn policy_json_marks_unset_fields_null() {
        let p = pb::RetryPolicy {
            max_attempts: Some(3),
            initial_backoff: Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000,
            }),
            non_retryable_error_classes: vec!["http.400".into()],
            ..Default::default()
        };
        let v = policy_json(Some(&p));
        assert_eq!(v["max_attempts"], 3);
        assert_eq!(v["initial_backoff"], 1.5);
        assert_eq!(v["jitter"], Value::Null);
        assert_eq!(v["unlimited_attempts"], Value::Null);
        assert_eq!(v["non_retryable_error_classes"], json!(["http.400"]));
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
    fn retry_json_uses_strings_for_generations_and_names_for_enums() {
        let r = pb::Retry {
            service: "orders".into(),
            transaction_id: "o-1".into(),
            status: pb::RetryStatus::Scheduled as i32,
            generation: 1_883_262_387_684_989_316,
            payload: vec![0xff, 0x00],
            due_time: Some(prost_types::Timestamp {
                seconds: 1_796_019_060,
                nanos: 0,
            }),
            ..Default::default()
        };
        let v = retry_json(&r);
        assert_eq!(v["status"], "SCHEDULED");
        assert_eq!(v["generation"], "1883262387684989316");
        assert_eq!(v["due_time"], "2026-11-30T06:11:00Z");
        assert_eq!(v["payload"], Value::Null);
        assert_eq!(v["payload_base64"], "/wA=");
        assert_eq!(v["location"], Value::Null);
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
