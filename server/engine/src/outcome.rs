//! How an attempt ended and what became of its retry: the domain words of the executor
//! protocol, below both the dispatcher that applies them and the validation that decodes them.

use std::time::Duration;

/// What became of an acknowledged delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Succeeded,
    Rescheduled { due_at_ms: i64, snoozed: bool },
    Dead,
}

/// How an executor (or an expired deadline) ended an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    Succeeded,
    Retry {
        after: Option<Duration>,
        error: String,
        /// Matched against the policy's non-retryable classes.
        error_class: String,
        /// Postponed, not tried: no attempt is used, so later backoff does not grow.
        snooze: bool,
    },
    Failed {
        error: String,
    },
}
