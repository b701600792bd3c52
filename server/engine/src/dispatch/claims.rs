//! Which path of this node is delivering a retry (docs/architecture.md, "Dispatch": "Two paths,
//! one delivery"): the timer, from memory at its due time, or the scan of its window. Each path
//! claims a pointer, (service, transaction id, generation), before it reads the pointer's state
//! row, and keeps the claim until the retry is resolved or the work is dropped. A path that finds
//! the pointer claimed does not read it: the scan waits for the timer's resolution before it may
//! delete the bucket, the timer leaves the pointer to the scan.
//!
//! A pointer the timer resolved is remembered (the most recent ones, bounded in count), so that
//! the scan of its window skips it without reading its state row again: a resolution is a state
//! write that returned and moved the row off the pointer's generation, which never comes back, so
//! the memory is never wrong, only sometimes missing (then the scan reads, as it always may).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use futures::future::{FutureExt, Shared};
use tokio::sync::oneshot;

/// A pointer: (service, transaction id, generation).
pub type Key = (String, String, i64);

/// Resolves once the claimed retry is resolved; an error when its work was dropped unresolved.
pub type Done = Shared<oneshot::Receiver<()>>;

/// Which path holds a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Timer,
    Scan,
}

/// The resolution of a claim, made shareable only once a second waiter asks for it: most
/// claims are resolved with nobody else waiting, and a `Shared` costs two allocations more
/// than the oneshot it wraps.
#[derive(Debug)]
enum Resolution {
    Alone(oneshot::Receiver<()>),
    Shared(Done),
    /// Between the two, for the moment of the swap.
    Swapping,
}

impl Resolution {
    fn shared(&mut self) -> Done {
        if let Resolution::Shared(d) = self {
            return d.clone();
        }
        let Resolution::Alone(rx) = std::mem::replace(self, Resolution::Swapping) else {
            unreachable!("a resolution is swapped under the claims' lock only")
        };
        let done = rx.shared();
        *self = Resolution::Shared(done.clone());
        done
    }
}

#[derive(Debug)]
struct Held {
    id: u64,
    by: By,
    resolution: Resolution,
}

/// One allocation per claim: the maps and the guard share it.
type SharedKey = Arc<Key>;

#[derive(Debug, Default)]
struct Inner {
    held: HashMap<SharedKey, Held>,
    /// Pointers the timer resolved, and the order they were, oldest first.
    resolved: HashSet<SharedKey>,
    order: VecDeque<SharedKey>,
}

/// The claims of one node's dispatcher.
#[derive(Debug)]
pub struct Claims {
    inner: Mutex<Inner>,
    ids: AtomicU64,
    /// Most resolved pointers remembered.
    max_resolved: usize,
}

impl Claims {
    pub fn new(max_resolved: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            ids: AtomicU64::new(1),
            max_resolved,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("claims lock")
    }

    /// Claims `key` for `by`; the returned sender resolves the claim's `Done` (what another
    /// path waits on). Err with the holder's path and `Done` when it is claimed.
    pub fn claim(
        self: &Arc<Self>,
        key: Key,
        by: By,
    ) -> Result<(ClaimGuard, oneshot::Sender<()>), (By, Done)> {
        let mut inner = self.lock();
        if let Some(h) = inner.held.get_mut(&key) {
            return Err((h.by, h.resolution.shared()));
        }
        let (tx, rx) = oneshot::channel();
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let key = Arc::new(key);
        inner.held.insert(
            key.clone(),
            Held {
                id,
                by,
                resolution: Resolution::Alone(rx),
            },
        );
        Ok((
            ClaimGuard {
                claims: self.clone(),
                key,
                id,
                by,
                resolved: false,
            },
            tx,
        ))
    }

    /// True (once) when the timer resolved `key`: its pointer is stale, no read needed.
    pub fn take_resolved(&self, key: &Key) -> bool {
        let mut inner = self.lock();
        if inner.resolved.is_empty() {
            return false;
        }
        inner.resolved.remove(key)
    }

