//! Capped exponential backoff with jitter, for reconnecting and for re-sending acks.

use std::time::Duration;

/// Delays of `initial`, `2 * initial`, `4 * initial`, ... capped at `max`, each scaled by a
/// random factor in `[0.5, 1]` so that many executors cut off by the same outage do not
/// reconnect in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The delay before retry number `failures` (0 for the first retry), for a jitter draw
    /// `unit` in `[0, 1]`: 0 gives half the exponential delay, 1 all of it.
    pub(crate) fn delay_with(&self, failures: u32, unit: f64) -> Duration {
        let factor = 2u32.checked_pow(failures).unwrap_or(u32::MAX);
        let full = self.initial.saturating_mul(factor).min(self.max);
        full.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
    }

    /// [`delay_with`](Self::delay_with) a random jitter draw.
    pub(crate) fn delay(&self, failures: u32) -> Duration {
        self.delay_with(failures, rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(5),
    };

    #[test]
    fn doubles_up_to_the_cap() {
        let full: Vec<_> = (0..8).map(|n| B.delay_with(n, 1.0)).collect();
        assert_eq!(
            full,
            [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000].map(Duration::from_millis)
        );
        // Huge failure counts neither overflow nor exceed the cap.
        assert_eq!(B.delay_with(40, 1.0), Duration::from_secs(5));
        assert_eq!(B.delay_with(u32::MAX, 1.0), Duration::from_secs(5));
    }

    #[test]
    fn jitter_takes_up_to_half_off() {
        assert_eq!(B.delay_with(2, 0.0), Duration::from_millis(200));
        assert_eq!(B.delay_with(2, 0.5), Duration::from_millis(300));
        assert_eq!(B.delay_with(10, 0.0), Duration::from_millis(2_500));
        // Out-of-range draws are clamped.
        assert_eq!(B.delay_with(0, 7.0), Duration::from_millis(100));
        assert_eq!(B.delay_with(0, -1.0), Duration::from_millis(50));
        for n in 0..10 {
            let d = B.delay(n);
            assert!(
                d >= B.delay_with(n, 0.0) && d <= B.delay_with(n, 1.0),
                "{n}: {d:?}"
            );
        }
    }
}
