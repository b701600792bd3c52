//! The memory path of dispatch (docs/architecture.md, "Dispatch": "The timer"): the retries this
//! node wrote into its own lanes, due within a horizon, kept in memory by due time so that the
//! dispatcher delivers each at its due time instead of when its window is scanned. Cassandra
//! stays the log: an entry is armed only after the retry's state row is durable, and anything
//! the timer does not hold (full, beyond the horizon, after a restart or a lease move) is found
//! by the window scan, as before.
//!
//! Bounded in count and in bytes: at either bound a new entry is refused (the scan delivers it).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use tokio::sync::Notify;

use crate::ownership::Ownership;
use rebound_store::Location;

/// Bounds of the timer (`REBOUND_TIMER_MAX_ENTRIES`, `REBOUND_TIMER_MAX_BYTES`,
/// `REBOUND_TIMER_HORIZON_SECONDS`). `max_entries` 0 turns the timer off.
#[derive(Debug, Clone, Copy)]
pub struct TimerOptions {
    pub max_entries: usize,
    pub max_bytes: usize,
    pub horizon_ms: i64,
    /// Lease validity an entry's range needs left when it is armed (the fence margin).
    pub fence_margin_ms: i64,
}

/// One retry to deliver at its due time: the pointer it was written as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub service: String,
    pub transaction_id: String,
    pub generation: i64,
    pub due_ms: i64,
    pub location: Location,
    /// The token of the pointer's lane (`token::instance_token`): which lease covers it.
    pub token: i64,
    /// The size of its payload, which its delivery reads back: what a take is bounded by.
    pub payload_bytes: usize,
}

/// The timer's size, as the metrics show it.
fn gauges(inner: &Inner) {
    let m = crate::metric_definitions::metrics();
    m.timer_entries.set(inner.count as i64);
    m.timer_bytes.set(inner.bytes as i64);
}

/// What one entry holds in memory: its strings and a fixed share for the rest and the maps.
fn entry_bytes(e: &Entry) -> usize {
    e.service.len() + e.transaction_id.len() + e.location.instance.len() + 160
}

#[derive(Debug, Default)]
struct Inner {
    /// Per service, entries by (due, arming order).
    services: HashMap<String, BTreeMap<(i64, u64), Entry>>,
    count: usize,
    bytes: usize,
    seq: u64,
    /// Services with a firing task (`take_due` until it comes back empty).
    firing: HashSet<String>,
    /// Entries set aside for a moment (`park`), counted in `count` and `bytes`.
    parked: Vec<Entry>,
}

/// Why `Timer::arm` refused an entry (the scan delivers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Off,
    BeyondHorizon,
    Full,
    /// Its lane's range is not held by this node, or not for long enough.
    NotOwned,
}

#[derive(Debug)]
pub struct Timer {
    inner: Mutex<Inner>,
    opts: TimerOptions,
    ownership: Arc<dyn Ownership>,
    /// Wakes the timer's loop when an entry falls due before it planned to wake.
    pub(crate) changed: Notify,
    /// When the loop plans to wake next (ms, this node's clock).
    wake_at: AtomicI64,
    armed: AtomicU64,
    refused: AtomicU64,
}

