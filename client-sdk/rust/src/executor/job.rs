//! What a handler receives ([`Job`]) and what it reports back ([`Outcome`], [`HandlerError`]).

use std::{
    any::Any,
    collections::HashMap,
    fmt,
    time::{Duration, SystemTime},
};

use rebound_proto::v1 as pb;

use crate::{
    error::{Chain, Error},
    time::{duration_to_proto, required_time},
};

/// One delivery of a due retry, as an [`Executor`](super::Executor) hands it to the handler.
///
/// Non-exhaustive so that fields added to the API later are not breaking; to build one in a
/// handler's unit tests, convert a [`proto::Delivery`](crate::proto::Delivery) with
/// `Job::try_from`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Job {
    /// The opaque token this delivery is acknowledged with. The executor acknowledges for you;
    /// it is here for logging and for correlating with the server's logs.
    pub delivery_id: String,
    pub service: String,
    /// The idempotency key the producer enqueued the retry under. A delivery can arrive more
    /// than once (after a missed deadline or a reconnect), so handlers should be idempotent by
    /// this key.
    pub transaction_id: String,
    /// The retry's attempt counter as the server reports it with this delivery (the producer's
    /// own tries included).
    pub attempt: u32,
    pub payload: Vec<u8>,
    pub attributes: HashMap<String, String>,
    /// When the retry became due: the start of its window.
    pub due_time: SystemTime,
    pub first_enqueued_at: SystemTime,
    /// The failure reported by the producer or by the previous attempt, if any.
    pub last_error: Option<String>,
    /// The acknowledgement deadline at the time of delivery. While the handler runs, the
    /// executor pushes the deadline on the server with `ExtendDeadline`; this field keeps the
    /// original value.
    pub ack_deadline: SystemTime,
}

/// Fails when a timestamp the API always sets is missing or out of range.
impl TryFrom<pb::Delivery> for Job {
    type Error = Error;

    fn try_from(d: pb::Delivery) -> Result<Self, Error> {
        Ok(Job {
            due_time: required_time("due_time", d.due_time)?,
            first_enqueued_at: required_time("first_enqueued_at", d.first_enqueued_at)?,
            ack_deadline: required_time("ack_deadline", d.ack_deadline)?,
            delivery_id: d.delivery_id,
            service: d.service,
            transaction_id: d.transaction_id,
            attempt: d.attempt,
            payload: d.payload,
            attributes: d.attributes,
            last_error: Some(d.last_error).filter(|e| !e.is_empty()),
        })
    }
}

/// How a handler finished with a [`Job`]; the executor acknowledges the delivery with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the retry is finished (`ACK_OUTCOME_SUCCEEDED`).
    Success,
    /// A transient failure: schedule the next attempt (`ACK_OUTCOME_RETRY`), after `after` when
    /// set and after the retry policy's backoff otherwise. The server dead-letters the retry
    /// once its policy's attempts or duration are used up.
    Retry {
        after: Option<Duration>,
        error: String,
    },
    /// A failure that retrying cannot fix: dead-letter the retry now (`ACK_OUTCOME_FAILED`).
    Fail { error: String },
}

impl Outcome {
    /// [`Outcome::Success`].
    pub fn success() -> Self {
        Outcome::Success
    }

    /// [`Outcome::Retry`] after the policy's backoff.
    pub fn retry(error: impl fmt::Display) -> Self {
        Outcome::Retry {
            after: None,
            error: error.to_string(),
        }
    }

    /// [`Outcome::Retry`] no earlier than `after` from now, e.g. from a `Retry-After` header.
    pub fn retry_after(after: Duration, error: impl fmt::Display) -> Self {
        Outcome::Retry {
            after: Some(after),
            error: error.to_string(),
        }
    }

    /// [`Outcome::Fail`]: dead-letter now.
    pub fn fail(error: impl fmt::Display) -> Self {
        Outcome::Fail {
            error: error.to_string(),
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success)
    }

