//! The clocks of the other nodes, as seen through Cassandra (docs/architecture.md, "Guarantees
//! across nodes"). Every heartbeat carries the writer's own clock (`heartbeat_at`) and gets
//! Cassandra's write time; their difference is how far that node's clock lags Cassandra's, plus the
//! one-way latency of the write. The smallest of a node's recent samples is kept (latency only ever
//! adds), and a node's lag relative to this one is the difference of the two.
//!
//! Windows, leases and orphan grace are all judged in some node's clock: a lease expires at
//! the time its holder wrote, in the holder's clock; a writer places a retry by the W+1 rule of
//! its own clock, so its window is closed to it only once its own clock says so. Clock sync
//! keeps every node within the skew margin, which covers small differences; a node whose
//! clock is off by more (clock sync turned off on a wrong clock) is handled by converting its
//! times into this node's frame: `mine = theirs + lag`. Lags within half the skew margin
//! count as zero, so the noise of a measurement never changes what a healthy cluster does.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use crate::store::Member;

/// Samples kept per node: about `SAMPLES` heartbeats.
const SAMPLES: usize = 8;

#[derive(Debug, Default)]
struct Inner {
    /// (node_id, boot_epoch) -> recent (written_at, lag) samples, one per heartbeat.
    samples: HashMap<(String, i64), VecDeque<(i64, i64)>>,
    /// node_id -> lag relative to this node (ms; positive: its clock is behind).
    by_node: HashMap<String, i64>,
    by_writer: HashMap<(String, i64), i64>,
    max_lag: i64,
}

/// Clock lags of the live members relative to this node.
#[derive(Debug)]
pub struct PeerClocks {
    node_id: String,
    boot_epoch: i64,
    deadband_ms: i64,
    /// How long a node's lag is kept after its heartbeat row lapsed: a node stopped for a
    /// while (SIGSTOP, a long GC) comes back writing in its own clock, and must be judged in
    /// it from its first write on, not from its next heartbeat.
    retain_ms: i64,
    inner: Mutex<Inner>,
}

