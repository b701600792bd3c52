//! The `body` cell of a state row (schema 0007): everything about a retry except its status,
//! generation and payload, protobuf-encoded so the row is 4 cells instead of 26. Protobuf
//! keeps old and new nodes compatible: a field added later is skipped by a node that does not
//! know it, and a missing field reads as its default.

use std::{collections::BTreeMap, time::Duration};

use prost::Message;

use super::{Chain, Location, Saga, Status, StoreError, StoreResult, TxState, WriteTime};
use crate::{
    context::TextContext,
    history::{AttemptEnd, AttemptRecord, History},
    policy::RetryPolicy,
    window::WindowId,
};

#[derive(Clone, PartialEq, Message)]
pub struct Body {
    #[prost(uint32, tag = "1")]
    pub attempt: u32,
    #[prost(btree_map = "string, string", tag = "2")]
    pub attributes: BTreeMap<String, String>,
    #[prost(message, optional, tag = "3")]
    pub policy: Option<PolicyBody>,
    #[prost(int64, tag = "4")]
    pub first_enqueued_at_ms: i64,
    #[prost(int64, tag = "5")]
    pub last_enqueued_at_ms: i64,
    #[prost(int64, tag = "6")]
    pub updated_at_ms: i64,
    #[prost(int64, tag = "7")]
    pub due_at_ms: i64,
    #[prost(string, tag = "8")]
    pub last_error: String,
    #[prost(message, optional, tag = "9")]
    pub location: Option<LocationBody>,
    #[prost(uint32, tag = "10")]
    pub enqueue_count: u32,
    #[prost(uint32, tag = "11")]
    pub delivery_count: u32,
    /// The generation this schedule was derived from (the one its writer read), or its own
    /// for a fresh start: a cancel of a generation at or above it cancels it.
    #[prost(int64, tag = "12")]
    pub base_generation: i64,
    /// The W3C trace context of the enqueue that started the retry (empty: none).
    #[prost(string, tag = "13")]
    pub traceparent: String,
    #[prost(string, tag = "14")]
    pub tracestate: String,
    /// The dependency the retry waits on (empty: none).
    #[prost(string, tag = "15")]
    pub dependency: String,
    /// The compensations to enqueue after this retry, each an encoded `rebound.v1.Compensation`
    /// (`Saga::compensations`).
    #[prost(bytes = "vec", repeated, tag = "16")]
    pub compensations: Vec<Vec<u8>>,
    /// For a compensation: its chain (`Saga::chain`).
    #[prost(message, optional, tag = "17")]
    pub chain: Option<ChainBody>,
    /// The attempt history (`History::attempts`), oldest first.
    #[prost(message, repeated, tag = "18")]
    pub attempts: Vec<AttemptBody>,
    /// Attempts dropped from the history between the first and the kept ones.
    #[prost(uint32, tag = "19")]
    pub attempts_dropped: u32,
}

/// One attempt (`AttemptRecord`); times in ms since the epoch.
#[derive(Clone, PartialEq, Message)]
pub struct AttemptBody {
    #[prost(uint32, tag = "1")]
    pub attempt: u32,
    #[prost(int64, tag = "2")]
    pub delivered_at_ms: i64,
    #[prost(int64, tag = "3")]
    pub ended_at_ms: i64,
    #[prost(string, tag = "4")]
    pub node_id: String,
    #[prost(string, tag = "5")]
    pub executor_id: String,
    /// `AttemptEnd::code`; a code this node does not know reads as RETRY.
    #[prost(uint32, tag = "6")]
    pub end: u32,
    #[prost(string, tag = "7")]
    pub error: String,
    #[prost(string, tag = "8")]
    pub error_class: String,
    /// The `retry_after` asked for (none: none asked).
    #[prost(uint64, optional, tag = "9")]
    pub retry_after_ms: Option<u64>,
    #[prost(uint32, tag = "10")]
    pub deliveries: u32,
}