    /// The `Ack` request that reports this outcome for `delivery_id`.
    pub fn into_ack_request(self, delivery_id: impl Into<String>) -> pb::AckRequest {
        let (outcome, retry_after, error) = match self {
            Outcome::Success => (pb::AckOutcome::Succeeded, None, String::new()),
            Outcome::Retry { after, error } => {
                (pb::AckOutcome::Retry, after.map(duration_to_proto), error)
            }
            Outcome::Fail { error } => (pb::AckOutcome::Failed, None, error),
        };
        pb::AckRequest {
            delivery_id: delivery_id.into(),
            outcome: outcome as i32,
            retry_after,
            error,
            ..Default::default()
        }
    }

    /// The outcome reported for a handler that panicked: a retry, since the panic may well be
    /// caused by the environment rather than the job.
    pub(crate) fn from_panic(payload: Box<dyn Any + Send>) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_owned());
        Outcome::retry(format_args!("handler panicked: {message}"))
    }
}

/// A handler's failure, for handlers that return `Result<(), HandlerError>` (or
/// `Result<Outcome, HandlerError>`) and use `?`.
///
/// Any [`std::error::Error`] converts into a *retryable* `HandlerError` carrying the error and
/// its sources as the message, so `?` schedules another attempt. Use [`HandlerError::fail`] for
/// errors that retrying cannot fix:
///
/// ```
/// use rebound_client::executor::{HandlerError, Job};
///
/// async fn handle(job: Job) -> Result<(), HandlerError> {
///     // A payload that is not UTF-8 never becomes valid: dead-letter it.
///     let order = String::from_utf8(job.payload).map_err(HandlerError::fail)?;
///     // Anything else that fails with `?` (here an `io::Error`) is retried.
///     std::fs::write(std::env::temp_dir().join(&job.transaction_id), order)?;
///     Ok(())
/// }
/// ```
///
/// `HandlerError` deliberately does not implement `std::error::Error` itself, which is what
/// allows the blanket conversion (as with `anyhow::Error`).
#[derive(Clone, PartialEq, Eq)]
pub struct HandlerError {
    outcome: Outcome,
}

impl HandlerError {
    /// A transient failure: retry after the policy's backoff.
    pub fn retry(error: impl fmt::Display) -> Self {
        HandlerError {
            outcome: Outcome::retry(error),
        }
    }

    /// A transient failure: retry no earlier than `after` from now.
    pub fn retry_after(after: Duration, error: impl fmt::Display) -> Self {
        HandlerError {
            outcome: Outcome::retry_after(after, error),
        }
    }

    /// A permanent failure: dead-letter now.
    pub fn fail(error: impl fmt::Display) -> Self {
        HandlerError {
            outcome: Outcome::fail(error),
        }
    }

    /// True for [`HandlerError::fail`]: the retry goes to the dead letters.
    pub fn is_permanent(&self) -> bool {
        matches!(self.outcome, Outcome::Fail { .. })
    }

    pub fn message(&self) -> &str {
        match &self.outcome {
            Outcome::Retry { error, .. } | Outcome::Fail { error } => error,
            Outcome::Success => "",
        }
    }

    /// The outcome the executor acknowledges with.
    pub fn into_outcome(self) -> Outcome {
        self.outcome
    }
}

impl<E: std::error::Error + 'static> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::retry(Chain(&e))
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.outcome, f)
    }
}

impl From<HandlerError> for Outcome {
    fn from(e: HandlerError) -> Self {
        e.outcome
    }
}

/// What a handler's future may resolve to: an [`Outcome`], or a `Result` whose error converts
/// into a [`HandlerError`] (so plain `Result<(), std::io::Error>` retries on `Err`).
pub trait IntoOutcome {
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl<E: Into<HandlerError>> IntoOutcome for Result<(), E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(()) => Outcome::Success,
            Err(e) => e.into().outcome,
        }
    }
}

