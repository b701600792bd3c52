//! Retry policy (RETRY acks apply it, docs/architecture.md, "Dispatch"): exponential
//! backoff with jitter, capped, and the two stopping rules. Retries stop at whichever of
//! `max_attempts` and `max_retry_duration` is reached first. The policy itself, as a state
//! row stores it, is the storage contract's (`rebound_store::policy::RetryPolicy`); its rules
//! are here (`Rules`), with the overrides an enqueue or a service gives and their limits.

use std::time::Duration;

use rebound_store::policy::{RetryPolicy, UNLIMITED_ATTEMPTS};

pub const MAX_ERROR_CLASSES: usize = 32;
pub const MAX_ERROR_CLASS_LEN: usize = 128;

/// Checks one error class: 1-128 characters of `[A-Za-z0-9._:/-]`.
pub fn error_class_ok(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= MAX_ERROR_CLASS_LEN
        && c.chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | ':' | '/' | '-'))
}

/// Optional overrides, as an enqueue or a service default carries them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyOverrides {
    pub max_attempts: Option<u32>,
    pub initial_backoff: Option<Duration>,
    pub max_backoff: Option<Duration>,
    pub multiplier: Option<f64>,
    pub jitter: Option<f64>,
    pub max_retry_duration: Option<Duration>,
    pub ack_timeout: Option<Duration>,
    pub max_deliveries_per_attempt: Option<u32>,
    /// `None` (or, from the API, an empty list): keep the underlying list.
    pub non_retryable: Option<Vec<String>>,
}

/// A policy field that is out of range; `field` is the path the caller used.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyError {
    pub field: String,
    pub message: String,
}

/// How long a compensation is retried when its policy does not say (the saga pattern's
/// "retried with backoff for up to 24 h, then a human"; docs/architecture.md, "Compensation
/// chains").
pub const COMPENSATION_RETRY_DURATION: Duration = Duration::from_secs(24 * 3600);

/// A compensation's policy overrides with the compensation defaults: unlimited attempts and
/// at most `COMPENSATION_RETRY_DURATION`, unless it sets them.
pub fn compensation_overrides(mut o: PolicyOverrides) -> PolicyOverrides {
    o.max_attempts.get_or_insert(UNLIMITED_ATTEMPTS);
    o.max_retry_duration
        .get_or_insert(COMPENSATION_RETRY_DURATION);
    o
}

/// Longest single backoff, ack timeout or retry duration a policy may ask for.
pub const MAX_POLICY_DURATION: Duration = Duration::from_secs(365 * 86_400);
pub const MAX_ATTEMPTS_LIMIT: u32 = 1_000_000;

/// The rules of a policy, on the stored `RetryPolicy`.
pub trait Rules {
    /// The policy with `o`'s overrides applied over it.
    fn apply(&self, o: &PolicyOverrides) -> RetryPolicy;
    /// Whether `attempts_made` attempts use up the policy's attempts.
    fn attempts_exhausted(&self, attempts_made: u32) -> bool;
    /// Whether a RETRY with this error class should dead-letter at once.
    fn is_non_retryable(&self, error_class: &str) -> bool;
    /// Checks the policy as a whole; field names are relative (`max_attempts`, ...).
    fn validate(&self) -> Result<(), PolicyError>;
    /// The delay before the next attempt, after `attempts_made` attempts (see the impl).
    fn backoff(&self, attempts_made: u32, unit: f64) -> Duration;
}

impl Rules for RetryPolicy {
    fn apply(&self, o: &PolicyOverrides) -> RetryPolicy {
        RetryPolicy {
            max_attempts: o.max_attempts.unwrap_or(self.max_attempts),
            initial_backoff: o.initial_backoff.unwrap_or(self.initial_backoff),
            max_backoff: o.max_backoff.unwrap_or(self.max_backoff),
            multiplier: o.multiplier.unwrap_or(self.multiplier),
            jitter: o.jitter.unwrap_or(self.jitter),
            max_retry_duration: o.max_retry_duration.or(self.max_retry_duration),
            ack_timeout: o.ack_timeout.unwrap_or(self.ack_timeout),
            max_deliveries_per_attempt: o
                .max_deliveries_per_attempt
                .unwrap_or(self.max_deliveries_per_attempt),
            non_retryable: o
                .non_retryable
                .clone()
                .unwrap_or_else(|| self.non_retryable.clone()),
        }
    }

