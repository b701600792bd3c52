//! The JSON forms of the API's messages (feature `json`), shared by `rebound --json` and the
//! node's dashboard API (`docs/dashboard.md`), so that both give the same shapes:
//!
//! - times are RFC 3339 strings in UTC, `null` when unset; durations are numbers of seconds;
//! - generations and tokens (64-bit) are strings; enums are named (`SCHEDULED`, `DEAD`);
//! - a policy or limits lists every field, `null` when unset.
//!
//! The reverse direction, for request bodies: [`policy_from_json`] and [`limits_from_json`]
//! read what [`policy_json`] and [`limits_json`] write, and [`Fields`] reads any JSON object
//! field by field. They are total: any JSON value is a message or an error naming the field
//! at fault (`FieldError`), never a panic; unknown fields and wrong types are refused.

use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use crate::v1 as pb;

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

pub fn seconds(d: &prost_types::Duration) -> f64 {
    d.seconds as f64 + f64::from(d.nanos) / 1e9
}

pub fn duration_json(d: Option<&prost_types::Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(seconds(d)))
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

pub fn limits_json(l: Option<&pb::ServiceLimits>) -> Value {
    let d = pb::ServiceLimits::default();
    let l = l.unwrap_or(&d);
    json!({
        "max_dispatch_per_second": l.max_dispatch_per_second,
        "dispatch_burst": l.dispatch_burst,
        "max_concurrent": l.max_concurrent,
    })
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

/// Attributes as a JSON object of strings.
fn attributes_json(attributes: &std::collections::HashMap<String, String>) -> Map<String, Value> {
    attributes
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

pub fn retry_json(r: &pb::Retry) -> Value {
    let attributes = attributes_json(&r.attributes);
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
        "dependency": r.dependency,
        "compensations": r.compensations.iter().map(|c| json!({
            "service": c.service,
            "transaction_id": c.transaction_id,
        })).collect::<Vec<_>>(),
        "chain": r.chain.as_ref().map(chain_json),
        "attempts": r.attempts.iter().map(attempt_json).collect::<Vec<_>>(),
        "attempts_dropped": r.attempts_dropped,
    })
}

/// One row of a listing (`ListRetriesResponse.retries`).
pub fn retry_summary_json(r: &pb::RetrySummary) -> Value {
    json!({
        "transaction_id": r.transaction_id,
        "status": status_name(r.status),
        "attempt": r.attempt,
        "due_time": time_json(r.due_time.as_ref()),
        "last_error": r.last_error,
        "dependency": r.dependency,
        "chain_position": r.chain_position,
        "saga_transaction_id": r.saga_transaction_id,
        "enqueue_count": r.enqueue_count,
        "delivery_count": r.delivery_count,
        "attributes": attributes_json(&r.attributes),
        "delivery": r.delivery.as_ref().map(|d| json!({
            "node_id": d.node_id,
            "executor_id": d.executor_id,
            "delivered_at": time_json(d.delivered_at.as_ref()),
            "ack_deadline": time_json(d.ack_deadline.as_ref()),
        })),
    })
}

/// One attempt of a retry's history (`Retry.attempts`).
pub fn attempt_json(a: &pb::Attempt) -> Value {
    json!({
        "attempt": a.attempt,
        "delivered_at": time_json(a.delivered_at.as_ref()),
        "ended_at": time_json(a.ended_at.as_ref()),
        "node_id": a.node_id,
        "executor_id": a.executor_id,
        "outcome": attempt_outcome_name(a.outcome),
        "error": a.error,
        "error_class": a.error_class,
        "retry_after": duration_json(a.retry_after.as_ref()),
        "duration": duration_json(a.duration.as_ref()),
        "deliveries": a.deliveries,
    })
}

/// The name of an `AttemptOutcome` without its prefix: `SUCCEEDED`, `DEADLINE_EXPIRED`, ...
pub fn attempt_outcome_name(v: i32) -> String {
    match pb::AttemptOutcome::try_from(v) {
        Ok(o) => o
            .as_str_name()
            .trim_start_matches("ATTEMPT_OUTCOME_")
            .to_string(),
        Err(_) => format!("UNKNOWN_{v}"),
    }
}

