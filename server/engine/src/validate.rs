//! Request validation: every rule runs before anything is written, and every refusal names the
//! field and the limit (`validate_tests.rs` and integration-tests/tests/enqueue_bad_input.rs
//! hold it to that).

use std::time::Duration;

use rebound_proto::v1 as pb;

pub use crate::names::MAX_SERVICE_LEN;
use crate::policy::PolicyOverrides;
use crate::{error::Error, names::show, outcome::AttemptOutcome};

pub const MAX_TRANSACTION_ID_BYTES: usize = 256;
pub const MAX_ATTRIBUTES: usize = 64;
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 128;
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 4096;
pub const MAX_LAST_ERROR_BYTES: usize = 8192;
pub const MAX_DELIVERY_ID_BYTES: usize = 128;
pub const MAX_EXECUTOR_ID_BYTES: usize = 128;
/// Most deliveries one stream may hold unacknowledged.
pub const MAX_IN_FLIGHT: u32 = 10_000;
/// Longest single deadline extension.
pub const MAX_EXTENSION: Duration = Duration::from_secs(12 * 3600);

pub fn service(field: &str, v: &str) -> Result<(), Error> {
    match crate::names::service_problem(v) {
        None => Ok(()),
        Some(message) => Err(Error::invalid(field, message)),
    }
}

/// A dependency name (`EnqueueRetryRequest.dependency`, holds).
pub fn dependency(field: &str, v: &str) -> Result<(), Error> {
    match crate::names::dependency_problem(v) {
        None => Ok(()),
        Some(message) => Err(Error::invalid(field, message)),
    }
}

pub fn transaction_id(field: &str, v: &str) -> Result<(), Error> {
    if v.is_empty() {
        return Err(Error::invalid(field, "is required"));
    }
    if v.len() > MAX_TRANSACTION_ID_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "must be at most {MAX_TRANSACTION_ID_BYTES} bytes, got {}",
                v.len()
            ),
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(())
}

/// A delivery id as the node issues them (`dispatch::hub::delivery_id_text`): 1 to 128 bytes.
/// Its parts are never read back; an id the node did not issue is simply not in flight.
pub fn delivery_id(field: &str, id: &str) -> Result<(), Error> {
    if !delivery_id_ok(id) {
        return Err(Error::invalid(
            field,
            format!("must be the 1-{MAX_DELIVERY_ID_BYTES} byte id of a delivery"),
        ));
    }
    Ok(())
}

fn delivery_id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_DELIVERY_ID_BYTES
}

/// The optional name an executor gives itself in `Subscribe` (logged only).
pub fn executor_id(field: &str, v: &str) -> Result<(), Error> {
    if v.len() > MAX_EXECUTOR_ID_BYTES || v.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_EXECUTOR_ID_BYTES} bytes with no control characters"),
        ));
    }
    Ok(())
}

/// A UTC day as `YYYY-MM-DD` (InspectWindow), as days since 1970-01-01.
pub fn day(field: &str, v: &str) -> Result<i32, Error> {
    chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .map(rebound_store::window::date_to_day)
        .map_err(|_| {
            Error::invalid(
                field,
                format!("must be a UTC day as YYYY-MM-DD, got {}", show(v)),
            )
        })
}

/// The `extension` of ExtendDeadline: required, 1ms to `MAX_EXTENSION`.
pub fn extension(field: &str, d: Option<&prost_types::Duration>) -> Result<Duration, Error> {
    let d = d.ok_or_else(|| Error::invalid(field, "is required"))?;
    let ext = duration(field, d)?;
    let max = MAX_EXTENSION;
    if ext.is_zero() || ext > max {
        return Err(Error::invalid(
            field,
            format!("must be between 1ms and {}s", max.as_secs()),
        ));
    }
    Ok(ext)
}

