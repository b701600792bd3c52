//! The state of a retry as `GetRetry` and `CancelRetry` report it.

use std::{
    collections::HashMap,
    fmt,
    time::{Duration, SystemTime},
};

use rebound_proto::v1 as pb;

use crate::{
    error::{malformed, Error},
    policy::RetryPolicy,
    time::{duration_from_proto, required_time},
};

/// Where a retry is in its life.
///
/// Non-exhaustive so that a status added to the API later does not break matches; a client
/// that receives a status it does not know reports the response as malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryStatus {
    /// Waiting for its due window, or delivered and not yet acknowledged.
    Scheduled,
    /// An executor acknowledged it as done.
    Succeeded,
    /// Retries exhausted or a non-retryable failure; a dead letter exists.
    Dead,
    /// Cancelled before it finished.
    Cancelled,
    /// In listings only ([`Client::list_retries`](crate::Client::list_retries) with
    /// [`RetryStatus::InFlight`] among its statuses): scheduled, delivered and awaiting its
    /// ack.
    InFlight,
}

impl RetryStatus {
    /// True once the retry will never be delivered again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RetryStatus::Scheduled | RetryStatus::InFlight)
    }

    /// The upper-case name the server and the CLI use (`SCHEDULED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RetryStatus::Scheduled => "SCHEDULED",
            RetryStatus::Succeeded => "SUCCEEDED",
            RetryStatus::Dead => "DEAD",
            RetryStatus::Cancelled => "CANCELLED",
            RetryStatus::InFlight => "IN_FLIGHT",
        }
    }

    /// Decodes the wire value of a `RetryStatus` field. `UNSPECIFIED` and unknown values are
    /// errors: every retry the server reports has one of the known statuses.
    pub fn from_proto(value: i32) -> Result<Self, Error> {
        match pb::RetryStatus::try_from(value) {
            Ok(pb::RetryStatus::Scheduled) => Ok(RetryStatus::Scheduled),
            Ok(pb::RetryStatus::Succeeded) => Ok(RetryStatus::Succeeded),
            Ok(pb::RetryStatus::Dead) => Ok(RetryStatus::Dead),
            Ok(pb::RetryStatus::Cancelled) => Ok(RetryStatus::Cancelled),
            Ok(pb::RetryStatus::InFlight) => Ok(RetryStatus::InFlight),
            Ok(pb::RetryStatus::Unspecified) | Err(_) => Err(malformed(format_args!(
                "unknown retry status {value}; a newer rebound-client may understand it"
            ))),
        }
    }
}

impl From<RetryStatus> for pb::RetryStatus {
    fn from(s: RetryStatus) -> Self {
        match s {
            RetryStatus::Scheduled => pb::RetryStatus::Scheduled,
            RetryStatus::Succeeded => pb::RetryStatus::Succeeded,
            RetryStatus::Dead => pb::RetryStatus::Dead,
            RetryStatus::InFlight => pb::RetryStatus::InFlight,
            RetryStatus::Cancelled => pb::RetryStatus::Cancelled,
        }
    }
}

impl fmt::Display for RetryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One retry, as [`Client::get`](crate::Client::get) returns it.
///
/// The fields are the commonly used parts in `std` types; [`Retry::as_proto`] gives the full
/// response, including its storage location.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    pub service: String,
    pub transaction_id: String,
    pub status: RetryStatus,
    /// Attempts made so far, counting the caller's own tries before the first enqueue.
    pub attempt: u32,
    /// Bumped each time the retry is rescheduled; stale deliveries carry an older one.
    pub generation: u64,
    /// When the retry becomes (or became) eligible for delivery: the end of its window.
    pub due_time: SystemTime,
    /// The most recent failure reported by the producer or an executor, if any.
    pub last_error: Option<String>,
    pub payload: Vec<u8>,
    pub attributes: HashMap<String, String>,
    /// The effective policy: the retry's overrides merged with the service and node defaults.
    pub policy: RetryPolicy,
    pub first_enqueued_at: SystemTime,
    pub last_enqueued_at: SystemTime,
    pub updated_at: SystemTime,
    /// How many `EnqueueRetry` calls this retry has seen.
    pub enqueue_count: u32,
    /// How many times it has been delivered to an executor.
    pub delivery_count: u32,
    /// For a saga step or a compensation: where its compensation chain stands.
    pub chain: Option<Chain>,
    /// What each attempt did, oldest first: the first and the most recent, 10 in all.
    pub attempts: Vec<Attempt>,
    /// Attempts left out between the first and the rest.
    pub attempts_dropped: u32,
    raw: pb::Retry,
}