    /// Whether `attempts_made` attempts use up the policy's attempts.
    fn attempts_exhausted(&self, attempts_made: u32) -> bool {
        self.max_attempts != UNLIMITED_ATTEMPTS && attempts_made >= self.max_attempts
    }

    /// Whether a RETRY with this error class should dead-letter at once.
    fn is_non_retryable(&self, error_class: &str) -> bool {
        !error_class.is_empty() && self.non_retryable.iter().any(|c| c == error_class)
    }

    /// Checks the policy as a whole; field names are relative (`max_attempts`, ...).
    fn validate(&self) -> Result<(), PolicyError> {
        let err = |field: &str, message: String| {
            Err(PolicyError {
                field: field.into(),
                message,
            })
        };
        if self.max_attempts > MAX_ATTEMPTS_LIMIT {
            return err(
                "max_attempts",
                format!(
                    "must be between 1 and {MAX_ATTEMPTS_LIMIT} (or unlimited_attempts), got {}",
                    self.max_attempts
                ),
            );
        }
        if self.non_retryable.len() > MAX_ERROR_CLASSES {
            return err(
                "non_retryable_error_classes",
                format!(
                    "at most {MAX_ERROR_CLASSES} classes, got {}",
                    self.non_retryable.len()
                ),
            );
        }
        if let Some(bad) = self.non_retryable.iter().find(|c| !error_class_ok(c)) {
            let shown: String = bad.chars().take(64).collect();
            return err(
                "non_retryable_error_classes",
                format!(
                    "each class must be 1-{MAX_ERROR_CLASS_LEN} characters of [A-Za-z0-9._:/-], got {shown:?}"
                ),
            );
        }
        if !(self.multiplier.is_finite() && (1.0..=1000.0).contains(&self.multiplier)) {
            return err(
                "multiplier",
                format!("must be between 1.0 and 1000.0, got {}", self.multiplier),
            );
        }
        if !(self.jitter.is_finite() && (0.0..=1.0).contains(&self.jitter)) {
            return err(
                "jitter",
                format!(
                    "must be a fraction between 0.0 and 1.0, got {}",
                    self.jitter
                ),
            );
        }
        for (field, d) in [
            ("initial_backoff", self.initial_backoff),
            ("max_backoff", self.max_backoff),
            ("ack_timeout", self.ack_timeout),
        ] {
            if d > MAX_POLICY_DURATION {
                return err(
                    field,
                    format!(
                        "must be at most {}s, got {}s",
                        MAX_POLICY_DURATION.as_secs(),
                        d.as_secs()
                    ),
                );
            }
        }
        if self.max_backoff < self.initial_backoff {
            return err(
                "max_backoff",
                format!(
                    "must be at least initial_backoff ({:?}), got {:?}",
                    self.initial_backoff, self.max_backoff
                ),
            );
        }
        if self.ack_timeout < Duration::from_secs(1) {
            return err(
                "ack_timeout",
                format!("must be at least 1s, got {:?}", self.ack_timeout),
            );
        }
        if let Some(d) = self.max_retry_duration {
            if d.is_zero() || d > MAX_POLICY_DURATION {
                return err(
                    "max_retry_duration",
                    format!(
                        "must be between 1ms and {}s when set, got {:?}",
                        MAX_POLICY_DURATION.as_secs(),
                        d
                    ),
                );
            }
        }
        if self.max_deliveries_per_attempt == 0 || self.max_deliveries_per_attempt > 1000 {
            return err(
                "max_deliveries_per_attempt",
                format!(
                    "must be between 1 and 1000, got {}",
                    self.max_deliveries_per_attempt
                ),
            );
        }
        Ok(())
    }

