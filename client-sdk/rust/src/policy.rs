//! Per-retry policy overrides.

use std::time::Duration;

use rebound_proto::v1 as pb;

use crate::time::{duration_from_proto, duration_to_proto};

/// Overrides of the retry policy for one retry.
///
/// Every field is optional: an unset field takes the service's default, then the node's
/// (1 s initial backoff, ×2, ±20 % jitter, 5 attempts, 30 s ack timeout). Retries stop at
/// whichever of `max_attempts` and `max_retry_duration` is reached first; with
/// [`unlimited_attempts`](Self::unlimited_attempts) only `max_retry_duration` (if any) stops
/// them. An executor's RETRY whose [error class](crate::Outcome::with_error_class) is one of
/// the [`non_retryable_error_classes`](Self::non_retryable_error_classes) dead-letters the
/// retry at once. The server validates the combined policy and rejects bad values with
/// [`Error::InvalidArgument`](crate::Error).
///
/// ```
/// use std::time::Duration;
/// use rebound_client::RetryPolicy;
///
/// let policy = RetryPolicy::new()
///     .max_attempts(10)
///     .initial_backoff(Duration::from_secs(2))
///     .max_backoff(Duration::from_secs(300))
///     .jitter(0.1)
///     .non_retryable("http.404")
///     .non_retryable_error_classes(["http.400", "payment:declined"]);
/// assert_eq!(policy.max_attempts, Some(10));
/// assert_eq!(policy.multiplier, None); // left to the service default
/// assert_eq!(
///     policy.non_retryable_error_classes,
///     ["http.404", "http.400", "payment:declined"]
/// );
///
/// // No limit on attempts, but give up after a day.
/// let forever = RetryPolicy::new()
///     .unlimited_attempts()
///     .max_retry_duration(Duration::from_secs(86_400));
/// assert_eq!(forever.unlimited_attempts, Some(true));
/// assert_eq!(forever.max_attempts, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, counting the caller's own first try. At least 1. Must be unset when
    /// `unlimited_attempts` is `Some(true)`.
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
    /// Error classes that retrying cannot fix: an executor's RETRY that reports one of these
    /// [error classes](crate::Outcome::with_error_class) dead-letters the retry at once, as a
    /// FAIL would. At most 32 classes of 1–128 characters of `[A-Za-z0-9._:/-]`. Empty: on an
    /// enqueue, keeps the service's list.
    pub non_retryable_error_classes: Vec<String>,
    /// `Some(true)`: no limit on attempts (`max_retry_duration`, when set, still applies), and
    /// `max_attempts` must be unset. Never a default: attempts are unlimited only when asked
    /// for explicitly, here or in the service's policy. `None` and `Some(false)` are the same
    /// to the server: the attempt limit comes from `max_attempts` or the defaults.
    pub unlimited_attempts: Option<bool>,
}

impl RetryPolicy {
    /// A policy that overrides nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`RetryPolicy::max_attempts`]. Replaces an earlier
    /// [`unlimited_attempts`](Self::unlimited_attempts()).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self.unlimited_attempts = None;
        self
    }

    /// Sets [`RetryPolicy::unlimited_attempts`]: retry with no limit on attempts, until the
    /// retry succeeds, fails for good, is cancelled or runs out of `max_retry_duration`.
    /// Replaces an earlier [`max_attempts`](Self::max_attempts()).
    pub fn unlimited_attempts(mut self) -> Self {
        self.unlimited_attempts = Some(true);
        self.max_attempts = None;
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

    /// Adds one class to [`RetryPolicy::non_retryable_error_classes`]; a class already listed
    /// is not added again.
    pub fn non_retryable(mut self, class: impl Into<String>) -> Self {
        let class = class.into();
        if !self.non_retryable_error_classes.contains(&class) {
            self.non_retryable_error_classes.push(class);
        }
        self
    }

    /// Adds several classes to [`RetryPolicy::non_retryable_error_classes`], keeping those
    /// already listed; a class already listed is not added again.
    pub fn non_retryable_error_classes<C>(self, classes: impl IntoIterator<Item = C>) -> Self
    where
        C: Into<String>,
    {
        classes.into_iter().fold(self, Self::non_retryable)
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
            non_retryable_error_classes: p.non_retryable_error_classes,
            unlimited_attempts: p.unlimited_attempts,
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
            non_retryable_error_classes: p.non_retryable_error_classes,
            unlimited_attempts: p.unlimited_attempts,
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
            .max_deliveries_per_attempt(3)
            .non_retryable("http.404")
            .non_retryable_error_classes(["http.410", "payment:declined", "http.404"]);
        let proto = pb::RetryPolicy::from(policy.clone());
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
                non_retryable_error_classes: vec![
                    "http.404".into(),
                    "http.410".into(),
                    "payment:declined".into()
                ],
                unlimited_attempts: None,
            }
        );
        assert_eq!(RetryPolicy::from(proto), policy);

        // Unlimited attempts: max_attempts unset, as the server requires.
        let policy = RetryPolicy::new()
            .max_attempts(7)
            .unlimited_attempts()
            .max_retry_duration(Duration::from_secs(86_400));
        let proto = pb::RetryPolicy::from(policy.clone());
        assert_eq!(
            proto,
            pb::RetryPolicy {
                max_attempts: None,
                unlimited_attempts: Some(true),
                max_retry_duration: secs(86_400),
                ..Default::default()
            }
        );
        assert_eq!(RetryPolicy::from(proto), policy);
    }

    #[test]
    fn every_proto_field_converts_back() {
        // The server's effective policy sets everything; an explicit `false` survives too.
        for unlimited_attempts in [None, Some(false), Some(true)] {
            let proto = pb::RetryPolicy {
                max_attempts: (unlimited_attempts != Some(true)).then_some(5),
                initial_backoff: secs(1),
                max_backoff: secs(300),
                multiplier: Some(2.0),
                jitter: Some(0.2),
                max_retry_duration: secs(600),
                ack_timeout: secs(30),
                max_deliveries_per_attempt: Some(3),
                non_retryable_error_classes: vec!["http.404".into(), "grpc:NOT_FOUND".into()],
                unlimited_attempts,
            };
            let policy = RetryPolicy::from(proto.clone());
            assert_eq!(policy.unlimited_attempts, unlimited_attempts);
            assert_eq!(
                policy.non_retryable_error_classes,
                ["http.404", "grpc:NOT_FOUND"]
            );
            assert_eq!(pb::RetryPolicy::from(policy), proto);
        }
    }

    #[test]
    fn max_attempts_and_unlimited_attempts_replace_each_other() {
        let p = RetryPolicy::new().unlimited_attempts().max_attempts(3);
        assert_eq!((p.max_attempts, p.unlimited_attempts), (Some(3), None));
        let p = RetryPolicy::new().max_attempts(3).unlimited_attempts();
        assert_eq!((p.max_attempts, p.unlimited_attempts), (None, Some(true)));
    }

    #[test]
    fn non_retryable_classes_accumulate_without_duplicates() {
        let p = RetryPolicy::new()
            .non_retryable_error_classes(["a", "b"])
            .non_retryable("a")
            .non_retryable(String::from("c"))
            .non_retryable_error_classes(Vec::<String>::new());
        assert_eq!(p.non_retryable_error_classes, ["a", "b", "c"]);
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