impl Timer {
    pub fn new(opts: TimerOptions, ownership: Arc<dyn Ownership>) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            opts,
            ownership,
            changed: Notify::new(),
            wake_at: AtomicI64::new(i64::MAX),
            armed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("timer lock")
    }

    /// Holds `entry` for delivery at its due time, if it is due within the horizon, its lane's
    /// range is held by this node past `now_ms` plus the fence margin, and there is room.
    /// Called once the retry's state row is durable.
    pub fn arm(&self, entry: Entry, now_ms: i64) -> Result<(), Refused> {
        let r = self.try_arm(entry, now_ms);
        match r {
            Ok(()) => self.armed.fetch_add(1, Ordering::Relaxed),
            Err(_) => {
                crate::metric_definitions::metrics().timer("refused", 1);
                self.refused.fetch_add(1, Ordering::Relaxed)
            }
        };
        r
    }

    fn try_arm(&self, entry: Entry, now_ms: i64) -> Result<(), Refused> {
        if self.opts.max_entries == 0 {
            return Err(Refused::Off);
        }
        if entry.due_ms > now_ms.saturating_add(self.opts.horizon_ms) {
            return Err(Refused::BeyondHorizon);
        }
        let until = now_ms + self.opts.fence_margin_ms;
        let owned = self
            .ownership
            .held()
            .iter()
            .any(|l| l.range.contains(entry.token) && l.valid_until_ms >= until);
        if !owned {
            return Err(Refused::NotOwned);
        }
        self.insert(entry)
    }

    /// Sets `entry` aside until `unpark` (its lease is held but about to be renewed): it is
    /// tried again after a pause of real time, whatever the clock does. Within the bounds.
    pub fn park(&self, entry: Entry) -> Result<(), Refused> {
        let mut inner = self.lock();
        let bytes = entry_bytes(&entry);
        if inner.count >= self.opts.max_entries || inner.bytes + bytes > self.opts.max_bytes {
            return Err(Refused::Full);
        }
        inner.count += 1;
        inner.bytes += bytes;
        inner.parked.push(entry);
        Ok(())
    }

    /// Whether entries are parked (the loop then unparks them after a short pause).
    pub fn has_parked(&self) -> bool {
        !self.lock().parked.is_empty()
    }

    /// Puts the parked entries back, due as they were.
    pub fn unpark(&self) {
        let mut inner = self.lock();
        let parked = std::mem::take(&mut inner.parked);
        for e in parked {
            inner.count -= 1;
            inner.bytes -= entry_bytes(&e);
            // Room was counted for it: this cannot be refused.
            let _ = Self::insert_locked(&mut inner, &self.opts, e);
        }
    }

    fn insert(&self, entry: Entry) -> Result<(), Refused> {
        let due = entry.due_ms;
        {
            let mut inner = self.lock();
            Self::insert_locked(&mut inner, &self.opts, entry)?;
            gauges(&inner);
        }
        if due < self.wake_at.load(Ordering::Relaxed) {
            self.changed.notify_one();
        }
        Ok(())
    }

    fn insert_locked(inner: &mut Inner, opts: &TimerOptions, entry: Entry) -> Result<(), Refused> {
        let bytes = entry_bytes(&entry);
        if inner.count >= opts.max_entries || inner.bytes + bytes > opts.max_bytes {
            return Err(Refused::Full);
        }
        inner.seq += 1;
        let seq = inner.seq;
        inner.count += 1;
        inner.bytes += bytes;
        inner
            .services
            .entry(entry.service.clone())
            .or_default()
            .insert((entry.due_ms, seq), entry);
        Ok(())
    }

    /// The earliest due time of a service without a firing task.
    pub fn next_due(&self) -> Option<i64> {
        let inner = self.lock();
        inner
            .services
            .iter()
            .filter(|(s, _)| !inner.firing.contains(*s))
            .filter_map(|(_, m)| m.keys().next().map(|k| k.0))
            .min()
    }

    /// Records when the loop plans to wake (an arm due before it notifies the loop).
    pub(crate) fn sleeping_until(&self, at_ms: i64) {
        self.wake_at.store(at_ms, Ordering::Relaxed);
    }

    /// The services with an entry due at `now_ms` and no firing task; each is marked firing
    /// until its `take_due` comes back empty.
    pub fn start_firing(&self, now_ms: i64) -> Vec<String> {
        let mut inner = self.lock();
        let due: Vec<String> = inner
            .services
            .iter()
            .filter(|(s, m)| {
                !inner.firing.contains(*s) && m.keys().next().is_some_and(|k| k.0 <= now_ms)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for s in &due {
            inner.firing.insert(s.clone());
        }
        due
    }

    /// Up to `max` entries of `service` due at `now_ms`, earliest first, out of the timer, and
    /// no more than `max_payload_bytes` of payloads unless the first alone is. Empty when none
    /// is due, and then the service's firing task ends.
    pub fn take_due(
        &self,
        service: &str,
        now_ms: i64,
        max: usize,
        max_payload_bytes: usize,
    ) -> Vec<Entry> {
        let mut out = Vec::new();
        {
            let mut inner = self.lock();
            let inner = &mut *inner;
            let mut payload_bytes = 0;
            if let Some(m) = inner.services.get_mut(service) {
                while out.len() < max {
                    let Some(first) = m.first_entry() else { break };
                    if first.key().0 > now_ms {
                        break;
                    }
                    payload_bytes += first.get().payload_bytes;
                    if payload_bytes > max_payload_bytes && !out.is_empty() {
                        break;
                    }
                    let e = first.remove();
                    inner.count -= 1;
                    inner.bytes -= entry_bytes(&e);
                    out.push(e);
                }
                if m.is_empty() {
                    inner.services.remove(service);
                }
            }
            if out.is_empty() {
                inner.firing.remove(service);
            } else {
                gauges(inner);
            }
        }
        if out.is_empty() {
            // The loop left this service to its firing task, which ends here: the loop must
            // look at its next entry again (it may be due before the loop planned to wake).
            self.changed.notify_one();
        }
        out
    }

    /// Entries held, and their bytes.
    pub fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.count, inner.bytes)
    }

    /// Entries armed and refused so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.armed.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::WholeRing;
    use rebound_store::window::WindowId;

    fn entry(service: &str, t: &str, due: i64) -> Entry {
        Entry {
            service: service.into(),
            transaction_id: t.into(),
            generation: 1,
            due_ms: due,
            location: Location {
                window: WindowId { day: 1, index: 1 },
                instance: "n-1-0".into(),
                bucket: 0,
            },
            token: 0,
            payload_bytes: 10,
        }
    }

    fn timer(max_entries: usize, max_bytes: usize) -> Arc<Timer> {
        Timer::new(
            TimerOptions {
                max_entries,
                max_bytes,
                horizon_ms: 10_000,
                fence_margin_ms: 100,
            },
            Arc::new(WholeRing),
        )
    }

    #[test]
    fn entries_come_out_by_due_time_per_service_and_only_once_due() {
        let t = timer(10, 1 << 20);
        t.arm(entry("a", "x", 300), 0).unwrap();
        t.arm(entry("a", "y", 100), 0).unwrap();
        t.arm(entry("b", "z", 200), 0).unwrap();
        assert_eq!(t.next_due(), Some(100));
        assert_eq!(t.start_firing(150), vec!["a".to_string()]);
        // A firing service is not offered twice, nor counted for the next wake.
        assert!(t.start_firing(150).is_empty());
        assert_eq!(t.next_due(), Some(200));
        let got = t.take_due("a", 150, 10, 1 << 20);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].transaction_id, "y");
        assert!(t.take_due("a", 150, 10, 1 << 20).is_empty());
        assert_eq!(t.next_due(), Some(200));
        let mut fired = t.start_firing(400);
        fired.sort();
        assert_eq!(fired, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(t.take_due("a", 400, 10, 1 << 20)[0].transaction_id, "x");
        assert_eq!(t.size().0, 1);
    }

    #[test]
    fn a_take_is_bounded_in_payload_bytes_but_always_takes_one() {
        let t = timer(10, 1 << 20);
        for id in ["x", "y", "z"] {
            t.arm(entry("a", id, 1), 0).unwrap();
        }
        assert_eq!(
            t.take_due("a", 5, 10, 5).len(),
            1,
            "the first alone is over"
        );
        assert_eq!(t.take_due("a", 5, 10, 20).len(), 2);
        assert!(t.take_due("a", 5, 10, 20).is_empty());
    }

    #[test]
    fn it_is_bounded_in_count_bytes_and_horizon() {
        let t = timer(2, 1 << 20);
        t.arm(entry("a", "x", 1), 0).unwrap();
        t.arm(entry("a", "y", 1), 0).unwrap();
        assert_eq!(t.arm(entry("a", "z", 1), 0), Err(Refused::Full));
        assert_eq!(
            t.arm(entry("a", "far", 10_001), 0),
            Err(Refused::BeyondHorizon)
        );
        let small = timer(100, 400);
        small.arm(entry("a", "x", 1), 0).unwrap();
        small.arm(entry("a", "y", 1), 0).unwrap();
        assert_eq!(small.arm(entry("a", "z", 1), 0), Err(Refused::Full));
        assert!(small.size().1 <= 400);
        assert_eq!(timer(0, 400).arm(entry("a", "x", 1), 0), Err(Refused::Off));
    }
}