/// How an attempt ended ([`Attempt::outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcome {
    Succeeded,
    /// Acked RETRY: the attempt failed and counts.
    Retry,
    Failed,
    /// Not acknowledged before its ack deadline, `max_deliveries_per_attempt` times.
    DeadlineExpired,
    /// Acked RETRY with a hold of its dependency: no attempt used.
    Held,
    /// Acked RETRY as a snooze: no attempt used.
    Snoozed,
    /// Not attempts: an operator's action (ActOnRetries); the record's executor names who
    /// acted, its error the reason given.
    RunNow,
    Rescheduled,
    Cancelled,
    DeadLettered,
    /// A value this client does not know (a newer server's).
    Unknown(i32),
}

impl AttemptOutcome {
    pub fn from_proto(value: i32) -> Self {
        match pb::AttemptOutcome::try_from(value) {
            Ok(pb::AttemptOutcome::Succeeded) => AttemptOutcome::Succeeded,
            Ok(pb::AttemptOutcome::Retry) => AttemptOutcome::Retry,
            Ok(pb::AttemptOutcome::Failed) => AttemptOutcome::Failed,
            Ok(pb::AttemptOutcome::DeadlineExpired) => AttemptOutcome::DeadlineExpired,
            Ok(pb::AttemptOutcome::Held) => AttemptOutcome::Held,
            Ok(pb::AttemptOutcome::Snoozed) => AttemptOutcome::Snoozed,
            Ok(pb::AttemptOutcome::RunNow) => AttemptOutcome::RunNow,
            Ok(pb::AttemptOutcome::Rescheduled) => AttemptOutcome::Rescheduled,
            Ok(pb::AttemptOutcome::Cancelled) => AttemptOutcome::Cancelled,
            Ok(pb::AttemptOutcome::DeadLettered) => AttemptOutcome::DeadLettered,
            Ok(pb::AttemptOutcome::Unspecified) | Err(_) => AttemptOutcome::Unknown(value),
        }
    }
}

/// One attempt of a retry ([`Retry::attempts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number: the `Delivery.attempt` it was delivered with.
    pub attempt: u32,
    pub delivered_at: Option<SystemTime>,
    pub ended_at: Option<SystemTime>,
    /// How long the executor took.
    pub duration: Duration,
    /// The node that delivered it, and the executor it went to (`push` for a push target).
    pub node_id: String,
    pub executor_id: String,
    pub outcome: AttemptOutcome,
    /// The ack's error (its first 512 bytes) and error class.
    pub error: String,
    pub error_class: String,
    /// The `retry_after` the ack asked for; None: none.
    pub retry_after: Option<Duration>,
    /// Deliveries the attempt took (more than 1 after expired ack deadlines).
    pub deliveries: u32,
}

impl From<pb::Attempt> for Attempt {
    fn from(a: pb::Attempt) -> Self {
        Attempt {
            attempt: a.attempt,
            delivered_at: a.delivered_at.and_then(|t| SystemTime::try_from(t).ok()),
            ended_at: a.ended_at.and_then(|t| SystemTime::try_from(t).ok()),
            duration: a.duration.map(duration_from_proto).unwrap_or_default(),
            node_id: a.node_id,
            executor_id: a.executor_id,
            outcome: AttemptOutcome::from_proto(a.outcome),
            error: a.error,
            error_class: a.error_class,
            retry_after: a.retry_after.map(duration_from_proto),
            deliveries: a.deliveries,
        }
    }
}

/// Where a compensation chain stands ([`Retry::chain`]), as read when `get` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The saga step whose retry ended DEAD and started the chain.
    pub saga_service: String,
    pub saga_transaction_id: String,
    /// The retry's place in the chain: 0 for the step itself, k for the k-th compensation.
    pub position: u32,
    /// Every compensation of the chain, in order.
    pub compensations: Vec<ChainStep>,
}