/// Where a compensation chain stands (`Retry.chain`, `DeadLetter.chain`); a compensation not
/// enqueued yet has the status "PENDING".
pub fn chain_json(c: &pb::CompensationChain) -> Value {
    json!({
        "saga_service": c.saga_service,
        "saga_transaction_id": c.saga_transaction_id,
        "position": c.position,
        "compensations": c.compensations.iter().map(|m| json!({
            "service": m.service,
            "transaction_id": m.transaction_id,
            "status": chain_status_name(m.status),
        })).collect::<Vec<_>>(),
    })
}

/// A chain member's status: its retry's, or "PENDING" when it has none yet.
pub fn chain_status_name(status: i32) -> String {
    if status == pb::RetryStatus::Unspecified as i32 {
        "PENDING".to_string()
    } else {
        status_name(status)
    }
}

pub fn delivery_json(d: &pb::Delivery) -> Value {
    let attributes = attributes_json(&d.attributes);
    json!({
        "delivery_id": d.delivery_id,
        "service": d.service,
        "transaction_id": d.transaction_id,
        "attempt": d.attempt,
        "due_time": time_json(d.due_time.as_ref()),
        "first_enqueued_at": time_json(d.first_enqueued_at.as_ref()),
        "ack_deadline": time_json(d.ack_deadline.as_ref()),
        "last_error": d.last_error,
        "payload": std::str::from_utf8(&d.payload).ok(),
        "payload_base64": base64::engine::general_purpose::STANDARD.encode(&d.payload),
        "attributes": attributes,
        "dependency": d.dependency,
    })
}

/// A dependency hold (`DependencyHoldInfo`), as ListDependencyHolds and GetStats give it.
pub fn hold_json(h: &pb::DependencyHoldInfo) -> Value {
    json!({
        "dependency": h.dependency,
        "until": time_json(h.until.as_ref()),
        "reason": h.reason,
        "held_at": time_json(h.held_at.as_ref()),
        "source": h.source,
    })
}