    /// Pointers claimed now, and resolved ones remembered.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.held.len(), inner.resolved.len())
    }

    fn done(&self, key: &Key, id: u64) -> Option<Done> {
        let mut inner = self.lock();
        inner
            .held
            .get_mut(key)
            .filter(|h| h.id == id)
            .map(|h| h.resolution.shared())
    }

    fn release(&self, key: &SharedKey, id: u64, resolved: bool) {
        let mut inner = self.lock();
        if inner.held.get(&**key).is_some_and(|h| h.id == id) {
            inner.held.remove(&**key);
        }
        if !resolved || self.max_resolved == 0 {
            return;
        }
        // The oldest memories make room (those the scan took already cost nothing).
        while inner.order.len() >= self.max_resolved {
            let Some(k) = inner.order.pop_front() else {
                break;
            };
            inner.resolved.remove(&*k);
        }
        if inner.resolved.insert(key.clone()) {
            inner.order.push_back(key.clone());
        }
    }
}

/// A path's claim on one pointer; dropping it releases the claim. It travels with the work
/// (`hub::Work::claim`) across redeliveries, so the claim lasts until the retry is resolved.
#[derive(Debug)]
pub struct ClaimGuard {
    claims: Arc<Claims>,
    key: SharedKey,
    id: u64,
    by: By,
    /// Set by `resolved` for the timer's claims: remember the pointer as stale.
    resolved: bool,
}

impl ClaimGuard {
    /// The retry is resolved (its state write returned): a timer claim remembers the pointer
    /// as stale, so the scan of its window skips it.
    pub fn resolved(&mut self) {
        self.resolved = self.by == By::Timer;
    }

    pub fn by(&self) -> By {
        self.by
    }

    /// What resolves with the claimed work (the receiver of `claim`'s sender).
    pub fn done(&self) -> Done {
        self.claims
            .done(&self.key, self.id)
            .expect("a claim is held while its guard lives")
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        self.claims.release(&self.key, self.id, self.resolved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &str) -> Key {
        ("svc".into(), t.into(), 7)
    }

    #[tokio::test]
    async fn a_claim_is_exclusive_until_dropped_and_its_waiters_hear_the_outcome() {
        let claims = Claims::new(10);
        let (guard, tx) = claims.claim(key("a"), By::Timer).unwrap();
        let Err((by, done)) = claims.claim(key("a"), By::Scan) else {
            panic!("claimed twice")
        };
        assert_eq!(by, By::Timer);
        // Another generation of the same transaction is another pointer.
        assert!(claims
            .claim(("svc".into(), "a".into(), 8), By::Scan)
            .is_ok());
        tx.send(()).unwrap();
        assert!(done.await.is_ok());
        drop(guard);
        assert!(claims.claim(key("a"), By::Scan).is_ok());
    }

    #[tokio::test]
    async fn work_dropped_unresolved_tells_its_waiters_so() {
        let claims = Claims::new(10);
        let (guard, tx) = claims.claim(key("a"), By::Timer).unwrap();
        let Err((_, done)) = claims.claim(key("a"), By::Scan) else {
            panic!("claimed twice")
        };
        drop(tx);
        drop(guard);
        assert!(done.await.is_err());
        assert!(!claims.take_resolved(&key("a")));
    }

    #[test]
    fn the_timer_remembers_what_it_resolved_once_and_the_most_recent_only() {
        let claims = Claims::new(2);
        for t in ["a", "b", "c"] {
            let (mut g, _tx) = claims.claim(key(t), By::Timer).unwrap();
            g.resolved();
        }
        // Room for two: the oldest made room.
        assert_eq!(claims.counts(), (0, 2));
        assert!(!claims.take_resolved(&key("a")));
        assert!(claims.take_resolved(&key("b")));
        assert!(!claims.take_resolved(&key("b")), "once");
        // The scan's own resolutions, and work dropped unresolved, are not remembered.
        let (mut g, _tx) = claims.claim(key("d"), By::Scan).unwrap();
        g.resolved();
        drop(g);
        let (g, _tx) = claims.claim(key("e"), By::Timer).unwrap();
        drop(g);
        assert!(!claims.take_resolved(&key("d")));
        assert!(!claims.take_resolved(&key("e")));
        assert!(claims.take_resolved(&key("c")));
    }
}
