//! A retry's effective policy as its state row stores it, and the node's defaults. What the
//! policy means (backoff, the stopping rules, overrides and their limits) is the engine's
//! (`rebound_engine::policy`).

use std::time::Duration;

/// The effective policy of one retry: node defaults, then service defaults, then the enqueue's
/// overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, counting the caller's first try. `UNLIMITED_ATTEMPTS` (0): no limit,
    /// which a caller gets only by asking for it explicitly.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub multiplier: f64,
    /// Fraction in [0, 1]: each delay is spread uniformly over `delay * (1 +/- jitter)`.
    pub jitter: f64,
    /// None: no limit on the total time spent retrying.
    pub max_retry_duration: Option<Duration>,
    pub ack_timeout: Duration,
    pub max_deliveries_per_attempt: u32,
    /// Error classes for which a RETRY ack dead-letters at once.
    pub non_retryable: Vec<String>,
}

/// `max_attempts` value meaning "no limit on attempts".
pub const UNLIMITED_ATTEMPTS: u32 = 0;

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            multiplier: 2.0,
            jitter: 0.2,
            max_retry_duration: None,
            ack_timeout: Duration::from_secs(30),
            max_deliveries_per_attempt: 3,
            non_retryable: Vec::new(),
        }
    }
}