pub fn duration(field: &str, d: &prost_types::Duration) -> Result<Duration, Error> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(Error::invalid(
            field,
            format!(
                "must be a non-negative duration, got {}s {}ns",
                d.seconds, d.nanos
            ),
        ));
    }
    Ok(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// A count a request may leave unset (0): `default` then, else 1 to `max`.
pub fn count(field: &str, n: u32, default: u32, max: u32) -> Result<u32, Error> {
    match n {
        0 => Ok(default),
        n if n <= max => Ok(n),
        n => Err(Error::invalid(
            field,
            format!("must be between 1 and {max}, got {n}"),
        )),
    }
}

pub fn timestamp_ms(field: &str, t: &prost_types::Timestamp) -> Result<i64, Error> {
    // 0001-01-01 .. 9999-12-31, as google.protobuf.Timestamp defines it.
    if !(-62_135_596_800..=253_402_300_799).contains(&t.seconds)
        || !(0..1_000_000_000).contains(&t.nanos)
    {
        return Err(Error::invalid(
            field,
            "must be a valid timestamp between 0001-01-01 and 9999-12-31",
        ));
    }
    Ok(t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

pub fn policy(field: &str, p: Option<&pb::RetryPolicy>) -> Result<PolicyOverrides, Error> {
    let Some(p) = p else {
        return Ok(PolicyOverrides::default());
    };
    let f = |name: &str| format!("{field}.{name}");
    let dur = |name: &str, d: &Option<prost_types::Duration>| -> Result<Option<Duration>, Error> {
        d.as_ref().map(|d| duration(&f(name), d)).transpose()
    };
    if p.max_attempts == Some(0) {
        return Err(Error::invalid(
            f("max_attempts"),
            "must be at least 1, got 0",
        ));
    }
    let max_attempts = match (p.unlimited_attempts, p.max_attempts) {
        (Some(true), Some(n)) => {
            return Err(Error::invalid(
                f("max_attempts"),
                format!("must be unset when unlimited_attempts is true, got {n}"),
            ))
        }
        (Some(true), None) => Some(rebound_store::policy::UNLIMITED_ATTEMPTS),
        (_, n) => n,
    };
    if p.non_retryable_error_classes.len() > crate::policy::MAX_ERROR_CLASSES {
        return Err(Error::invalid(
            f("non_retryable_error_classes"),
            format!(
                "at most {} classes, got {}",
                crate::policy::MAX_ERROR_CLASSES,
                p.non_retryable_error_classes.len()
            ),
        ));
    }
    if let Some(bad) = p
        .non_retryable_error_classes
        .iter()
        .find(|c| !crate::policy::error_class_ok(c))
    {
        return Err(Error::invalid(
            f("non_retryable_error_classes"),
            format!(
                "each class must be 1-{} characters of [A-Za-z0-9._:/-], got {}",
                crate::policy::MAX_ERROR_CLASS_LEN,
                show(bad)
            ),
        ));
    }
    if p.max_deliveries_per_attempt == Some(0) {
        return Err(Error::invalid(
            f("max_deliveries_per_attempt"),
            "must be at least 1, got 0",
        ));
    }
    Ok(PolicyOverrides {
        max_attempts,
        initial_backoff: dur("initial_backoff", &p.initial_backoff)?,
        max_backoff: dur("max_backoff", &p.max_backoff)?,
        multiplier: p.multiplier,
        jitter: p.jitter,
        max_retry_duration: dur("max_retry_duration", &p.max_retry_duration)?,
        ack_timeout: dur("ack_timeout", &p.ack_timeout)?,
        max_deliveries_per_attempt: p.max_deliveries_per_attempt,
        non_retryable: (!p.non_retryable_error_classes.is_empty())
            .then(|| p.non_retryable_error_classes.clone()),
    })
}

/// A `Subscribe` request: its service, `max_in_flight` (1 to `MAX_IN_FLIGHT`) and executor id.
pub fn subscribe(r: &pb::SubscribeRequest) -> Result<(), Error> {
    service("service", &r.service)?;
    if r.max_in_flight == 0 || r.max_in_flight > MAX_IN_FLIGHT {
        return Err(Error::invalid(
            "max_in_flight",
            format!(
                "must be between 1 and {MAX_IN_FLIGHT}, got {}",
                r.max_in_flight
            ),
        ));
    }
    executor_id("executor_id", &r.executor_id)
}

/// The item count of an `EnqueueRetryBatch` (`REBOUND_MAX_BATCH_ITEMS`).
pub fn enqueue_batch_len(items: usize, max_batch_items: usize) -> Result<(), Error> {
    if items > max_batch_items {
        return Err(Error::invalid(
            "requests",
            format!(
                "has {items} items, over the limit of {max_batch_items} (REBOUND_MAX_BATCH_ITEMS)"
            ),
        ));
    }
    Ok(())
}

/// The item count of an `AckBatch`: at most `MAX_IN_FLIGHT`.
pub fn ack_batch_len(items: usize) -> Result<(), Error> {
    if items > MAX_IN_FLIGHT as usize {
        return Err(Error::invalid(
            "acks",
            format!("has {items} items, over the limit of {MAX_IN_FLIGHT}"),
        ));
    }
    Ok(())
}

/// The transactions of one `EnqueueRetryBatch`: one that appears twice is refused after its
/// first appearance, since the two would race each other.
#[derive(Debug, Default)]
pub struct BatchKeys(std::collections::HashMap<(String, String), usize>);

impl BatchKeys {
    /// Records item `i`; INVALID_ARGUMENT if an earlier item has the same transaction.
    pub fn first(&mut self, i: usize, input: &EnqueueInput) -> Result<(), Error> {
        let key = (input.service.clone(), input.transaction_id.clone());
        if let Some(first) = self.0.insert(key, i) {
            return Err(Error::invalid(
                format!("requests[{i}].transaction_id"),
                format!("appears twice in one batch (first at requests[{first}])"),
            ));
        }
        Ok(())
    }
}

/// A dependency hold as an ack or `HoldDependency` gives it: its duration (1 s to 24 h) and
/// reason (at most 1,024 bytes). `prefix` names the fields.
pub fn hold(
    prefix: &str,
    duration: Option<&prost_types::Duration>,
    reason: &str,
) -> Result<(Duration, String), Error> {
    use crate::holds::{MAX_HOLD, MAX_REASON_BYTES, MIN_HOLD};
    let field = format!("{prefix}duration");
    let Some(d) = duration else {
        return Err(Error::invalid(field, "is required"));
    };
    let d = self::duration(&field, d)?;
    if d < MIN_HOLD || d > MAX_HOLD {
        return Err(Error::invalid(
            field,
            format!(
                "must be between {}s and {}s, got {:.3}s",
                MIN_HOLD.as_secs(),
                MAX_HOLD.as_secs(),
                d.as_secs_f64()
            ),
        ));
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(Error::invalid(
            format!("{prefix}reason"),
            format!(
                "is {} bytes, over the limit of {MAX_REASON_BYTES} bytes",
                reason.len()
            ),
        ));
    }
    Ok((d, reason.to_string()))
}

/// The hold an ack asks for (`AckRequest.hold`), only with outcome RETRY.
pub fn ack_hold(r: &pb::AckRequest, prefix: &str) -> Result<Option<(Duration, String)>, Error> {
    let Some(h) = &r.hold else { return Ok(None) };
    if pb::AckOutcome::try_from(r.outcome) != Ok(pb::AckOutcome::Retry) {
        return Err(Error::invalid(
            format!("{prefix}hold"),
            "is only allowed with outcome RETRY",
        ));
    }
    hold(&format!("{prefix}hold."), h.duration.as_ref(), &h.reason).map(Some)
}

/// Validates one ack: its delivery id, error, retry_after (at most `max_delay`), error class,
/// outcome and snooze. `prefix` is prepended to field names (batch items).
pub fn ack_outcome(
    r: &pb::AckRequest,
    max_delay: Duration,
    prefix: &str,
) -> Result<AttemptOutcome, Error> {
    // The field's name is made only for an error: an ack costs no allocation here.
    if !delivery_id_ok(&r.delivery_id) {
        delivery_id(&format!("{prefix}delivery_id"), &r.delivery_id)?;
    }
    if r.error.len() > MAX_LAST_ERROR_BYTES {
        return Err(Error::invalid(
            format!("{prefix}error"),
            format!(
                "is {} bytes, over the limit of {} bytes",
                r.error.len(),
                MAX_LAST_ERROR_BYTES
            ),
        ));
    }
    let after = r
        .retry_after
        .as_ref()
        .map(|d| duration(&format!("{prefix}retry_after"), d))
        .transpose()?;
    if let Some(a) = after {
        if a > max_delay {
            return Err(Error::invalid(
                format!("{prefix}retry_after"),
                format!(
                    "{}s is over the maximum of {}s (REBOUND_MAX_DELAY_SECONDS)",
                    a.as_secs(),
                    max_delay.as_secs()
                ),
            ));
        }
    }
    if !r.error_class.is_empty() && !crate::policy::error_class_ok(&r.error_class) {
        return Err(Error::invalid(
            format!("{prefix}error_class"),
            format!(
                "must be 1-{} characters of [A-Za-z0-9._:/-]",
                crate::policy::MAX_ERROR_CLASS_LEN
            ),
        ));
    }
    let outcome = pb::AckOutcome::try_from(r.outcome);
    if r.snooze {
        if outcome != Ok(pb::AckOutcome::Retry) {
            return Err(Error::invalid(
                format!("{prefix}snooze"),
                "is only allowed with outcome RETRY",
            ));
        }
        if after.is_none_or(|a| a.is_zero()) {
            return Err(Error::invalid(
                format!("{prefix}retry_after"),
                "is required with snooze and must be more than 0s",
            ));
        }
    }
    match outcome {
        Ok(pb::AckOutcome::Succeeded) => Ok(AttemptOutcome::Succeeded),
        Ok(pb::AckOutcome::Retry) => Ok(AttemptOutcome::Retry {
            after,
            error: r.error.clone(),
            error_class: r.error_class.clone(),
            snooze: r.snooze,
        }),
        Ok(pb::AckOutcome::Failed) => Ok(AttemptOutcome::Failed {
            error: r.error.clone(),
        }),
        _ => Err(Error::invalid(
            format!("{prefix}outcome"),
            "must be SUCCEEDED, RETRY or FAILED",
        )),
    }
}

#[path = "validate_enqueue.rs"]
mod enqueue;
pub(crate) use enqueue::attributes;
pub use enqueue::{compensations, enqueue, EnqueueInput, Schedule, MAX_COMPENSATIONS};

#[cfg(test)]
#[path = "validate_tests.rs"]
mod table_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> pb::EnqueueRetryRequest {
        pb::EnqueueRetryRequest {
            service: "orders".into(),
            transaction_id: "tx-1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn accepts_a_plain_request() {
        let i = enqueue("", req(), 10).unwrap();
        assert_eq!(i.schedule, Schedule::PolicyBackoff);
    }

    #[test]
    fn refuses_each_bad_field_by_name() {
        type Mutation = Box<dyn Fn(&mut pb::EnqueueRetryRequest)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|r| r.service.clear()), "service"),
            (Box::new(|r| r.service = "has space".into()), "service"),
            (Box::new(|r| r.service = "-lead".into()), "service"),
            (Box::new(|r| r.service = "x".repeat(65)), "service"),
            (Box::new(|r| r.transaction_id.clear()), "transaction_id"),
            (
                Box::new(|r| r.transaction_id = "x".repeat(257)),
                "transaction_id",
            ),
            (
                Box::new(|r| r.transaction_id = "a\nb".into()),
                "transaction_id",
            ),
            (Box::new(|r| r.payload = vec![0; 11]), "payload"),
            (Box::new(|r| r.last_error = "e".repeat(8193)), "last_error"),
            (
                Box::new(|r| {
                    r.schedule = Some(pb::enqueue_retry_request::Schedule::Delay(
                        prost_types::Duration {
                            seconds: -1,
                            nanos: 0,
                        },
                    ))
                }),
                "delay",
            ),
            (
                Box::new(|r| {
                    r.schedule = Some(pb::enqueue_retry_request::Schedule::DueTime(
                        prost_types::Timestamp {
                            seconds: 0,
                            nanos: -5,
                        },
                    ))
                }),
                "due_time",
            ),
            (
                Box::new(|r| {
                    r.policy = Some(pb::RetryPolicy {
                        max_attempts: Some(0),
                        ..Default::default()
                    })
                }),
                "policy.max_attempts",
            ),
            (
                Box::new(|r| {
                    for i in 0..65 {
                        r.attributes.insert(format!("k{i}"), "v".into());
                    }
                }),
                "attributes",
            ),
        ];
        for (mutate, field) in cases {
            let mut r = req();
            mutate(&mut r);
            match enqueue("", r, 10) {
                Err(Error::InvalidArgument { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: expected INVALID_ARGUMENT, got {other:?}"),
            }
        }
    }

    #[test]
    fn delivery_executor_and_day_fields() {
        assert!(delivery_id("delivery_id", "1700000000000-1-42").is_ok());
        for bad in ["", &"x".repeat(129)] {
            let e = delivery_id("acks[3].delivery_id", bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                "acks[3].delivery_id: must be the 1-128 byte id of a delivery"
            );
        }
        assert!(executor_id("executor_id", "").is_ok());
        assert!(executor_id("executor_id", "worker-7").is_ok());
        assert_eq!(
            executor_id("executor_id", "a\tb").unwrap_err().to_string(),
            "executor_id: must be at most 128 bytes with no control characters"
        );
        assert_eq!(day("day", "1970-01-02").unwrap(), 1);
        assert_eq!(
            day("day", "2026-13-01").unwrap_err().to_string(),
            "day: must be a UTC day as YYYY-MM-DD, got \"2026-13-01\""
        );
        let ms = |n| prost_types::Duration {
            seconds: 0,
            nanos: n * 1_000_000,
        };
        assert_eq!(
            extension("extension", Some(&ms(5))).unwrap(),
            Duration::from_millis(5)
        );
        assert_eq!(
            extension("extension", None).unwrap_err().to_string(),
            "extension: is required"
        );
        assert_eq!(
            extension("extension", Some(&ms(0)))
                .unwrap_err()
                .to_string(),
            "extension: must be between 1ms and 43200s"
        );
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        /// The field of an INVALID_ARGUMENT, or a failure for any other error.
        fn field_of(e: Error) -> String {
            match e {
                Error::InvalidArgument { field, .. } => field,
                other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
            }
        }

        /// Strings biased to the edges of the name rules: lengths around the limits, the
        /// allowed punctuation, control and multi-byte characters.
        fn name_like() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                "[A-Za-z0-9._-]{0,70}",
                "[a-z0-9][a-z0-9._é\\t\\x00 -]{0,70}",
                "(?s).{60,70}",
                prop::collection::vec(any::<u8>(), 0..300)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ]
        }

        fn pb_duration() -> impl Strategy<Value = prost_types::Duration> {
            (
                prop_oneof![any::<i64>(), -2i64..100_000_000],
                prop_oneof![any::<i32>(), -2i32..1_000_000_001],
            )
                .prop_map(|(seconds, nanos)| prost_types::Duration { seconds, nanos })
        }

        fn pb_policy() -> impl Strategy<Value = pb::RetryPolicy> {
            let d = || prop::option::of(pb_duration());
            (
                (
                    prop::option::of(any::<u32>()),
                    prop::option::of(any::<bool>()),
                    prop::collection::vec(name_like(), 0..3),
                    prop::option::of(any::<u32>()),
                ),
                (d(), d(), d(), d()),
                (
                    prop::option::of(prop_oneof![any::<f64>(), 0.0..3.0]),
                    prop::option::of(prop_oneof![any::<f64>(), 0.0..1.0]),
                ),
            )
                .prop_map(
                    |(
                        (max_attempts, unlimited_attempts, classes, max_deliveries),
                        (initial, max, total, ack),
                        (multiplier, jitter),
                    )| pb::RetryPolicy {
                        max_attempts,
                        unlimited_attempts,
                        non_retryable_error_classes: classes,
                        initial_backoff: initial,
                        max_backoff: max,
                        multiplier,
                        jitter,
                        max_retry_duration: total,
                        ack_timeout: ack,
                        max_deliveries_per_attempt: max_deliveries,
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn service_names_are_total(v in name_like()) {
                match service("service", &v) {
                    Ok(()) => prop_assert!(
                        v.len() <= MAX_SERVICE_LEN
                            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    ),
                    Err(e) => prop_assert_eq!(field_of(e), "service"),
                }
            }

            #[test]
            fn transaction_executor_and_delivery_ids_are_total(v in name_like()) {
                if let Err(e) = transaction_id("transaction_id", &v) {
                    prop_assert_eq!(field_of(e), "transaction_id");
                } else {
                    prop_assert!(!v.is_empty() && v.len() <= MAX_TRANSACTION_ID_BYTES);
                }
                if let Err(e) = executor_id("executor_id", &v) {
                    prop_assert_eq!(field_of(e), "executor_id");
                }
                match delivery_id("delivery_id", &v) {
                    Ok(()) => prop_assert!(!v.is_empty() && v.len() <= MAX_DELIVERY_ID_BYTES),
                    Err(e) => prop_assert_eq!(field_of(e), "delivery_id"),
                }
            }

            #[test]
            fn days_are_total(v in prop_oneof![
                any::<String>(),
                "[+-]?[0-9]{0,7}-[0-9]{0,3}-[0-9]{0,3}.{0,2}",
            ]) {
                if let Err(e) = day("day", &v) {
                    prop_assert_eq!(field_of(e), "day");
                }
            }

            #[test]
            fn days_round_trip(d in -1_000_000i32..1_000_000) {
                let date = rebound_store::window::day_to_date(d);
                prop_assert_eq!(day("day", &date.format("%Y-%m-%d").to_string()).unwrap(), d);
            }

            #[test]
            fn durations_and_timestamps_are_total(d in pb_duration()) {
                match duration("delay", &d) {
                    Ok(v) => prop_assert_eq!(
                        (v.as_secs() as i64, v.subsec_nanos() as i32),
                        (d.seconds, d.nanos)
                    ),
                    Err(e) => prop_assert_eq!(field_of(e), "delay"),
                }
                if let Err(e) = extension("extension", Some(&d)) {
                    prop_assert_eq!(field_of(e), "extension");
                }
                let t = prost_types::Timestamp { seconds: d.seconds, nanos: d.nanos };
                if let Err(e) = timestamp_ms("due_time", &t) {
                    prop_assert_eq!(field_of(e), "due_time");
                }
            }

            /// Any policy either is refused by name or, applied to the defaults and checked,
            /// gives backoffs for any attempt count without panicking.
            #[test]
            fn policies_are_total(p in pb_policy(), attempts in any::<u32>(), unit in any::<f64>()) {
                match policy("policy", Some(&p)) {
                    Ok(o) => {
                        let effective = crate::policy::Rules::apply(&rebound_store::policy::RetryPolicy::default(), &o);
                        if crate::policy::Rules::validate(&effective).is_ok() {
                            let b = crate::policy::Rules::backoff(&effective, attempts, unit);
                            prop_assert!(b <= effective.max_backoff);
                        }
                    }
                    Err(e) => prop_assert!(field_of(e).starts_with("policy.")),
                }
            }

            #[test]
            fn enqueue_requests_are_total(
                service_name in name_like(),
                transaction in name_like(),
                attributes in prop::collection::hash_map(name_like(), name_like(), 0..4),
                last_error in name_like(),
                delay in prop::option::of(pb_duration()),
                p in prop::option::of(pb_policy()),
            ) {
                let r = pb::EnqueueRetryRequest {
                    service: service_name,
                    transaction_id: transaction,
                    attributes,
                    last_error,
                    schedule: delay.map(pb::enqueue_retry_request::Schedule::Delay),
                    policy: p,
                    ..Default::default()
                };
                if let Err(e) = enqueue("requests[0].", r, 10) {
                    prop_assert!(field_of(e).starts_with("requests[0]."));
                }
            }
        }
    }
}

#[cfg(test)]
mod ack_props {
    use proptest::prelude::*;

    use super::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[A-Za-z0-9._:/é -]{0,130}",
            prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any ack is an outcome or an INVALID_ARGUMENT naming a field of its batch item.
        #[test]
        fn ack_outcomes_are_total(
            delivery_id in text(),
            outcome in prop_oneof![any::<i32>(), 0i32..5],
            error in text(),
            error_class in text(),
            retry_after in prop::option::of((any::<i64>(), any::<i32>())),
            snooze in any::<bool>(),
            hold in prop::option::of((prop::option::of((any::<i64>(), any::<i32>())), text())),
        ) {
            let r = pb::AckRequest {
                delivery_id,
                outcome,
                error,
                error_class,
                retry_after: retry_after
                    .map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
                snooze,
                hold: hold.map(|(duration, reason)| pb::DependencyHold {
                    duration: duration
                        .map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
                    reason,
                }),
            };
            match ack_outcome(&r, std::time::Duration::from_secs(86_400), "acks[7].") {
                Ok(_) => prop_assert!(super::delivery_id("d", &r.delivery_id).is_ok()),
                Err(Error::InvalidArgument { field, .. }) => {
                    prop_assert!(field.starts_with("acks[7]."), "{field}")
                }
                Err(e) => prop_assert!(false, "not INVALID_ARGUMENT: {e:?}"),
            }
            match ack_hold(&r, "acks[7].") {
                Ok(Some((d, reason))) => {
                    prop_assert!(r.outcome == pb::AckOutcome::Retry as i32);
                    prop_assert!(d >= crate::holds::MIN_HOLD && d <= crate::holds::MAX_HOLD);
                    prop_assert!(reason.len() <= crate::holds::MAX_REASON_BYTES);
                }
                Ok(None) => prop_assert!(r.hold.is_none()),
                Err(Error::InvalidArgument { field, .. }) => {
                    prop_assert!(field.starts_with("acks[7].hold"), "{field}")
                }
                Err(e) => prop_assert!(false, "not INVALID_ARGUMENT: {e:?}"),
            }
        }
    }
}