/// One compensation of a [`Chain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStep {
    pub service: String,
    pub transaction_id: String,
    /// None: not enqueued yet (or its record has expired).
    pub status: Option<RetryStatus>,
}

impl From<pb::CompensationChain> for Chain {
    fn from(c: pb::CompensationChain) -> Self {
        Chain {
            saga_service: c.saga_service,
            saga_transaction_id: c.saga_transaction_id,
            position: c.position,
            compensations: c
                .compensations
                .into_iter()
                .map(|m| ChainStep {
                    status: RetryStatus::from_proto(m.status).ok(),
                    service: m.service,
                    transaction_id: m.transaction_id,
                })
                .collect(),
        }
    }
}

impl Retry {
    /// The response exactly as the server sent it.
    pub fn as_proto(&self) -> &pb::Retry {
        &self.raw
    }

    /// The response exactly as the server sent it, without copying.
    pub fn into_proto(self) -> pb::Retry {
        self.raw
    }
}

/// Fails when a field the API always sets is missing or out of range.
impl TryFrom<pb::Retry> for Retry {
    type Error = Error;

    fn try_from(raw: pb::Retry) -> Result<Self, Error> {
        // The typed fields copy out of `raw` so that `raw` stays complete; `get` is not a hot
        // path, and payloads are small (256 KiB by default).
        let r = raw.clone();
        Ok(Retry {
            status: RetryStatus::from_proto(r.status)?,
            due_time: required_time("due_time", r.due_time)?,
            first_enqueued_at: required_time("first_enqueued_at", r.first_enqueued_at)?,
            last_enqueued_at: required_time("last_enqueued_at", r.last_enqueued_at)?,
            updated_at: required_time("updated_at", r.updated_at)?,
            service: r.service,
            transaction_id: r.transaction_id,
            attempt: r.attempt,
            generation: r.generation,
            last_error: Some(r.last_error).filter(|e| !e.is_empty()),
            payload: r.payload,
            attributes: r.attributes,
            policy: r.policy.map(RetryPolicy::from).unwrap_or_default(),
            enqueue_count: r.enqueue_count,
            delivery_count: r.delivery_count,
            chain: r.chain.map(Chain::from),
            attempts: r.attempts.into_iter().map(Attempt::from).collect(),
            attempts_dropped: r.attempts_dropped,
            raw,
        })
    }
}

/// The outcome of [`Client::cancel`](crate::Client::cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled {
    /// The status after the call: [`RetryStatus::Cancelled`], or the terminal status the retry
    /// already had.
    pub status: RetryStatus,
    /// False when the retry had already finished (succeeded, dead or cancelled) before the call.
    pub cancelled: bool,
}

impl TryFrom<pb::CancelRetryResponse> for Cancelled {
    type Error = Error;

    fn try_from(r: pb::CancelRetryResponse) -> Result<Self, Error> {
        Ok(Cancelled {
            status: RetryStatus::from_proto(r.status)?,
            cancelled: r.cancelled,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn ts(seconds: i64) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos: 0 })
    }

    fn proto_retry() -> pb::Retry {
        pb::Retry {
            service: "payments".into(),
            transaction_id: "tx-1".into(),
            status: pb::RetryStatus::Scheduled as i32,
            attempt: 2,
            generation: 3,
            due_time: ts(1_700_000_060),
            last_error: "timeout".into(),
            payload: b"body".to_vec(),
            attributes: [("tenant".to_owned(), "acme".to_owned())].into(),
            policy: Some(pb::RetryPolicy {
                max_attempts: Some(5),
                ..Default::default()
            }),
            first_enqueued_at: ts(1_700_000_000),
            last_enqueued_at: ts(1_700_000_030),
            updated_at: ts(1_700_000_031),
            location: Some(pb::Location {
                day: "2023-11-14".into(),
                window: 7,
                instance: "n1-1-0".into(),
                bucket: 4,
            }),
            dependency: "payments-gateway".into(),
            enqueue_count: 2,
            delivery_count: 1,
            compensations: Vec::new(),
            chain: Some(pb::CompensationChain {
                saga_service: "orders".into(),
                saga_transaction_id: "o-1".into(),
                position: 1,
                compensations: vec![pb::CompensationProgress {
                    service: "payments".into(),
                    transaction_id: "tx-1".into(),
                    status: pb::RetryStatus::Scheduled as i32,
                }],
            }),
            attempts: vec![pb::Attempt {
                attempt: 2,
                delivered_at: ts(1_700_000_040),
                ended_at: ts(1_700_000_041),
                node_id: "n1".into(),
                executor_id: "worker-7".into(),
                outcome: pb::AttemptOutcome::Retry as i32,
                error: "timeout".into(),
                error_class: "5xx".into(),
                retry_after: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                duration: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                deliveries: 1,
            }],
            attempts_dropped: 3,
        }
    }