impl PeerClocks {
    pub fn new(node_id: String, boot_epoch: i64, deadband_ms: i64, retain_ms: i64) -> Self {
        Self {
            node_id,
            boot_epoch,
            deadband_ms,
            retain_ms,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("peer clocks")
    }

    /// Takes in the members as listed now (each with its last heartbeat).
    pub fn update(&self, members: &[Member]) {
        let mut g = self.lock();
        let live: std::collections::HashSet<(String, i64)> = members
            .iter()
            .map(|m| (m.node_id.clone(), m.boot_epoch))
            .collect();
        // A newer boot of a node replaces its older ones at once; a node whose row lapsed
        // is kept `retain_ms` (Cassandra's clock) after its last heartbeat.
        let newest = members.iter().map(|m| m.written_at_ms).max().unwrap_or(0);
        let retain_ms = self.retain_ms;
        g.samples.retain(|k, q| {
            live.contains(k)
                || (!live.iter().any(|(n, _)| *n == k.0)
                    && q.back().is_some_and(|(at, _)| *at >= newest - retain_ms))
        });
        for m in members.iter().filter(|m| m.written_at_ms > 0) {
            let q = g
                .samples
                .entry((m.node_id.clone(), m.boot_epoch))
                .or_default();
            if q.back().is_some_and(|(at, _)| *at == m.written_at_ms) {
                continue;
            }
            q.push_back((m.written_at_ms, m.written_at_ms - m.heartbeat_at_ms));
            while q.len() > SAMPLES {
                q.pop_front();
            }
        }
        let lag = |q: &VecDeque<(i64, i64)>| q.iter().map(|(_, l)| *l).min();
        let mine = g
            .samples
            .get(&(self.node_id.clone(), self.boot_epoch))
            .and_then(lag);
        let Some(mine) = mine else {
            // Without our own sample there is nothing to compare with.
            g.by_node.clear();
            g.by_writer.clear();
            g.max_lag = 0;
            return;
        };
        let mut by_writer = HashMap::new();
        let mut by_node: HashMap<String, (i64, i64)> = HashMap::new();
        for (k, q) in &g.samples {
            let Some(l) = lag(q) else { continue };
            let rel = l - mine;
            let rel = if rel.abs() <= self.deadband_ms {
                0
            } else {
                rel
            };
            by_writer.insert(k.clone(), rel);
            // A node's newest boot speaks for its leases.
            let e = by_node.entry(k.0.clone()).or_insert((k.1, rel));
            if k.1 >= e.0 {
                *e = (k.1, rel);
            }
        }
        g.max_lag = by_writer.values().copied().max().unwrap_or(0).max(0);
        let lagging: Vec<_> = by_writer.iter().filter(|(_, l)| **l != 0).collect();
        if !lagging.is_empty() {
            tracing::debug!(?lagging, "nodes whose clocks differ from this one's");
        }
        g.by_writer = by_writer;
        g.by_node = by_node.into_iter().map(|(k, (_, l))| (k, l)).collect();
    }

    /// How far the clock of the writer `(node_id, boot_epoch)` lags this node's, never below
    /// 0 (unknown: a node that is not a live member writes nothing more). A writer whose clock
    /// runs ahead told its callers due times in its future, so its windows are read on this
    /// node's clock: never before the due time it answered.
    pub fn writer_lag_ms(&self, node_id: &str, boot_epoch: i64) -> i64 {
        self.lock()
            .by_writer
            .get(&(node_id.to_string(), boot_epoch))
            .copied()
            .unwrap_or(0)
            .max(0)
    }

    /// How far the clock of node `node_id` (its newest boot) lags this node's; negative
    /// when it runs ahead.
    pub fn node_lag_ms(&self, node_id: &str) -> i64 {
        self.lock().by_node.get(node_id).copied().unwrap_or(0)
    }

    /// The largest lag of any live writer (0 when none lags).
    pub fn max_lag_ms(&self) -> i64 {
        self.lock().max_lag
    }
}

/// The writer of an instance name `<node_id>-<boot_epoch>-<lane>` (node ids may hold `-`).
pub fn writer_of(instance: &str) -> Option<(&str, i64)> {
    let mut parts = instance.rsplitn(3, '-');
    let _lane = parts.next()?;
    let epoch = parts.next()?.parse().ok()?;
    let node = parts.next()?;
    Some((node, epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(node: &str, epoch: i64, at: i64, written: i64) -> Member {
        Member {
            node_id: node.into(),
            address: String::new(),
            boot_epoch: epoch,
            heartbeat_at_ms: at,
            written_at_ms: written,
        }
    }

    #[test]
    fn lags_are_relative_to_this_node_and_ignore_latency_and_noise() {
        let p = PeerClocks::new("b".into(), 7, 100, 1_000);
        let day3 = 3 * 86_400_000;
        // b is on time (5 ms latency), a is three days behind, c 40 ms ahead (noise).
        p.update(&[
            m("b", 7, 1_000, 1_005),
            m("a", 1, 1_000 - day3, 1_002),
            m("c", 2, 1_040, 1_001),
        ]);
        assert_eq!(p.writer_lag_ms("a", 1), day3 + 2 - 5);
        assert_eq!(p.node_lag_ms("a"), day3 - 3);
        assert_eq!(p.writer_lag_ms("c", 2), 0);
        assert_eq!(p.max_lag_ms(), day3 - 3);
        // b ahead of a: a's windows are read late, never b's early.
        let a = PeerClocks::new("a".into(), 1, 100, 1_000);
        a.update(&[m("b", 7, 1_000, 1_005), m("a", 1, 1_000 - day3, 1_002)]);
        assert_eq!(a.writer_lag_ms("b", 7), 0);
        assert_eq!(a.node_lag_ms("b"), -(day3 - 3));
        // A slow write (Cassandra paused) does not move the lag: the smallest sample counts.
        p.update(&[
            m("b", 7, 2_000, 4_000),
            m("a", 1, 2_000 - day3, 2_002),
            m("c", 2, 2_040, 2_001),
        ]);
        assert_eq!(p.writer_lag_ms("a", 1), day3 + 2 - 5);
        // A member whose row lapsed is remembered a while (it may only be stopped), then
        // forgotten.
        p.update(&[m("b", 7, 2_500, 2_505)]);
        assert_eq!(p.writer_lag_ms("a", 1), day3 + 2 - 5);
        p.update(&[m("b", 7, 3_500, 3_505)]);
        assert_eq!(p.writer_lag_ms("a", 1), 0);
        assert_eq!(p.max_lag_ms(), 0);
        // A new boot of a node replaces the old one at once.
        p.update(&[m("b", 7, 4_000, 4_005), m("c", 2, 4_000, 4_001)]);
        p.update(&[m("b", 7, 4_500, 4_505), m("c", 3, 4_500, 4_501)]);
        assert_eq!(p.writer_lag_ms("c", 2), 0);
    }

    #[test]
    fn instance_names_give_their_writer() {
        assert_eq!(writer_of("node-a-1796-3"), Some(("node-a", 1796)));
        assert_eq!(writer_of("vm-1796018963980-5"), Some(("vm", 1796018963980)));
        assert_eq!(writer_of("x-y"), None);
        assert_eq!(writer_of("a-notanumber-1"), None);
        assert_eq!(writer_of(""), None);
        assert_eq!(writer_of("é-1-é"), Some(("é", 1)));
    }
}
