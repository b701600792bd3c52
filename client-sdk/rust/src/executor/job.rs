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
    /// When the retry became due: the end of its window.
    pub due_time: SystemTime,
    pub first_enqueued_at: SystemTime,
    /// The failure reported by the producer or by the previous attempt, if any.
    pub last_error: Option<String>,
    /// The acknowledgement deadline at the time of delivery. While the handler runs, the
    /// executor pushes the deadline on the server with `ExtendDeadline`; this field keeps the
    /// original value.
    pub ack_deadline: SystemTime,
    /// The W3C `traceparent` stored with the retry at its enqueue (the trace of the call that
    /// failed), if it had one; the executor links its `process` span to it.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
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
            traceparent: d
                .trace_context
                .as_ref()
                .map(|t| t.traceparent.clone())
                .filter(|t| !t.is_empty()),
            tracestate: d
                .trace_context
                .map(|t| t.tracestate)
                .filter(|t| !t.is_empty()),
        })
    }
}

/// How a handler finished with a [`Job`]; the executor acknowledges the delivery with it.
///
/// A retry or failure may carry an *error class*, a short machine-readable name for the kind of
/// error such as `"http.404"` (see [`with_error_class`](Outcome::with_error_class)): a
/// [`Retry`](Outcome::Retry) whose class is in the policy's
/// [`non_retryable_error_classes`](crate::RetryPolicy::non_retryable_error_classes) is
/// dead-lettered at once, so which errors are worth retrying can be configured per service
/// instead of decided in every handler.
///
/// ```
/// use std::time::Duration;
/// use rebound_client::Outcome;
///
/// # fn status_of(_: &[u8]) -> u16 { 404 }
/// # let payload = b"";
/// let outcome = match status_of(payload) {
///     200 => Outcome::success(),
///     // Not tried, only postponed: reschedule without using an attempt.
///     429 => Outcome::snooze(Duration::from_secs(30)),
///     // Retried per the policy, unless the policy lists the class as non-retryable.
///     status => Outcome::retry(format_args!("HTTP {status}"))
///         .with_error_class(format!("http.{status}")),
/// };
/// assert_eq!(outcome.error_class(), Some("http.404"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the retry is finished (`ACK_OUTCOME_SUCCEEDED`).
    Success,
    /// A transient failure: schedule the next attempt (`ACK_OUTCOME_RETRY`), after `after` when
    /// set and after the retry policy's backoff otherwise. The server dead-letters the retry
    /// once its policy's attempts or duration are used up, or at once when `error_class` is
    /// one of the policy's non-retryable classes.
    Retry {
        after: Option<Duration>,
        error: String,
        /// See [`Outcome::with_error_class`].
        error_class: Option<String>,
    },
    /// Not tried, only postponed (say, a dependency asked to come back later): schedule the
    /// job again after `after` without using an attempt and without growing later backoff
    /// (`ACK_OUTCOME_RETRY` with `snooze`). The retry's last error is kept, and its
    /// `max_retry_duration`, when set, still applies. The server needs a positive delay, so a
    /// zero `after` is sent as 1 ms.
    Snooze { after: Duration },
    /// The downstream dependency the retry names (`EnqueueRequest::dependency`) is down for
    /// `duration` (a `Retry-After` it answered, say): hold it, so that no retry naming it is
    /// delivered, in any service, until then, and postpone this one to the hold's end without
    /// using an attempt (`ACK_OUTCOME_RETRY` with `hold`). The server refuses it for a retry
    /// that names no dependency; the duration must be 1 s to 24 h.
    Hold {
        duration: Duration,
        reason: String,
        error: String,
    },
    /// A failure that retrying cannot fix: dead-letter the retry now (`ACK_OUTCOME_FAILED`).
    Fail {
        error: String,
        /// See [`Outcome::with_error_class`]; informational only for a failure.
        error_class: Option<String>,
    },
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
            error_class: None,
        }
    }

    /// [`Outcome::Retry`] no earlier than `after` from now, e.g. from a `Retry-After` header.
    pub fn retry_after(after: Duration, error: impl fmt::Display) -> Self {
        Outcome::Retry {
            after: Some(after),
            error: error.to_string(),
            error_class: None,
        }
    }

    /// [`Outcome::Snooze`]: run the job again after `after` without using an attempt.
    pub fn snooze(after: Duration) -> Self {
        Outcome::Snooze { after }
    }

    /// [`Outcome::Hold`]: hold the retry's dependency for `duration`, giving `reason`.
    pub fn hold(duration: Duration, reason: impl fmt::Display) -> Self {
        let reason = reason.to_string();
        Outcome::Hold {
            duration,
            error: reason.clone(),
            reason,
        }
    }

    /// [`Outcome::Fail`]: dead-letter now.
    pub fn fail(error: impl fmt::Display) -> Self {
        Outcome::Fail {
            error: error.to_string(),
            error_class: None,
        }
    }

    /// Classifies the error of a [`Retry`](Outcome::Retry) or [`Fail`](Outcome::Fail) with a
    /// short machine-readable class such as `"http.404"` or `"payment:declined"`, which the
    /// server matches against the retry policy's
    /// [`non_retryable_error_classes`](crate::RetryPolicy::non_retryable_error_classes): a
    /// retry with a listed class is dead-lettered at once, as a failure would be. A class is
    /// 1–128 characters of `[A-Za-z0-9._:/-]`; one that is not can never be listed in a policy,
    /// so it is left out of the ack (with a warning) rather than have the server reject the
    /// ack. No effect on [`Success`](Outcome::Success) and [`Snooze`](Outcome::Snooze).
    pub fn with_error_class(mut self, class: impl Into<String>) -> Self {
        if let Outcome::Retry { error_class, .. } | Outcome::Fail { error_class, .. } = &mut self {
            *error_class = Some(class.into());
        }
        self
    }

    /// The error class given with [`with_error_class`](Outcome::with_error_class), if any.
    pub fn error_class(&self) -> Option<&str> {
        match self {
            Outcome::Retry { error_class, .. } | Outcome::Fail { error_class, .. } => {
                error_class.as_deref()
            }
            Outcome::Success | Outcome::Snooze { .. } | Outcome::Hold { .. } => None,
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success)
    }

    /// The `Ack` request that reports this outcome for `delivery_id`.
    pub fn into_ack_request(self, delivery_id: impl Into<String>) -> pb::AckRequest {
        let delivery_id = delivery_id.into();
        let hold = match &self {
            Outcome::Hold {
                duration, reason, ..
            } => Some(pb::DependencyHold {
                duration: Some(duration_to_proto(*duration)),
                reason: cut(reason, MAX_HOLD_REASON_BYTES).to_owned(),
            }),
            _ => None,
        };
        let (outcome, retry_after, error, error_class, snooze) = match self {
            Outcome::Success => (pb::AckOutcome::Succeeded, None, String::new(), None, false),
            Outcome::Hold { error, .. } => (pb::AckOutcome::Retry, None, error, None, false),
            Outcome::Retry {
                after,
                error,
                error_class,
            } => (pb::AckOutcome::Retry, after, error, error_class, false),
            Outcome::Snooze { after } => (
                pb::AckOutcome::Retry,
                Some(after.max(MIN_SNOOZE)),
                String::new(),
                None,
                true,
            ),
            Outcome::Fail { error, error_class } => {
                (pb::AckOutcome::Failed, None, error, error_class, false)
            }
        };
        let error_class = match error_class {
            Some(class) if !class.is_empty() && !error_class_ok(&class) => {
                tracing::warn!(
                    %delivery_id,
                    error_class = %class,
                    "leaving an invalid error class out of the ack: classes are 1-128 \
                     characters of [A-Za-z0-9._:/-]"
                );
                String::new()
            }
            class => class.unwrap_or_default(),
        };
        pb::AckRequest {
            delivery_id,
            outcome: outcome as i32,
            retry_after: retry_after.map(duration_to_proto),
            error,
            snooze,
            error_class,
            hold,
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

/// The shortest snooze the server accepts (it requires a positive delay).
const MIN_SNOOZE: Duration = Duration::from_millis(1);

/// Longest hold reason the server accepts, in bytes.
const MAX_HOLD_REASON_BYTES: usize = 1024;

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Longest error class the server accepts.
const MAX_ERROR_CLASS_LEN: usize = 128;

/// Whether the server accepts `class` as an error class: 1-128 characters of
/// `[A-Za-z0-9._:/-]`.
fn error_class_ok(class: &str) -> bool {
    !class.is_empty()
        && class.len() <= MAX_ERROR_CLASS_LEN
        && class
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-'))
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

    /// Classifies the error, as [`Outcome::with_error_class`] does: a retry whose class the
    /// policy lists as non-retryable is dead-lettered at once.
    ///
    /// ```
    /// use rebound_client::executor::HandlerError;
    ///
    /// let e = HandlerError::retry("HTTP 404").with_error_class("http.404");
    /// assert_eq!(e.error_class(), Some("http.404"));
    /// ```
    pub fn with_error_class(self, class: impl Into<String>) -> Self {
        HandlerError {
            outcome: self.outcome.with_error_class(class),
        }
    }

    /// True for [`HandlerError::fail`]: the retry goes to the dead letters.
    pub fn is_permanent(&self) -> bool {
        matches!(self.outcome, Outcome::Fail { .. })
    }

    pub fn message(&self) -> &str {
        match &self.outcome {
            Outcome::Retry { error, .. }
            | Outcome::Fail { error, .. }
            | Outcome::Hold { error, .. } => error,
            Outcome::Success | Outcome::Snooze { .. } => "",
        }
    }

    /// The error class given with [`with_error_class`](HandlerError::with_error_class), if any.
    pub fn error_class(&self) -> Option<&str> {
        self.outcome.error_class()
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
            trace_context: Some(pb::TraceContext {
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                tracestate: String::new(),
            }),
            dependency: String::new(),
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
        assert_eq!(
            job.traceparent.as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(job.tracestate, None);

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
    fn a_hold_reason_is_cut_to_the_servers_limit_at_a_character_boundary() {
        let long = "é".repeat(600); // 1,200 bytes
        let r = Outcome::hold(Duration::from_secs(5), &long).into_ack_request("d");
        let reason = r.hold.unwrap().reason;
        assert_eq!(reason.len(), 1024);
        assert!(long.starts_with(&reason));
    }

    #[test]
    fn a_hold_is_a_retry_ack_carrying_the_hold() {
        let r = Outcome::hold(Duration::from_secs(30), "Retry-After: 30").into_ack_request("d");
        assert_eq!(r.outcome, pb::AckOutcome::Retry as i32);
        assert!(!r.snooze && r.retry_after.is_none());
        assert_eq!(r.error, "Retry-After: 30");
        assert_eq!(
            r.hold,
            Some(pb::DependencyHold {
                duration: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0
                }),
                reason: "Retry-After: 30".into(),
            })
        );
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
                snooze: false,
                error_class: String::new(),
                hold: None,
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
    fn snooze_maps_to_a_snoozed_retry() {
        assert_eq!(
            Outcome::snooze(Duration::from_millis(1_500)).into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Retry as i32,
                retry_after: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000
                }),
                error: String::new(),
                snooze: true,
                error_class: String::new(),
                hold: None,
            }
        );
        // The server requires a positive delay with snooze.
        assert_eq!(
            Outcome::snooze(Duration::ZERO)
                .into_ack_request("d")
                .retry_after,
            Some(prost_types::Duration {
                seconds: 0,
                nanos: 1_000_000
            })
        );
        // An error class has nothing to classify on a snooze.
        let snooze = Outcome::snooze(Duration::from_secs(5));
        assert_eq!(snooze.clone().with_error_class("http.429"), snooze);
        assert_eq!(snooze.error_class(), None);
        assert!(!snooze.is_success());
    }

    #[test]
    fn error_classes_map_to_ack_requests() {
        assert_eq!(
            Outcome::retry("HTTP 404")
                .with_error_class("http.404")
                .into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Retry as i32,
                retry_after: None,
                error: "HTTP 404".into(),
                snooze: false,
                error_class: "http.404".into(),
                hold: None,
            }
        );
        assert_eq!(
            Outcome::retry_after(Duration::from_secs(3), "HTTP 503")
                .with_error_class(String::from("http.503"))
                .into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Retry as i32,
                retry_after: Some(prost_types::Duration {
                    seconds: 3,
                    nanos: 0
                }),
                error: "HTTP 503".into(),
                snooze: false,
                error_class: "http.503".into(),
                hold: None,
            }
        );
        assert_eq!(
            Outcome::fail("declined")
                .with_error_class("payment:declined")
                .into_ack_request("d"),
            pb::AckRequest {
                delivery_id: "d".into(),
                outcome: pb::AckOutcome::Failed as i32,
                retry_after: None,
                error: "declined".into(),
                snooze: false,
                error_class: "payment:declined".into(),
                hold: None,
            }
        );
        // The last class given wins; every allowed character passes.
        let class = "A-z_0.9:/x";
        let retry = Outcome::retry("e")
            .with_error_class("first")
            .with_error_class(class);
        assert_eq!(retry.error_class(), Some(class));
        assert_eq!(retry.into_ack_request("d").error_class, class);
        // Success has no error to classify.
        assert_eq!(
            Outcome::success()
                .with_error_class("http.200")
                .into_ack_request("d"),
            Outcome::success().into_ack_request("d")
        );
    }

    #[test]
    fn invalid_error_classes_are_left_out_of_the_ack() {
        for class in [
            String::new(),
            "http 404".into(),
            "é".into(),
            "x".repeat(129),
        ] {
            let ack = Outcome::retry("e")
                .with_error_class(class.clone())
                .into_ack_request("d");
            assert_eq!(ack.error_class, "", "{class:?}");
            assert_eq!(ack.outcome, pb::AckOutcome::Retry as i32);
            assert_eq!(ack.error, "e");
            let ack = Outcome::fail("e")
                .with_error_class(class.clone())
                .into_ack_request("d");
            assert_eq!(ack.error_class, "", "{class:?}");
            assert_eq!(ack.outcome, pb::AckOutcome::Failed as i32);
        }
        let longest = "x".repeat(128);
        assert_eq!(
            Outcome::retry("e")
                .with_error_class(longest.clone())
                .into_ack_request("d")
                .error_class,
            longest
        );
    }

    #[test]
    fn handler_errors_carry_error_classes() {
        let e = HandlerError::retry("HTTP 404").with_error_class("http.404");
        assert_eq!(e.error_class(), Some("http.404"));
        assert_eq!(e.message(), "HTTP 404");
        assert!(!e.is_permanent());
        assert_eq!(
            Err::<(), _>(e).into_outcome(),
            Outcome::retry("HTTP 404").with_error_class("http.404")
        );
        let e = HandlerError::fail("declined").with_error_class("payment:declined");
        assert!(e.is_permanent());
        assert_eq!(
            Outcome::from(e),
            Outcome::Fail {
                error: "declined".into(),
                error_class: Some("payment:declined".into())
            }
        );
        assert_eq!(HandlerError::retry("x").error_class(), None);
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