pub fn dead_letter_json(d: &pb::DeadLetter) -> Value {
    json!({
        "service": d.service,
        "transaction_id": d.transaction_id,
        "attempt": d.attempt,
        "last_error": d.last_error,
        "dead_at": time_json(d.dead_at.as_ref()),
        "redriven_at": time_json(d.redriven_at.as_ref()),
        "chain": d.chain.as_ref().map(chain_json),
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

/// `clock_offset_ms`: what the node adds to its own clock to follow the database's (`null`:
/// not measured, or an unreachable node).
pub fn node_stats_json(n: &pb::NodeStats) -> Value {
    json!({
        "node_id": n.node_id,
        "address": n.address,
        "held_slots": n.held_slots,
        "compactor": n.compactor,
        "in_flight": n.in_flight,
        "subscribers": n.subscribers,
        "reachable": n.reachable,
        "clock_offset_ms": n.clock_offset_ms,
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

/// One PurgeService call's answer.
pub fn purge_service_json(r: &pb::PurgeServiceResponse) -> Value {
    json!({
        "cancelled": r.cancelled,
        "buckets_deleted": r.buckets_deleted,
        "buckets_kept": r.buckets_kept,
        "done": r.done,
        "before": time_json(r.before.as_ref()),
    })
}

/// One RedriveDeadLetters call's answer.
pub fn redrive_json(r: &pb::RedriveDeadLettersResponse) -> Value {
    json!({
        "redriven": r.redriven,
        "skipped": r.skipped,
        "done": r.done,
    })
}

/// One ActOnRetries call's answer.
pub fn act_json(r: &pb::ActOnRetriesResponse) -> Value {
    json!({
        "changed": r.changed,
        "skipped": r.skipped,
        "next_page_token": (!r.next_page_token.is_empty()).then_some(&r.next_page_token),
    })
}

// ---- parsing ----------------------------------------------------------------------------------

/// A value that could not be read: the field (relative to the object read, `""` for the value
/// itself) and what is wrong with it.
pub type FieldError = (String, String);

/// `outer.inner`, or whichever of the two is not empty.
pub fn join_field(outer: &str, inner: &str) -> String {
    match (outer.is_empty(), inner.is_empty()) {
        (true, _) => inner.to_string(),
        (_, true) => outer.to_string(),
        _ => format!("{outer}.{inner}"),
    }
}

/// A time in RFC 3339 (`2026-11-30T06:10:00Z`, `2026-11-30T07:10:00+01:00`).
pub fn time_from_text(s: &str) -> Result<prost_types::Timestamp, String> {
    let at = DateTime::parse_from_rfc3339(s.trim())
        .map_err(|e| format!("{s:?} is not an RFC 3339 time such as 2026-11-30T06:10:00Z ({e})"))?
        .with_timezone(&Utc);
    Ok(timestamp_of(at))
}

/// A timestamp of a time; a leap second (`23:59:60`, 1e9 nanoseconds or more) folds into the
/// next second, since it is no valid timestamp.
pub fn timestamp_of(at: DateTime<Utc>) -> prost_types::Timestamp {
    let nanos = at.timestamp_subsec_nanos();
    prost_types::Timestamp {
        seconds: at.timestamp() + i64::from(nanos / 1_000_000_000),
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

/// The longest duration read from a number of seconds (about 31,700 years): far over any
/// limit the node has, and small enough to be exact to the millisecond in an `f64`.
pub const MAX_DURATION_SECONDS: f64 = 1e12;

/// A duration from a number of seconds (`2.5`), to the nearest nanosecond.
pub fn duration_from_seconds(secs: f64) -> Result<prost_types::Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!(
            "must be a non-negative number of seconds, got {secs}"
        ));
    }
    if secs > MAX_DURATION_SECONDS {
        return Err(format!(
            "must be at most {MAX_DURATION_SECONDS} seconds, got {secs}"
        ));
    }
    let whole = secs.trunc();
    let nanos = ((secs - whole) * 1e9).round();
    let (s, n) = if nanos >= 1e9 {
        (whole as i64 + 1, 0)
    } else {
        (whole as i64, nanos as i32)
    };
    Ok(prost_types::Duration {
        seconds: s,
        nanos: n,
    })
}

/// The JSON type of a value, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The fields of one JSON object, read by name and type. Built only when every field of the
/// object is one of the allowed names. A field that is absent or `null` reads as `None`.
#[derive(Debug)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    /// `v` as an object whose fields are all in `allowed`.
    pub fn new(v: &'a Value, allowed: &[&str]) -> Result<Self, FieldError> {
        let Value::Object(map) = v else {
            return Err((
                String::new(),
                format!("must be a JSON object, got {}", kind(v)),
            ));
        };
        if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err((
                unknown.clone(),
                format!("is not a known field (known: {})", allowed.join(", ")),
            ));
        }
        Ok(Fields { map })
    }

    /// The field's value, `None` when absent or `null`.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn typed<T>(
        &self,
        name: &str,
        want: &str,
        f: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, FieldError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => f(v)
                .map(Some)
                .ok_or_else(|| (name.to_string(), format!("must be {want}, got {v}"))),
        }
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, FieldError> {
        self.typed(name, "true or false", Value::as_bool)
    }

    pub fn u32(&self, name: &str) -> Result<Option<u32>, FieldError> {
        self.typed(name, "a whole number between 0 and 4294967295", |v| {
            v.as_u64().and_then(|n| u32::try_from(n).ok())
        })
    }

    pub fn f64(&self, name: &str) -> Result<Option<f64>, FieldError> {
        self.typed(name, "a number", Value::as_f64)
    }

    pub fn str(&self, name: &str) -> Result<Option<&'a str>, FieldError> {
        self.typed(name, "a string", Value::as_str)
    }

    pub fn array(&self, name: &str) -> Result<Option<&'a Vec<Value>>, FieldError> {
        self.typed(name, "an array", Value::as_array)
    }

    pub fn strings(&self, name: &str) -> Result<Vec<String>, FieldError> {
        let Some(items) = self.array(name)? else {
            return Ok(Vec::new());
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    (
                        format!("{name}[{i}]"),
                        format!("must be a string, got {}", kind(v)),
                    )
                })
            })
            .collect()
    }

    /// A number of seconds.
    pub fn duration(&self, name: &str) -> Result<Option<prost_types::Duration>, FieldError> {
        match self.f64(name)? {
            None => Ok(None),
            Some(s) => duration_from_seconds(s)
                .map(Some)
                .map_err(|m| (name.to_string(), m)),
        }
    }

    /// An RFC 3339 string.
    pub fn time(&self, name: &str) -> Result<Option<prost_types::Timestamp>, FieldError> {
        match self.str(name)? {
            None => Ok(None),
            Some(s) => time_from_text(s)
                .map(Some)
                .map_err(|m| (name.to_string(), m)),
        }
    }
}

