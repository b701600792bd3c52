//! Lanes in this node's own slots (docs/architecture.md, "Data model", Instances): a writer
//! places each retry in one of `lanes` lanes per service whose instance token lies in a range
//! this node holds a lease on, so that its own dispatcher (its timer, then the scan of its own
//! ranges) is the one that delivers it while the lease holds.
//!
//! A lane is the suffix `k` of the instance name `<node_id>-<boot_epoch>-<k>`; the suffixes of
//! a service are the first `lanes` values of k = 0, 1, … whose instance token is in a held
//! range. The transaction id picks one of them (`token::lane_of`). With every range held (one
//! node) they are 0..lanes, the names of a writer that knows nothing of slots; with none held
//! (before the first ring round, or every lease lost) the transaction id picks the suffix
//! directly, as before, and the holder of that token's range delivers it.
//!
//! The held ranges are read again at most every `REFRESH`: a lane chosen from a range released
//! since is still delivered, by the range's new holder's scan, as any node's pointers are.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::ownership::Ownership;
use rebound_store::{token, TokenRange};

/// How long the held ranges are taken as read.
const REFRESH: Duration = Duration::from_millis(100);

/// Suffixes tried per lane before a service makes do with fewer lanes (a node holding a small
/// share of the ring finds one in about slots / held tries).
const TRIES_PER_LANE: u32 = 4_096;

#[derive(Debug)]
pub(super) struct Lanes {
    ownership: Arc<dyn Ownership>,
    lanes: u32,
    node_id: String,
    boot_epoch: i64,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    read_at: Option<Instant>,
    ranges: Vec<TokenRange>,
    by_service: HashMap<String, Arc<[u32]>>,
}

impl Lanes {
    pub(super) fn new(
        ownership: Arc<dyn Ownership>,
        lanes: u32,
        node_id: String,
        boot_epoch: i64,
    ) -> Self {
        Self {
            ownership,
            lanes: lanes.max(1),
            node_id,
            boot_epoch,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The lane suffix of `transaction_id` in `service`.
    pub(super) fn suffix(&self, service: &str, transaction_id: &str) -> u32 {
        let index = token::lane_of(transaction_id, self.lanes);
        let set = self.of(service);
        if set.is_empty() {
            return index;
        }
        set[index as usize % set.len()]
    }

    /// The lane suffixes of `service` in the ranges held now (empty: none held).
    fn of(&self, service: &str) -> Arc<[u32]> {
        let mut cache = self.cache.lock().expect("lanes lock");
        if cache.read_at.is_none_or(|at| at.elapsed() >= REFRESH) {
            let mut ranges: Vec<TokenRange> =
                self.ownership.held().into_iter().map(|l| l.range).collect();
            ranges.sort_by_key(|r| r.start);
            if ranges != cache.ranges {
                cache.by_service.clear();
                cache.ranges = ranges;
            }
            cache.read_at = Some(Instant::now());
        }
        if let Some(set) = cache.by_service.get(service) {
            return set.clone();
        }
        let set: Arc<[u32]> = self.search(service, &cache.ranges).into();
        cache.by_service.insert(service.to_string(), set.clone());
        set
    }

    fn search(&self, service: &str, ranges: &[TokenRange]) -> Vec<u32> {
        let mut found = Vec::with_capacity(self.lanes as usize);
        if ranges.is_empty() {
            return found;
        }
        let tries = self.lanes.saturating_mul(TRIES_PER_LANE);
        for k in 0..tries {
            let instance = format!("{}-{}-{}", self.node_id, self.boot_epoch, k);
            let t = token::instance_token(service, &instance);
            if ranges.iter().any(|r| r.contains(t)) {
                found.push(k);
                if found.len() == self.lanes as usize {
                    break;
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::{Lease, WholeRing};

    #[derive(Debug)]
    struct Held(Vec<TokenRange>);

    impl Ownership for Held {
        fn held(&self) -> Vec<Lease> {
            self.0
                .iter()
                .map(|r| Lease {
                    range: *r,
                    valid_until_ms: i64::MAX,
                })
                .collect()
        }
        fn still_holds(&self, range: TokenRange, _: i64) -> bool {
            self.0.contains(&range)
        }
        fn is_compactor(&self, _: i64) -> bool {
            false
        }
    }

    #[test]
    fn with_the_whole_ring_the_lanes_are_the_plain_ones() {
        let lanes = Lanes::new(Arc::new(WholeRing), 8, "n".into(), 7);
        for t in ["a", "b", "c", "d", "e"] {
            assert_eq!(lanes.suffix("svc", t), token::lane_of(t, 8));
        }
    }

    #[test]
    fn every_lane_lies_in_a_held_range() {
        // Two slots of eight.
        let ranges = vec![crate::ring::slot_range(0, 8), crate::ring::slot_range(5, 8)];
        let lanes = Lanes::new(Arc::new(Held(ranges.clone())), 4, "node-a".into(), 42);
        let mut used = std::collections::BTreeSet::new();
        for i in 0..200 {
            for svc in ["payments", "mail"] {
                let k = lanes.suffix(svc, &format!("tx-{i}"));
                let t = token::instance_token(svc, &format!("node-a-42-{k}"));
                assert!(ranges.iter().any(|r| r.contains(t)), "{svc} lane {k}");
                used.insert((svc, k));
            }
        }
        // Four lanes per service.
        assert_eq!(used.len(), 8);
        // Nothing held: the transaction id picks the lane directly.
        let none = Lanes::new(Arc::new(Held(Vec::new())), 4, "node-a".into(), 42);
        assert_eq!(none.suffix("svc", "x"), token::lane_of("x", 4));
    }
}