    #[test]
    fn converts_a_full_retry() {
        let raw = proto_retry();
        let r = Retry::try_from(raw.clone()).unwrap();
        assert_eq!(r.service, "payments");
        assert_eq!(r.transaction_id, "tx-1");
        assert_eq!(r.status, RetryStatus::Scheduled);
        let chain = r.chain.clone().unwrap();
        assert_eq!(
            (chain.saga_transaction_id.as_str(), chain.position),
            ("o-1", 1)
        );
        assert_eq!(chain.compensations[0].status, Some(RetryStatus::Scheduled));
        assert_eq!(r.attempt, 2);
        assert_eq!(r.generation, 3);
        assert_eq!(r.due_time, UNIX_EPOCH + Duration::from_secs(1_700_000_060));
        assert_eq!(r.last_error.as_deref(), Some("timeout"));
        assert_eq!(r.payload, b"body");
        assert_eq!(r.attributes["tenant"], "acme");
        assert_eq!(r.policy, RetryPolicy::new().max_attempts(5));
        assert_eq!(
            r.first_enqueued_at,
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        assert_eq!(r.enqueue_count, 2);
        assert_eq!(r.delivery_count, 1);
        let a = &r.attempts[0];
        assert_eq!((a.attempt, a.outcome), (2, AttemptOutcome::Retry));
        assert_eq!(a.retry_after, Some(Duration::from_secs(30)));
        assert_eq!(a.duration, Duration::from_secs(1));
        assert_eq!(
            a.delivered_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_040))
        );
        assert_eq!(
            (a.executor_id.as_str(), a.error.as_str()),
            ("worker-7", "timeout")
        );
        assert_eq!(r.attempts_dropped, 3);
        assert_eq!(AttemptOutcome::from_proto(99), AttemptOutcome::Unknown(99));
        assert_eq!(r.as_proto(), &raw);
        assert_eq!(r.into_proto(), raw);
    }

    #[test]
    fn empty_last_error_is_none() {
        let r = Retry::try_from(pb::Retry {
            last_error: String::new(),
            ..proto_retry()
        })
        .unwrap();
        assert_eq!(r.last_error, None);
    }

    #[test]
    fn missing_timestamp_is_rejected() {
        let e = Retry::try_from(pb::Retry {
            due_time: None,
            ..proto_retry()
        })
        .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        assert!(e.to_string().contains("due_time"), "{e}");
    }

    #[test]
    fn statuses_round_trip_and_unknown_ones_fail() {
        for s in [
            RetryStatus::Scheduled,
            RetryStatus::Succeeded,
            RetryStatus::Dead,
            RetryStatus::Cancelled,
        ] {
            let wire = pb::RetryStatus::from(s) as i32;
            assert_eq!(RetryStatus::from_proto(wire).unwrap(), s);
            assert_eq!(s.is_terminal(), s != RetryStatus::Scheduled);
        }
        assert!(RetryStatus::from_proto(0).is_err());
        assert!(RetryStatus::from_proto(99).is_err());
        assert_eq!(RetryStatus::Dead.to_string(), "DEAD");
    }

    #[test]
    fn converts_cancel_response() {
        let c = Cancelled::try_from(pb::CancelRetryResponse {
            status: pb::RetryStatus::Succeeded as i32,
            cancelled: false,
        })
        .unwrap();
        assert_eq!(
            c,
            Cancelled {
                status: RetryStatus::Succeeded,
                cancelled: false
            }
        );
    }
}