impl<E: Into<HandlerError>> IntoOutcome for Result<Outcome, E> {
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|e| e.into().outcome)
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn ts(seconds: i64) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos: 0 })
    }

    fn delivery() -> pb::Delivery {
        pb::Delivery {
            delivery_id: "d-1".into(),
            service: "orders".into(),
            transaction_id: "tx-1".into(),
            attempt: 3,
            payload: b"body".to_vec(),
            attributes: [("tenant".to_owned(), "acme".to_owned())].into(),
            due_time: ts(1_700_000_060),
            first_enqueued_at: ts(1_700_000_000),
            ack_deadline: ts(1_700_000_090),
            last_error: "timeout".into(),
        }
    }

    #[test]
    fn converts_a_delivery() {
        let job = Job::try_from(delivery()).unwrap();
        assert_eq!(job.delivery_id, "d-1");
        assert_eq!(job.service, "orders");
        assert_eq!(job.transaction_id, "tx-1");
        assert_eq!(job.attempt, 3);
        assert_eq!(job.payload, b"body");
        assert_eq!(job.attributes["tenant"], "acme");
        assert_eq!(
            job.due_time,
            UNIX_EPOCH + Duration::from_secs(1_700_000_060)
        );
        assert_eq!(
            job.first_enqueued_at,
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        assert_eq!(
            job.ack_deadline,
            UNIX_EPOCH + Duration::from_secs(1_700_000_090)
        );
        assert_eq!(job.last_error.as_deref(), Some("timeout"));

        let job = Job::try_from(pb::Delivery {
            last_error: String::new(),
            ..delivery()
        })
        .unwrap();
        assert_eq!(job.last_error, None);
    }

    #[test]
    fn delivery_without_deadline_is_malformed() {
        let e = Job::try_from(pb::Delivery {
            ack_deadline: None,
            ..delivery()
        })
        .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        assert!(e.to_string().contains("ack_deadline"), "{e}");
    }

    #[test]
    fn outcomes_map_to_ack_requests() {
        assert_eq!(
            Outcome::success().into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Succeeded as i32,
                retry_after: None,
                error: String::new(),
                ..Default::default()
            }
        );
        assert_eq!(
            Outcome::retry("503").into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Retry as i32,
                retry_after: None,
                error: "503".into(),
                ..Default::default()
            }
        );
        assert_eq!(
            Outcome::retry_after(Duration::from_millis(2_500), "rate limited")
                .into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Retry as i32,
                retry_after: Some(prost_types::Duration {
                    seconds: 2,
                    nanos: 500_000_000
                }),
                error: "rate limited".into(),
                ..Default::default()
            }
        );
        assert_eq!(
            Outcome::fail("bad payload").into_ack_request(String::from("d")),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Failed as i32,
                retry_after: None,
                error: "bad payload".into(),
                ..Default::default()
            }
        );
    }

    #[test]
    fn results_map_to_outcomes() {
        assert_eq!(Ok::<(), HandlerError>(()).into_outcome(), Outcome::Success);
        assert_eq!(
            Err::<(), _>(HandlerError::fail("nope")).into_outcome(),
            Outcome::fail("nope")
        );
        assert_eq!(
            Err::<(), _>(HandlerError::retry_after(Duration::from_secs(1), "busy")).into_outcome(),
            Outcome::retry_after(Duration::from_secs(1), "busy")
        );
        assert_eq!(
            Ok::<_, HandlerError>(Outcome::fail("x")).into_outcome(),
            Outcome::fail("x")
        );
        // Any std error retries, with its message.
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream timed out");
        assert_eq!(
            Err::<(), _>(io).into_outcome(),
            Outcome::retry("upstream timed out")
        );
        let parse = "x".parse::<u32>().unwrap_err();
        let e = HandlerError::from(parse);
        assert!(!e.is_permanent());
        assert_eq!(e.to_string(), "invalid digit found in string");
        assert!(HandlerError::fail("x").is_permanent());
    }

    #[test]
    fn panics_become_retries() {
        assert_eq!(
            Outcome::from_panic(Box::new("boom")),
            Outcome::retry("handler panicked: boom")
        );
        assert_eq!(
            Outcome::from_panic(Box::new(String::from("index out of range"))),
            Outcome::retry("handler panicked: index out of range")
        );
        assert_eq!(
            Outcome::from_panic(Box::new(42)),
            Outcome::retry("handler panicked: non-string panic payload")
        );
    }
}
