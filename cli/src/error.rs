//! Failures of a command, their exit codes and how they are reported.

use std::io::Write;

use tonic::Code;

/// Exit code of a success.
#[cfg(test)]
pub const EXIT_OK: u8 = 0;
/// Unexpected or internal error.
pub const EXIT_INTERNAL: u8 = 1;
/// Usage error: clap's own, and refused confirmations.
pub const EXIT_USAGE: u8 = 2;
/// `NOT_FOUND`.
pub const EXIT_NOT_FOUND: u8 = 3;
/// `INVALID_ARGUMENT`: the node refused the input.
pub const EXIT_INVALID: u8 = 4;
/// `UNAVAILABLE`, `DEADLINE_EXCEEDED`, cannot connect: safe to retry.
pub const EXIT_UNAVAILABLE: u8 = 5;
/// `ALREADY_EXISTS`, `FAILED_PRECONDITION`.
pub const EXIT_CONFLICT: u8 = 6;
/// `UNIMPLEMENTED`.
pub const EXIT_UNIMPLEMENTED: u8 = 7;
/// `UNAUTHENTICATED`, `PERMISSION_DENIED`: a missing, unknown or too narrow `--token`.
pub const EXIT_DENIED: u8 = 8;

/// A failed command: a gRPC-style code name, the exit code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    code: &'static str,
    exit: u8,
    message: String,
}

impl CliError {
    fn new(code: &'static str, exit: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            exit,
            message: message.into(),
        }
    }

    /// A refused confirmation or an argument clap could not check (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new("USAGE", EXIT_USAGE, message)
    }

    /// Something that should not happen (exit 1).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new("INTERNAL", EXIT_INTERNAL, message)
    }

    /// The node did not answer in time (exit 5).
    pub fn deadline(message: impl Into<String>) -> Self {
        Self::new("DEADLINE_EXCEEDED", EXIT_UNAVAILABLE, message)
    }

    /// The node could not be reached (exit 5).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new("UNAVAILABLE", EXIT_UNAVAILABLE, message)
    }

    /// A gRPC status the node (or the transport) answered with.
    pub fn status(status: &tonic::Status) -> Self {
        let code = status.code();
        let mut message = status.message().to_string();
        if message.is_empty() {
            message = code.description().to_string();
        }
        Self::new(code_name(code), exit_code(code), message)
    }

    /// The same error, its message prefixed with what was being done.
    pub fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }

    pub fn exit_code(&self) -> u8 {
        self.exit
    }

    #[cfg(test)]
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// `rebound: CODE: message` on stderr and, with `--json`, an error document on stdout.
    pub fn report(&self, json: bool) {
        if json {
            let doc = serde_json::json!({
                "error": { "code": self.code, "message": self.message }
            });
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{doc}");
            let _ = out.flush();
        }
        eprintln!("rebound: {}: {}", self.code, self.message);
    }
}

/// The exit code for a gRPC status code (see the crate docs).
pub fn exit_code(code: Code) -> u8 {
    match code {
        Code::Ok => 0,
        Code::NotFound => EXIT_NOT_FOUND,
        Code::InvalidArgument | Code::OutOfRange => EXIT_INVALID,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted => EXIT_UNAVAILABLE,
        Code::AlreadyExists | Code::FailedPrecondition => EXIT_CONFLICT,
        Code::Unimplemented => EXIT_UNIMPLEMENTED,
        Code::Unauthenticated | Code::PermissionDenied => EXIT_DENIED,
        Code::Cancelled | Code::Unknown | Code::Aborted | Code::Internal | Code::DataLoss => {
            EXIT_INTERNAL
        }
    }
}

/// The canonical name of a gRPC status code, as in `google.rpc.Code`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// An error and the errors that caused it, joined with `: ` (transport errors hide the useful
/// part, such as "Connection refused", in their sources).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_exit_codes() {
        assert_eq!(exit_code(Code::Ok), EXIT_OK);
        assert_eq!(exit_code(Code::NotFound), 3);
        assert_eq!(exit_code(Code::InvalidArgument), 4);
        assert_eq!(exit_code(Code::Unavailable), 5);
        assert_eq!(exit_code(Code::DeadlineExceeded), 5);
        assert_eq!(exit_code(Code::ResourceExhausted), 5);
        assert_eq!(exit_code(Code::AlreadyExists), 6);
        assert_eq!(exit_code(Code::FailedPrecondition), 6);
        assert_eq!(exit_code(Code::Unimplemented), 7);
        assert_eq!(exit_code(Code::Unauthenticated), 8);
        assert_eq!(exit_code(Code::PermissionDenied), 8);
        assert_eq!(exit_code(Code::Internal), 1);
        assert_eq!(exit_code(Code::Unknown), 1);
        assert_eq!(CliError::usage("x").exit_code(), 2);
        assert_eq!(CliError::unavailable("x").exit_code(), 5);
        assert_eq!(CliError::deadline("x").exit_code(), 5);
        assert_eq!(CliError::internal("x").exit_code(), 1);
    }

    #[test]
    fn status_keeps_the_code_and_message() {
        let e = CliError::status(&tonic::Status::invalid_argument(
            "policy.jitter: must be in [0, 1], got 2",
        ));
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert_eq!(e.exit_code(), 4);
        assert_eq!(e.message, "policy.jitter: must be in [0, 1], got 2");
        // An empty message still says something.
        let e = CliError::status(&tonic::Status::new(Code::NotFound, ""));
        assert_eq!(e.message, Code::NotFound.description());
    }

    #[test]
    fn chain_includes_sources_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("transport error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ));
        assert_eq!(chain(&e), "transport error: Connection refused");
    }
}
