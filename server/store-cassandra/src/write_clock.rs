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
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// The longest a conditional write waits for the clock to pass the store's last write time
/// (`WriteClock::lwt_wait`): beyond it the last write time came from a clock this far ahead,
/// which clock sync at start refuses.
const MAX_LWT_WAIT: Duration = Duration::from_secs(2);

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

    /// How long a conditional write waits before it goes, so that its Paxos timestamp lands
    /// above every write time this store handed out or read.
    ///
    /// Cassandra numbers a lightweight transaction itself, from the coordinator's clock in
    /// whole milliseconds (`millis * 1000`, plus one per write it numbers in that
    /// millisecond), and refuses a timestamp of the client's on it. A plain write this store
    /// numbered a few hundred microseconds into the same millisecond would then stand above
    /// the conditional write that read it and passed: the condition held, the write was
    /// "applied", and the row still shows the plain write. So a conditional write waits for
    /// the millisecond after the last write time, on the clock the coordinator shares with
    /// this machine (the nodes keep theirs within the skew margin of Cassandra's). In a quiet
    /// store the last write is long past and it does not wait; in a busy one it waits under
    /// a millisecond.
    pub(crate) fn lwt_wait(&self) -> Option<Duration> {
        self.lwt_wait_at(now_micros())
    }

    fn lwt_wait_at(&self, now: i64) -> Option<Duration> {
        let last = self.last.load(Ordering::Relaxed);
        // The first microsecond of the millisecond after `last`.
        let past = last.div_euclid(1000).saturating_add(1).saturating_mul(1000);
        let wait = past.saturating_sub(now);
        (wait > 0).then(|| Duration::from_micros(wait as u64).min(MAX_LWT_WAIT))
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

    #[test]
    fn a_conditional_write_waits_for_the_millisecond_after_the_last_write() {
        let c = WriteClock::default();
        assert_eq!(c.next_at(5_000_400), 5_000_400);
        // In the same millisecond: wait to 5_001_000.
        assert_eq!(c.lwt_wait_at(5_000_450), Some(Duration::from_micros(550)));
        assert_eq!(c.lwt_wait_at(5_000_999), Some(Duration::from_micros(1)));
        // In the next one: go.
        assert_eq!(c.lwt_wait_at(5_001_000), None);
        assert_eq!(c.lwt_wait_at(9_000_000), None);
        // A write time read from a clock far ahead: the wait is capped.
        c.observe(60_000_000);
        assert_eq!(c.lwt_wait_at(5_001_000), Some(MAX_LWT_WAIT));
    }

    proptest! {
        #[test]
        fn a_conditional_write_after_its_wait_is_numbered_above_every_write(
            writes in proptest::collection::vec(0i64..1 << 52, 1..20),
        ) {
            let c = WriteClock::default();
            let mut now = 0;
            for w in writes {
                now = now.max(c.next_at(w));
                if let Some(d) = c.lwt_wait_at(now) {
                    now += d.as_micros() as i64;
                }
                // What the coordinator gives a write at `now`, at the least.
                let lwt = now.div_euclid(1000) * 1000;
                prop_assert!(lwt > c.last.load(Ordering::Relaxed));
            }
        }

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