const POLICY_FIELDS: &[&str] = &[
    "max_attempts",
    "unlimited_attempts",
    "initial_backoff",
    "max_backoff",
    "multiplier",
    "jitter",
    "max_retry_duration",
    "ack_timeout",
    "max_deliveries_per_attempt",
    "non_retryable_error_classes",
];

/// A policy as [`policy_json`] writes it (`null` or absent: unset). Checks the JSON types
/// only; what the values may be is the node's business (it names the field and the limit).
pub fn policy_from_json(v: &Value) -> Result<pb::RetryPolicy, FieldError> {
    let f = Fields::new(v, POLICY_FIELDS)?;
    Ok(pb::RetryPolicy {
        max_attempts: f.u32("max_attempts")?,
        unlimited_attempts: f.bool("unlimited_attempts")?,
        initial_backoff: f.duration("initial_backoff")?,
        max_backoff: f.duration("max_backoff")?,
        multiplier: f.f64("multiplier")?,
        jitter: f.f64("jitter")?,
        max_retry_duration: f.duration("max_retry_duration")?,
        ack_timeout: f.duration("ack_timeout")?,
        max_deliveries_per_attempt: f.u32("max_deliveries_per_attempt")?,
        non_retryable_error_classes: f.strings("non_retryable_error_classes")?,
    })
}