    /// The delay before the next attempt, after `attempts_made` attempts (1 = the first try
    /// failed): `initial * multiplier^(attempts_made - 1)`, capped at `max_backoff`, then spread
    /// by `jitter` using `unit`, a uniform sample in [0, 1).
    fn backoff(&self, attempts_made: u32, unit: f64) -> Duration {
        let exp = attempts_made.saturating_sub(1).min(1_000) as i32;
        let base = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exp);
        let capped = base.min(self.max_backoff.as_secs_f64());
        let spread = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let secs = (capped * spread).clamp(0.0, self.max_backoff.as_secs_f64());
        // NaN (a NaN `unit` or `jitter`, which a validated policy never has) is not a delay;
        // the cap is applied again after the float round trip, which may round it up.
        Duration::try_from_secs_f64(secs).map_or(self.max_backoff, |d| d.min(self.max_backoff))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let p = RetryPolicy {
            jitter: 0.0,
            max_backoff: Duration::from_secs(10),
            ..Default::default()
        };
        assert_eq!(p.backoff(1, 0.5), Duration::from_secs(1));
        assert_eq!(p.backoff(2, 0.5), Duration::from_secs(2));
        assert_eq!(p.backoff(4, 0.5), Duration::from_secs(8));
        assert_eq!(p.backoff(5, 0.5), Duration::from_secs(10));
        assert_eq!(p.backoff(u32::MAX, 0.5), Duration::from_secs(10));
        let j = RetryPolicy::default();
        assert_eq!(j.backoff(1, 0.0), Duration::from_millis(800));
        assert_eq!(j.backoff(1, 1.0), Duration::from_millis(1200));
    }

    #[test]
    fn nonsense_is_refused_with_the_field() {
        let base = RetryPolicy::default();
        let cases = [
            (
                PolicyOverrides {
                    max_attempts: Some(MAX_ATTEMPTS_LIMIT + 1),
                    ..Default::default()
                },
                "max_attempts",
            ),
            (
                PolicyOverrides {
                    non_retryable: Some(vec!["ok".into(), "has space".into()]),
                    ..Default::default()
                },
                "non_retryable_error_classes",
            ),
            (
                PolicyOverrides {
                    non_retryable: Some(vec!["x".into(); MAX_ERROR_CLASSES + 1]),
                    ..Default::default()
                },
                "non_retryable_error_classes",
            ),
            (
                PolicyOverrides {
                    multiplier: Some(0.5),
                    ..Default::default()
                },
                "multiplier",
            ),
            (
                PolicyOverrides {
                    multiplier: Some(f64::NAN),
                    ..Default::default()
                },
                "multiplier",
            ),
            (
                PolicyOverrides {
                    jitter: Some(1.5),
                    ..Default::default()
                },
                "jitter",
            ),
            (
                PolicyOverrides {
                    initial_backoff: Some(Duration::from_secs(10)),
                    max_backoff: Some(Duration::from_secs(5)),
                    ..Default::default()
                },
                "max_backoff",
            ),
            (
                PolicyOverrides {
                    ack_timeout: Some(Duration::ZERO),
                    ..Default::default()
                },
                "ack_timeout",
            ),
            (
                PolicyOverrides {
                    max_retry_duration: Some(Duration::ZERO),
                    ..Default::default()
                },
                "max_retry_duration",
            ),
            (
                PolicyOverrides {
                    max_deliveries_per_attempt: Some(0),
                    ..Default::default()
                },
                "max_deliveries_per_attempt",
            ),
        ];
        for (o, field) in cases {
            assert_eq!(base.apply(&o).validate().unwrap_err().field, field);
        }
        assert!(base.validate().is_ok());
    }

    #[test]
    fn unlimited_attempts_and_non_retryable_classes() {
        let p = RetryPolicy::default().apply(&PolicyOverrides {
            max_attempts: Some(UNLIMITED_ATTEMPTS),
            non_retryable: Some(vec!["http.404".into(), "auth/denied".into()]),
            ..Default::default()
        });
        assert!(p.validate().is_ok());
        assert!(!p.attempts_exhausted(u32::MAX - 1));
        assert!(RetryPolicy::default().attempts_exhausted(5));
        assert!(!RetryPolicy::default().attempts_exhausted(4));
        assert!(p.is_non_retryable("http.404"));
        assert!(!p.is_non_retryable("http.503"));
        assert!(!p.is_non_retryable(""));
        // An override without a list keeps the underlying one.
        let q = p.apply(&PolicyOverrides::default());
        assert_eq!(q.non_retryable, p.non_retryable);
    }

    #[test]
    fn backoff_stays_within_a_cap_that_floats_round_up() {
        // Found by `cargo fuzz run duration`: 31535999.999999999 s is 31536000.0 as an f64.
        let cap = Duration::new(31_535_999, 999_999_999);
        let p = RetryPolicy {
            initial_backoff: cap,
            max_backoff: cap,
            jitter: 0.0,
            ..Default::default()
        };
        assert_eq!(p.backoff(1, 0.5), cap);
        assert_eq!(p.backoff(9, 1.0), cap);
    }

    #[test]
    fn backoff_is_total_for_a_nan_sample() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(3, f64::NAN), p.max_backoff);
        assert!(p.backoff(3, f64::INFINITY) <= p.max_backoff);
    }
}
