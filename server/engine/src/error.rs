//! The API's error kinds and their one mapping to gRPC status codes. Handlers return
//! `Error`; nothing else builds a `tonic::Status` from an error.

use rebound_common::coalesce::Broken;
use rebound_store::StoreError;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// Bad input; `field` is the request path of the offending value (`policy.multiplier`).
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// No credential, or an unknown one, on a node that requires them.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known credential that does not cover the service (or admin calls).
    #[error("{0}")]
    PermissionDenied(String),
    /// Cassandra could not be reached; nothing was written that could be delivered.
    #[error("{0}")]
    Unavailable(String),
    /// Cassandra did not answer in time; the call is safe to repeat (enqueue is idempotent).
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error("{0}")]
    Unimplemented(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn code(&self) -> tonic::Code {
        match self {
            Error::InvalidArgument { .. } => tonic::Code::InvalidArgument,
            Error::NotFound(_) => tonic::Code::NotFound,
            Error::AlreadyExists(_) => tonic::Code::AlreadyExists,
            Error::FailedPrecondition(_) => tonic::Code::FailedPrecondition,
            Error::ResourceExhausted(_) => tonic::Code::ResourceExhausted,
            Error::Unauthenticated(_) => tonic::Code::Unauthenticated,
            Error::PermissionDenied(_) => tonic::Code::PermissionDenied,
            Error::Unavailable(_) => tonic::Code::Unavailable,
            Error::DeadlineExceeded(_) => tonic::Code::DeadlineExceeded,
            Error::Unimplemented(_) => tonic::Code::Unimplemented,
            Error::Internal(_) => tonic::Code::Internal,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => {
                Error::Unavailable(format!("storage unavailable, nothing was scheduled: {m}"))
            }
            StoreError::Timeout(m) => Error::DeadlineExceeded(format!(
                "storage did not confirm the write (no answer in time, or the connection broke after sending), so its outcome is unknown; the call is idempotent and safe to repeat: {m}"
            )),
            StoreError::Internal(m) => Error::Internal(m),
        }
    }
}

/// A coalesced call of the node's own (a group-committed enqueue) whose flush broke: it may
/// have written some of its rows, so its outcome is unknown.
impl From<Broken> for Error {
    fn from(b: Broken) -> Self {
        Error::DeadlineExceeded(format!(
            "the write was interrupted ({b}), so its outcome is unknown; the call is idempotent and safe to repeat"
        ))
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        let code = e.code();
        match &e {
            Error::Internal(m) => tracing::error!(error = %m, "internal error"),
            Error::Unavailable(m) | Error::DeadlineExceeded(m) => {
                tracing::warn!(error = %m, code = ?code, "storage error")
            }
            _ => {}
        }
        tonic::Status::new(code, e.to_string())
    }
}