/// Limits as [`limits_json`] writes them (`null` or absent: unlimited).
pub fn limits_from_json(v: &Value) -> Result<pb::ServiceLimits, FieldError> {
    let f = Fields::new(
        v,
        &[
            "max_dispatch_per_second",
            "dispatch_burst",
            "max_concurrent",
        ],
    )?;
    Ok(pb::ServiceLimits {
        max_dispatch_per_second: f.f64("max_dispatch_per_second")?,
        dispatch_burst: f.u32("dispatch_burst")?,
        max_concurrent: f.u32("max_concurrent")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_by_short_name() {
        assert_eq!(status_name(pb::RetryStatus::Scheduled as i32), "SCHEDULED");
        assert_eq!(status_name(pb::RetryStatus::Dead as i32), "DEAD");
        assert_eq!(status_name(99), "UNKNOWN_99");
        assert_eq!(
            attempt_outcome_name(pb::AttemptOutcome::DeadlineExpired as i32),
            "DEADLINE_EXPIRED"
        );
        assert_eq!(attempt_outcome_name(42), "UNKNOWN_42");
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
        assert_eq!(policy_from_json(&v).unwrap(), p);
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
    }

    #[test]
    fn parsers_name_the_field_at_fault() {
        let e = policy_from_json(&json!({"multiplier": "2"})).unwrap_err();
        assert_eq!(e.0, "multiplier");
        assert!(e.1.contains("must be a number"), "{e:?}");
        let e = policy_from_json(&json!({"max_attempt": 3})).unwrap_err();
        assert_eq!(e.0, "max_attempt");
        assert!(e.1.contains("max_attempts"), "{e:?}");
        let e = policy_from_json(&json!({"max_attempts": -1})).unwrap_err();
        assert_eq!(e.0, "max_attempts");
        let e = policy_from_json(&json!({"max_attempts": 4294967296u64})).unwrap_err();
        assert_eq!(e.0, "max_attempts");
        let e = policy_from_json(&json!({"ack_timeout": -1})).unwrap_err();
        assert_eq!(e.0, "ack_timeout");
        let e = policy_from_json(&json!({"non_retryable_error_classes": ["a", 1]})).unwrap_err();
        assert_eq!(e.0, "non_retryable_error_classes[1]");
        let e = policy_from_json(&json!([])).unwrap_err();
        assert_eq!(e.0, "");
        assert_eq!(join_field("policy", &e.0), "policy");
        let e = limits_from_json(&json!({"max_concurrent": 1.5})).unwrap_err();
        assert_eq!(e.0, "max_concurrent");
        assert_eq!(policy_from_json(&json!({})).unwrap(), Default::default());
        assert_eq!(
            limits_from_json(&json!({"dispatch_burst": null, "max_concurrent": 5})).unwrap(),
            pb::ServiceLimits {
                max_concurrent: Some(5),
                ..Default::default()
            }
        );
    }

    #[test]
    fn durations_and_times_parse() {
        let d = duration_from_seconds(1.5).unwrap();
        assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
        let d = duration_from_seconds(0.9999999999).unwrap();
        assert_eq!((d.seconds, d.nanos), (1, 0));
        assert!(duration_from_seconds(-0.5).is_err());
        assert!(duration_from_seconds(1e13).is_err());
        let t = time_from_text("2026-11-30T07:10:00.250+01:00").unwrap();
        assert_eq!((t.seconds, t.nanos), (1_796_019_000, 250_000_000));
        assert_eq!(time_text(&t), "2026-11-30T06:10:00.250Z");
        let t = time_from_text("2016-12-31T23:59:60.5Z").unwrap();
        assert_eq!(t, time_from_text("2017-01-01T00:00:00.5Z").unwrap());
        assert!(time_from_text("yesterday").is_err());
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        /// Any JSON value, nested a few levels, with the policy's field names likely.
        fn any_json() -> impl Strategy<Value = Value> {
            let key = prop_oneof![
                prop::sample::select(POLICY_FIELDS.to_vec()).prop_map(String::from),
                prop::sample::select(vec![
                    "max_dispatch_per_second",
                    "dispatch_burst",
                    "max_concurrent"
                ])
                .prop_map(String::from),
                ".{0,8}",
            ];
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                any::<u64>().prop_map(|n| json!(n)),
                any::<f64>().prop_map(|n| json!(n)),
                (0u32..10, 0u32..1000)
                    .prop_map(|(s, ms)| json!(f64::from(s) + f64::from(ms) / 1000.0)),
                ".{0,12}".prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 32, 6, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(key.clone(), inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn duration() -> impl Strategy<Value = Option<prost_types::Duration>> {
            prop::option::of((0i64..1_000_000, 0i32..1000).prop_map(|(s, ms)| {
                prost_types::Duration {
                    seconds: s,
                    nanos: ms * 1_000_000,
                }
            }))
        }

        fn finite() -> impl Strategy<Value = Option<f64>> {
            prop::option::of(any::<f64>().prop_filter("finite", |f| f.is_finite()))
        }

        prop_compose! {
            fn policy()(
                max_attempts in prop::option::of(any::<u32>()),
                unlimited_attempts in prop::option::of(any::<bool>()),
                initial_backoff in duration(),
                max_backoff in duration(),
                multiplier in finite(),
                jitter in finite(),
                max_retry_duration in duration(),
                ack_timeout in duration(),
                max_deliveries_per_attempt in prop::option::of(any::<u32>()),
                non_retryable_error_classes in prop::collection::vec(".{0,10}", 0..3),
            ) -> pb::RetryPolicy {
                pb::RetryPolicy {
                    max_attempts, unlimited_attempts, initial_backoff, max_backoff, multiplier,
                    jitter, max_retry_duration, ack_timeout, max_deliveries_per_attempt,
                    non_retryable_error_classes,
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn parsers_are_total(v in any_json()) {
                let _ = policy_from_json(&v);
                let _ = limits_from_json(&v);
                if let Value::Object(m) = &v {
                    for inner in m.values() {
                        if let Ok(p) = policy_from_json(inner) {
                            // Whatever reads writes back to something that reads.
                            prop_assert!(policy_from_json(&policy_json(Some(&p))).is_ok());
                        }
                        let _ = limits_from_json(inner);
                    }
                }
            }

            #[test]
            fn policies_round_trip(p in policy()) {
                prop_assert_eq!(policy_from_json(&policy_json(Some(&p))).unwrap(), p);
            }

            #[test]
            fn limits_round_trip(
                max_dispatch_per_second in finite(),
                dispatch_burst in prop::option::of(any::<u32>()),
                max_concurrent in prop::option::of(any::<u32>()),
            ) {
                let l = pb::ServiceLimits { max_dispatch_per_second, dispatch_burst, max_concurrent };
                prop_assert_eq!(limits_from_json(&limits_json(Some(&l))).unwrap(), l);
            }

            #[test]
            fn durations_are_total(secs in any::<f64>()) {
                if let Ok(d) = duration_from_seconds(secs) {
                    prop_assert!((0..1_000_000_000).contains(&d.nanos), "{d:?}");
                    prop_assert!(d.seconds >= 0);
                }
            }

            #[test]
            fn times_are_total(s in "(?s).{0,40}") {
                if let Ok(t) = time_from_text(&s) {
                    prop_assert!((0..1_000_000_000).contains(&t.nanos), "{t:?}");
                }
            }
        }
    }
}