impl AttemptBody {
    fn of(a: &AttemptRecord) -> Self {
        AttemptBody {
            attempt: a.attempt,
            delivered_at_ms: a.delivered_at_ms,
            ended_at_ms: a.ended_at_ms,
            node_id: a.node_id.clone(),
            executor_id: a.executor_id.clone(),
            end: a.end.code(),
            error: a.error.clone(),
            error_class: a.error_class.clone(),
            retry_after_ms: a.retry_after_ms,
            deliveries: a.deliveries,
        }
    }

    fn record(self) -> AttemptRecord {
        AttemptRecord {
            attempt: self.attempt,
            delivered_at_ms: self.delivered_at_ms,
            ended_at_ms: self.ended_at_ms,
            node_id: self.node_id,
            executor_id: self.executor_id,
            end: AttemptEnd::of_code(self.end).unwrap_or(AttemptEnd::Retry),
            error: self.error,
            error_class: self.error_class,
            retry_after_ms: self.retry_after_ms,
            deliveries: self.deliveries,
        }
    }
}

/// A compensation's chain (`Chain`).
#[derive(Clone, PartialEq, Message)]
pub struct ChainBody {
    #[prost(string, tag = "1")]
    pub saga_service: String,
    #[prost(string, tag = "2")]
    pub saga_transaction_id: String,
    #[prost(uint32, tag = "3")]
    pub position: u32,
    #[prost(message, repeated, tag = "4")]
    pub members: Vec<MemberBody>,
}

/// One compensation of a chain, by name.
#[derive(Clone, PartialEq, Message)]
pub struct MemberBody {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub transaction_id: String,
}

impl ChainBody {
    fn of(c: &Chain) -> Self {
        ChainBody {
            saga_service: c.saga_service.clone(),
            saga_transaction_id: c.saga_transaction_id.clone(),
            position: c.position,
            members: c
                .members
                .iter()
                .map(|(service, transaction_id)| MemberBody {
                    service: service.clone(),
                    transaction_id: transaction_id.clone(),
                })
                .collect(),
        }
    }

    fn chain(self) -> Chain {
        Chain {
            saga_service: self.saga_service,
            saga_transaction_id: self.saga_transaction_id,
            position: self.position,
            members: self
                .members
                .into_iter()
                .map(|m| (m.service, m.transaction_id))
                .collect(),
        }
    }
}

/// The effective policy of the retry, durations in milliseconds.
#[derive(Clone, PartialEq, Message)]
pub struct PolicyBody {
    /// 0: unlimited.
    #[prost(uint32, tag = "1")]
    pub max_attempts: u32,
    #[prost(uint64, tag = "2")]
    pub initial_backoff_ms: u64,
    #[prost(uint64, tag = "3")]
    pub max_backoff_ms: u64,
    #[prost(double, tag = "4")]
    pub multiplier: f64,
    #[prost(double, tag = "5")]
    pub jitter: f64,
    /// 0: no limit.
    #[prost(uint64, tag = "6")]
    pub max_retry_duration_ms: u64,
    #[prost(uint64, tag = "7")]
    pub ack_timeout_ms: u64,
    #[prost(uint32, tag = "8")]
    pub max_deliveries_per_attempt: u32,
    #[prost(string, repeated, tag = "9")]
    pub non_retryable: Vec<String>,
}

