//! The write timestamps of the state rows, numbered by the store itself (docs/architecture.md,
//! "A SUCCEEDED ack is one write"): every plain write takes an even number of microseconds,
//! above every write time this store has read or written, so that a settle, which goes at the
//! write time it read plus one (odd), never ties with any other write.
//!
//! Left to the coordinator, Cassandra numbers the writes of one millisecond one microsecond
//! apart, so a write made in the same millisecond as the one a feed read could take the
//! settle's own timestamp; two cells of equal timestamp are then reconciled by value, cell by
//! cell, and the row could mix the two writes.

use std::{
    sync::atomic::{AtomicI64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

/// A hybrid clock in microseconds: the machine's clock, raised past every write time seen.
#[derive(Debug, Default)]
pub(crate) struct WriteClock {
    /// The highest write time read or handed out.
    last: AtomicI64,
}

impl WriteClock {
    /// A write time was read from a row (its `WRITETIME`): every later write of this store
    /// goes above it.
    pub(crate) fn observe(&self, written: i64) {
        self.last.fetch_max(written, Ordering::Relaxed);
    }

    /// The timestamp of the next plain write: even, and at least two above every write time
    /// seen, so never the `read + 1` of a settle of a row read before it.
    pub(crate) fn next(&self) -> i64 {
        self.next_at(now_micros())
    }

    fn next_at(&self, now: i64) -> i64 {
        let now = now & !1;
        let mut current = self.last.load(Ordering::Relaxed);
        loop {
            let next = now.max(above(current));
            match self.last.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return next,
                Err(seen) => current = seen,
            }
        }
    }
}

/// The least even number at least two above `t`.
fn above(t: i64) -> i64 {
    t.saturating_add(3) & !1
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn writes_are_even_and_climb_two_apart_on_a_clock_that_stands_still() {
        let c = WriteClock::default();
        assert_eq!(c.next_at(1_000_001), 1_000_000);
        assert_eq!(c.next_at(1_000_001), 1_000_002);
        assert_eq!(c.next_at(999_000), 1_000_004);
    }

    #[test]
    fn a_write_after_a_read_goes_two_above_it_even_when_the_read_was_odd() {
        let c = WriteClock::default();
        c.observe(5_000_001);
        // Not 5_000_002: the settle of that read takes it.
        assert_eq!(c.next_at(1), 5_000_004);
        c.observe(6_000_000);
        assert_eq!(c.next_at(1), 6_000_002);
    }

    proptest! {
        #[test]
        fn no_write_ties_with_a_settle_of_anything_read_before_it(
            reads in proptest::collection::vec(0i64..1 << 52, 1..20),
            nows in proptest::collection::vec(0i64..1 << 52, 1..20),
        ) {
            let c = WriteClock::default();
            let mut seen = i64::MIN;
            let mut last = i64::MIN;
            for (r, n) in reads.iter().zip(nows.iter().cycle()) {
                c.observe(*r);
                seen = seen.max(*r);
                let t = c.next_at(*n);
                prop_assert_eq!(t % 2, 0);
                prop_assert!(t >= seen + 2, "{} after a read of {}", t, seen);
                prop_assert!(t > last);
                last = t;
            }
        }
    }
}
