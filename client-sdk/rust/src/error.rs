//! The client's error type and its mapping from gRPC status codes.

use std::fmt;

use tonic::Code;

/// Why a call to Rebound failed.
///
/// The common gRPC codes get their own variants so callers can `match` on them; anything else
/// is kept whole in [`Error::Other`]. Use [`Error::is_retryable`] to decide whether to try again:
/// every Rebound call is safe to repeat, and `EnqueueRetry` in particular is idempotent by
/// `(service, transaction_id)`, so re-sending an enqueue whose outcome is unknown never
/// schedules the retry twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request was rejected as malformed; the message names the offending field
    /// (`policy.multiplier: ...`). Repeating it unchanged fails the same way.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No retry exists for that service and transaction id (or it expired after finishing).
    #[error("not found: {0}")]
    NotFound(String),
    /// The transaction already succeeded, and its id is still remembered, so it cannot be
    /// enqueued again.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The node or its storage could not be reached. Retryable.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// No answer in time; the call may or may not have taken effect. Retryable.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// The node is at a concurrency or rate limit, or shed the call under load. The client has
    /// already called again after the node's retry hint, up to
    /// [`OVERLOAD_ATTEMPTS`](crate::OVERLOAD_ATTEMPTS) calls within
    /// [`OVERLOAD_WAIT`](crate::OVERLOAD_WAIT); retryable, with backoff.
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// Establishing the connection failed (only [`Client::connect`](crate::Client::connect)
    /// returns this; failures of an established channel arrive as [`Error::Unavailable`]).
    #[error("cannot connect to rebound: {}", Chain(.0))]
    Transport(tonic::transport::Error),
    /// Any other gRPC status, including malformed responses (reported as `INTERNAL`).
    #[error("{:?}: {}", .0.code(), .0.message())]
    Other(tonic::Status),
}

impl Error {
    /// The gRPC code this error corresponds to. Connection failures count as `UNAVAILABLE`,
    /// which is what tonic reports for a channel that loses its server mid-call.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::Unavailable(_) | Error::Transport(_) => Code::Unavailable,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Other(status) => status.code(),
        }
    }

    /// Whether repeating the call (after a backoff) may succeed: true for `UNAVAILABLE`,
    /// `DEADLINE_EXCEEDED` and `RESOURCE_EXHAUSTED`.
    ///
    /// Retrying is always safe: enqueue is idempotent by transaction id (a repeat confirms or
    /// reschedules the pending retry and reports `deduplicated = true`), and get and cancel
    /// have no effect beyond their first success.
    pub fn is_retryable(&self) -> bool {
        is_retryable_code(self.code())
    }
}

pub(crate) fn is_retryable_code(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted
    )
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        let message = || status.message().to_owned();
        match status.code() {
            Code::InvalidArgument => Error::InvalidArgument(message()),
            Code::NotFound => Error::NotFound(message()),
            Code::AlreadyExists => Error::AlreadyExists(message()),
            Code::Unavailable => Error::Unavailable(message()),
            Code::DeadlineExceeded => Error::DeadlineExceeded(message()),
            Code::ResourceExhausted => Error::ResourceExhausted(message()),
            _ => Error::Other(status),
        }
    }
}

impl From<tonic::transport::Error> for Error {
    fn from(e: tonic::transport::Error) -> Self {
        Error::Transport(e)
    }
}

/// A response that does not match the API contract, e.g. a missing required timestamp.
/// Reported as `INTERNAL`, the code tonic itself uses for undecodable responses.
pub(crate) fn malformed(what: impl fmt::Display) -> Error {
    Error::Other(tonic::Status::internal(format!(
        "malformed response from rebound: {what}"
    )))
}

/// Displays an error followed by its sources. tonic's transport errors print only a generic
/// description ("transport error"); the useful part ("Connection refused") is in the sources.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_status_codes_to_variants() {
        for code in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::AlreadyExists,
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
        ] {
            let e = Error::from(tonic::Status::new(code, "msg"));
            let message = match (code, &e) {
                (Code::InvalidArgument, Error::InvalidArgument(m))
                | (Code::NotFound, Error::NotFound(m))
                | (Code::AlreadyExists, Error::AlreadyExists(m))
                | (Code::Unavailable, Error::Unavailable(m))
                | (Code::DeadlineExceeded, Error::DeadlineExceeded(m))
                | (Code::ResourceExhausted, Error::ResourceExhausted(m)) => m,
                _ => panic!("{code:?} mapped to {e:?}"),
            };
            assert_eq!(message, "msg");
            assert_eq!(e.code(), code);
        }
    }

    #[test]
    fn other_codes_keep_the_status() {
        for code in [
            Code::Internal,
            Code::FailedPrecondition,
            Code::Unimplemented,
            Code::Cancelled,
            Code::PermissionDenied,
        ] {
            let e = Error::from(tonic::Status::new(code, "boom"));
            match &e {
                Error::Other(s) => {
                    assert_eq!(s.code(), code);
                    assert_eq!(s.message(), "boom");
                }
                other => panic!("{code:?} mapped to {other:?}"),
            }
            assert_eq!(e.code(), code);
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn only_transient_codes_are_retryable() {
        let retryable = |code| Error::from(tonic::Status::new(code, "")).is_retryable();
        assert!(retryable(Code::Unavailable));
        assert!(retryable(Code::DeadlineExceeded));
        assert!(retryable(Code::ResourceExhausted));
        assert!(!retryable(Code::InvalidArgument));
        assert!(!retryable(Code::NotFound));
        assert!(!retryable(Code::AlreadyExists));
        assert!(!retryable(Code::Internal));
    }

    #[test]
    fn display_includes_code_and_message() {
        let e = Error::from(tonic::Status::invalid_argument(
            "policy.jitter: must be <= 1",
        ));
        assert_eq!(
            e.to_string(),
            "invalid argument: policy.jitter: must be <= 1"
        );
        let e = Error::from(tonic::Status::internal("oops"));
        assert_eq!(e.to_string(), "Internal: oops");
        assert_eq!(
            malformed("missing due_time").to_string(),
            "Internal: malformed response from rebound: missing due_time"
        );
    }
}