/// Where the live pointer is: day (days since the epoch), window, instance, bucket.
#[derive(Clone, PartialEq, Message)]
pub struct LocationBody {
    #[prost(int32, tag = "1")]
    pub day: i32,
    #[prost(uint32, tag = "2")]
    pub window: u32,
    #[prost(string, tag = "3")]
    pub instance: String,
    #[prost(uint32, tag = "4")]
    pub bucket: u32,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl PolicyBody {
    pub fn of(p: &RetryPolicy) -> Self {
        Self {
            max_attempts: p.max_attempts,
            initial_backoff_ms: ms(p.initial_backoff),
            max_backoff_ms: ms(p.max_backoff),
            multiplier: p.multiplier,
            jitter: p.jitter,
            max_retry_duration_ms: p.max_retry_duration.map_or(0, ms),
            ack_timeout_ms: ms(p.ack_timeout),
            max_deliveries_per_attempt: p.max_deliveries_per_attempt,
            non_retryable: p.non_retryable.clone(),
        }
    }

    pub fn policy(self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial_backoff: Duration::from_millis(self.initial_backoff_ms),
            max_backoff: Duration::from_millis(self.max_backoff_ms),
            multiplier: self.multiplier,
            jitter: self.jitter,
            max_retry_duration: (self.max_retry_duration_ms > 0)
                .then(|| Duration::from_millis(self.max_retry_duration_ms)),
            ack_timeout: Duration::from_millis(self.ack_timeout_ms),
            max_deliveries_per_attempt: self.max_deliveries_per_attempt.max(1),
            non_retryable: self.non_retryable,
        }
    }
}

impl LocationBody {
    pub fn of(l: &Location) -> Self {
        Self {
            day: l.window.day,
            window: l.window.index,
            instance: l.instance.clone(),
            bucket: l.bucket,
        }
    }

    pub fn location(self) -> Location {
        Location {
            window: WindowId {
                day: self.day,
                index: self.window,
            },
            instance: self.instance,
            bucket: self.bucket,
        }
    }
}

/// The cells of a state row besides its body: status, generation, payload and the two
/// settle cells.
#[derive(Debug)]
pub struct StateCells {
    pub status: Status,
    pub generation: i64,
    pub payload: Vec<u8>,
    pub cancelled_generation: Option<i64>,
    pub succeeded_generation: Option<i64>,
    /// When the main cells were written (`TxState::written`).
    pub written: WriteTime,
}

impl Body {
    /// The body of `s`: everything but its status, generation, payload and settle cells.
    pub fn of_state(s: &TxState) -> Self {
        Body {
            attempt: s.attempt,
            attributes: s.attributes.clone(),
            policy: Some(PolicyBody::of(&s.policy)),
            first_enqueued_at_ms: s.first_enqueued_at_ms,
            last_enqueued_at_ms: s.last_enqueued_at_ms,
            updated_at_ms: s.updated_at_ms,
            due_at_ms: s.due_at_ms,
            last_error: s.last_error.clone(),
            location: s.location.as_ref().map(LocationBody::of),
            enqueue_count: s.enqueue_count,
            delivery_count: s.delivery_count,
            base_generation: s.base_generation,
            traceparent: s.trace.traceparent.clone(),
            tracestate: s.trace.tracestate.clone(),
            dependency: s.dependency.clone(),
            compensations: s.saga.compensations.clone(),
            chain: s.saga.chain.as_ref().map(ChainBody::of),
            attempts: s.history.attempts.iter().map(AttemptBody::of).collect(),
            attempts_dropped: s.history.dropped,
        }
    }

    /// The state row of `service`/`transaction_id` made of this body and `cells`, with the
    /// settle cells applied (`TxState::apply_settled`).
    pub fn into_state(mut self, service: &str, transaction_id: &str, cells: StateCells) -> TxState {
        TxState {
            service: service.to_string(),
            transaction_id: transaction_id.to_string(),
            status: cells.status,
            generation: cells.generation,
            attempt: self.attempt,
            payload: cells.payload,
            policy: self.policy_or_default(),
            attributes: self.attributes,
            first_enqueued_at_ms: self.first_enqueued_at_ms,
            last_enqueued_at_ms: self.last_enqueued_at_ms,
            updated_at_ms: self.updated_at_ms,
            due_at_ms: self.due_at_ms,
            last_error: self.last_error,
            location: self.location.map(LocationBody::location),
            enqueue_count: self.enqueue_count,
            delivery_count: self.delivery_count,
            legacy_columns: false,
            base_generation: self.base_generation,
            cancelled_generation: cells.cancelled_generation,
            succeeded_generation: cells.succeeded_generation,
            trace: TextContext {
                traceparent: self.traceparent,
                tracestate: self.tracestate,
            },
            dependency: self.dependency,
            saga: Saga {
                compensations: self.compensations,
                chain: self.chain.map(ChainBody::chain),
            },
            history: History {
                attempts: self.attempts.into_iter().map(AttemptBody::record).collect(),
                dropped: self.attempts_dropped,
            },
            written: cells.written,
        }
        .apply_settled()
    }

