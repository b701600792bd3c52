//! Per-retry policy overrides.

use std::time::Duration;

use rebound_proto::v1 as pb;

use crate::time::{duration_from_proto, duration_to_proto};

/// Overrides of the retry policy for one retry.
///
/// Every field is optional: an unset field takes the service's default, then the node's
/// (1 s initial backoff, ×2, ±20 % jitter, 5 attempts, 30 s ack timeout). Retries stop at
/// whichever of `max_attempts` and `max_retry_duration` is reached first. The server validates
/// the combined policy and rejects bad values with [`Error::InvalidArgument`](crate::Error).
///
/// ```
/// use std::time::Duration;
/// use rebound_client::RetryPolicy;
///
/// let policy = RetryPolicy::new()
///     .max_attempts(10)
///     .initial_backoff(Duration::from_secs(2))
///     .max_backoff(Duration::from_secs(300))
///     .jitter(0.1);
/// assert_eq!(policy.max_attempts, Some(10));
/// assert_eq!(policy.multiplier, None); // left to the service default
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, counting the caller's own first try. At least 1.
    pub max_attempts: Option<u32>,
    /// Delay before the first retry.
    pub initial_backoff: Option<Duration>,
    /// Cap on any single delay. At least `initial_backoff`.
    pub max_backoff: Option<Duration>,
    /// Growth factor between attempts. At least 1.0.
    pub multiplier: Option<f64>,
    /// Random spread applied to each delay, as a fraction in `[0, 1]`: 0.2 means ±20 %.
    pub jitter: Option<f64>,
    /// Stop retrying once this long has passed since the first enqueue. Unset: unlimited.
    pub max_retry_duration: Option<Duration>,
    /// How long an executor has to acknowledge a delivery before it is redelivered.
    pub ack_timeout: Option<Duration>,
    /// How many ack-deadline expiries one attempt may use before it counts as failed.
    pub max_deliveries_per_attempt: Option<u32>,
}

impl RetryPolicy {
    /// A policy that overrides nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`RetryPolicy::max_attempts`].
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Sets [`RetryPolicy::initial_backoff`].
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.initial_backoff = Some(d);
        self
    }

    /// Sets [`RetryPolicy::max_backoff`].
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.max_backoff = Some(d);
        self
    }

    /// Sets [`RetryPolicy::multiplier`].
    pub fn multiplier(mut self, m: f64) -> Self {
        self.multiplier = Some(m);
        self
    }

    /// Sets [`RetryPolicy::jitter`].
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = Some(fraction);
        self
    }

    /// Sets [`RetryPolicy::max_retry_duration`].
    pub fn max_retry_duration(mut self, d: Duration) -> Self {
        self.max_retry_duration = Some(d);
        self
    }

    /// Sets [`RetryPolicy::ack_timeout`].
    pub fn ack_timeout(mut self, d: Duration) -> Self {
        self.ack_timeout = Some(d);
        self
    }

    /// Sets [`RetryPolicy::max_deliveries_per_attempt`].
    pub fn max_deliveries_per_attempt(mut self, n: u32) -> Self {
        self.max_deliveries_per_attempt = Some(n);
        self
    }
}

impl From<RetryPolicy> for pb::RetryPolicy {
    fn from(p: RetryPolicy) -> Self {
        pb::RetryPolicy {
            max_attempts: p.max_attempts,
            initial_backoff: p.initial_backoff.map(duration_to_proto),
            max_backoff: p.max_backoff.map(duration_to_proto),
            multiplier: p.multiplier,
            jitter: p.jitter,
            max_retry_duration: p.max_retry_duration.map(duration_to_proto),
            ack_timeout: p.ack_timeout.map(duration_to_proto),
            max_deliveries_per_attempt: p.max_deliveries_per_attempt,
            ..Default::default()
        }
    }
}

/// Negative durations, which the server never sends, read as zero.
impl From<pb::RetryPolicy> for RetryPolicy {
    fn from(p: pb::RetryPolicy) -> Self {
        RetryPolicy {
            max_attempts: p.max_attempts,
            initial_backoff: p.initial_backoff.map(duration_from_proto),
            max_backoff: p.max_backoff.map(duration_from_proto),
            multiplier: p.multiplier,
            jitter: p.jitter,
            max_retry_duration: p.max_retry_duration.map(duration_from_proto),
            ack_timeout: p.ack_timeout.map(duration_from_proto),
            max_deliveries_per_attempt: p.max_deliveries_per_attempt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: i64) -> Option<prost_types::Duration> {
        Some(prost_types::Duration {
            seconds: s,
            nanos: 0,
        })
    }

    #[test]
    fn empty_policy_overrides_nothing() {
        assert_eq!(
            pb::RetryPolicy::from(RetryPolicy::new()),
            pb::RetryPolicy::default()
        );
    }

    #[test]
    fn every_field_converts() {
        let policy = RetryPolicy::new()
            .max_attempts(7)
            .initial_backoff(Duration::from_secs(2))
            .max_backoff(Duration::from_secs(60))
            .multiplier(1.5)
            .jitter(0.25)
            .max_retry_duration(Duration::from_secs(3_600))
            .ack_timeout(Duration::from_millis(45_500))
            .max_deliveries_per_attempt(3);
        let proto = pb::RetryPolicy::from(policy);
        assert_eq!(
            proto,
            pb::RetryPolicy {
                max_attempts: Some(7),
                initial_backoff: secs(2),
                max_backoff: secs(60),
                multiplier: Some(1.5),
                jitter: Some(0.25),
                max_retry_duration: secs(3_600),
                ack_timeout: Some(prost_types::Duration {
                    seconds: 45,
                    nanos: 500_000_000
                }),
                max_deliveries_per_attempt: Some(3),
                ..Default::default()
            }
        );
        assert_eq!(RetryPolicy::from(proto), policy);
    }

    #[test]
    fn partial_policy_leaves_the_rest_unset() {
        let proto = pb::RetryPolicy::from(RetryPolicy::new().jitter(0.0));
        assert_eq!(
            proto,
            pb::RetryPolicy {
                jitter: Some(0.0),
                ..Default::default()
            }
        );
    }
}
