//! Time, injected: whatever reads the time (window math, due times, lease expiry, the boot
//! epoch) reads a `Clock`, so that a test can stand at 23:59:59.999 on New Year's Eve with a
//! `ManualClock` without sleeping.
//!
//! A node with clock sync on (`REBOUND_CLOCK_SYNC`, the default) runs on a `ClusterClock`:
//! the machine's clock corrected by its offset from Cassandra's, which `clock_sync::sync_clock`
//! measures at start and every `REBOUND_CLOCK_SYNC_INTERVAL_MS` (`offset_sample` is one
//! measurement). With it off the node runs on the machine's clock, and the other nodes judge
//! its windows and leases in its own clock (`peers`). `SkewedClock` stands for a machine whose
//! clock is off (`REBOUND_TEST_CLOCK_SKEW_MS`).

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

/// Milliseconds since the Unix epoch, UTC.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;

    /// The correction applied to the machine's clock, when this clock applies one.
    fn offset_ms(&self) -> Option<i64> {
        None
    }
}

pub type SharedClock = Arc<dyn Clock>;

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Another clock moved by a fixed number of milliseconds: a machine whose clock is off, for
/// tests of clock skew (`REBOUND_TEST_CLOCK_SKEW_MS`).
#[derive(Debug, Clone)]
pub struct SkewedClock {
    pub base: SharedClock,
    pub skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.base.now_ms().saturating_add(self.skew_ms)
    }
}

/// A clock that only moves when told to. Cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(now_ms)))
    }

    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A node's clock corrected to Cassandra's: `base + offset`, where the offset is measured
/// against the coordinator's `currentTimestamp()` (see `clock_sync::sync_clock`). Windows are
/// read `skew_margin` after they end and written no earlier than the next one, which is safe
/// only while nodes agree on the time to within the margin; measuring every node against the
/// same database makes that hold even when a node's own clock is off by minutes.
#[derive(Debug)]
pub struct ClusterClock {
    base: SharedClock,
    offset_ms: AtomicI64,
}

impl ClusterClock {
    pub fn new(base: SharedClock) -> Self {
        Self {
            base,
            offset_ms: AtomicI64::new(0),
        }
    }

    pub fn base_now_ms(&self) -> i64 {
        self.base.now_ms()
    }

    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::SeqCst);
    }
}

impl Clock for ClusterClock {
    fn now_ms(&self) -> i64 {
        self.base.now_ms() + self.offset_ms.load(Ordering::SeqCst)
    }

    fn offset_ms(&self) -> Option<i64> {
        Some(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// One offset sample: the reference time `server_ms` was read between `sent_ms` and
/// `received_ms` of the local clock. Returns (offset, round trip).
pub fn offset_sample(sent_ms: i64, server_ms: i64, received_ms: i64) -> (i64, i64) {
    let rtt = (received_ms - sent_ms).max(0);
    (server_ms - (sent_ms + rtt / 2), rtt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_is_taken_at_the_middle_of_the_round_trip() {
        // Local clock 5 s ahead: sent at 105,000, Cassandra read 100,010, back at 105,020.
        assert_eq!(offset_sample(105_000, 100_010, 105_020), (-5_000, 20));
        // A clock that stepped back during the call gives a zero round trip, not a negative.
        assert_eq!(offset_sample(1_000, 1_000, 990), (0, 0));
        let c = ClusterClock::new(Arc::new(ManualClock::new(50_000)));
        c.set_offset_ms(-5_000);
        assert_eq!((c.now_ms(), c.base_now_ms()), (45_000, 50_000));
    }
}