    /// Decodes a stored body; the error names the row (formatted only then).
    pub fn decode_stored(bytes: &[u8], service: &str, transaction_id: &str) -> StoreResult<Self> {
        Body::decode(bytes).map_err(|e| {
            StoreError::Internal(format!(
                "state row {service}/{transaction_id} has a bad body: {e}"
            ))
        })
    }

    /// The policy, or the node default when the body has none (never written that way).
    pub fn policy_or_default(&mut self) -> RetryPolicy {
        self.policy
            .take()
            .map_or_else(RetryPolicy::default, PolicyBody::policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_and_location_round_trip() {
        let p = RetryPolicy {
            max_attempts: 0,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(600),
            multiplier: 1.5,
            jitter: 0.25,
            max_retry_duration: Some(Duration::from_secs(3600)),
            ack_timeout: Duration::from_secs(30),
            max_deliveries_per_attempt: 3,
            non_retryable: vec!["4xx".into(), "bad input".into()],
        };
        assert_eq!(PolicyBody::of(&p).policy(), p);
        let none = RetryPolicy {
            max_retry_duration: None,
            ..p.clone()
        };
        assert_eq!(PolicyBody::of(&none).policy(), none);
        let l = Location {
            window: WindowId {
                day: 20_000,
                index: 1_439,
            },
            instance: "n1-17-3".into(),
            bucket: 2,
        };
        assert_eq!(LocationBody::of(&l).location(), l);
        let mut body = Body {
            attempt: 2,
            policy: Some(PolicyBody::of(&p)),
            location: Some(LocationBody::of(&l)),
            ..Default::default()
        };
        let bytes = body.encode_to_vec();
        let mut back = Body::decode_stored(&bytes, "s", "t").unwrap();
        assert_eq!(back, body);
        assert_eq!(back.policy_or_default(), body.policy_or_default());
        assert!(Body::decode_stored(&[0xff, 0xff, 0xff], "s", "t").is_err());
    }

    #[test]
    fn history_round_trips_through_the_body() {
        let mut history = History::default();
        for (n, end, after) in [
            (1, AttemptEnd::Retry, Some(1_500)),
            (2, AttemptEnd::Held, None),
            (2, AttemptEnd::DeadlineExpired, Some(0)),
            (3, AttemptEnd::Succeeded, None),
        ] {
            history.record(AttemptRecord {
                attempt: n,
                delivered_at_ms: 10 * i64::from(n),
                ended_at_ms: 10 * i64::from(n) + 7,
                node_id: "n2".into(),
                executor_id: "worker-7".into(),
                end,
                error: format!("error {n}"),
                error_class: "5xx".into(),
                retry_after_ms: after,
                deliveries: 2,
            });
        }
        history.dropped = 4;
        let state = TxState {
            history: history.clone(),
            ..TxState::cancelled_ghost("s", "t", 7)
        };
        let body = Body::decode_stored(&Body::of_state(&state).encode_to_vec(), "s", "t").unwrap();
        let cells = StateCells {
            status: Status::Scheduled,
            generation: 7,
            payload: Vec::new(),
            cancelled_generation: None,
            succeeded_generation: None,
            written: WriteTime::default(),
        };
        assert_eq!(body.into_state("s", "t", cells).history, history);
        // An end this node does not know (written by a newer one) reads as RETRY.
        let unknown = AttemptBody {
            end: 77,
            ..AttemptBody::of(&history.attempts[0])
        };
        assert_eq!(unknown.record().end, AttemptEnd::Retry);
    }
}
