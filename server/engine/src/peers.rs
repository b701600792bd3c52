//! The clocks of the other nodes, as seen through Cassandra (docs/architecture.md, "Guarantees
//! across nodes"). Every heartbeat carries the writer's own clock (`heartbeat_at`) and gets
//! Cassandra's write time; their difference is how far that node's clock lags Cassandra's, plus the
//! one-way latency of the write. The smallest of a node's recent samples is kept (latency only ever
//! adds), and a node's lag relative to this one is the difference of the two.
//!
//! Windows, leases and orphan grace are all judged in some node's clock: a lease expires at
//! the time its holder wrote, in the holder's clock; a writer keeps a retry in a window only
//! if it was durable before the window's end by its own clock (invariant 1), so its window is
//! closed to it only once its own clock says so. Clock sync keeps every node within the skew
//! margin, which covers small differences; a node whose clock is off by more (clock sync
//! turned off on a wrong clock) is handled by converting its times into this node's frame:
//! `mine = theirs + lag`. Lags within half the skew margin
//! count as zero, so the noise of a measurement never changes what a healthy cluster does.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use rebound_store::Member;

/// Samples kept per node: about `SAMPLES` heartbeats.
const SAMPLES: usize = 8;

#[derive(Debug, Default)]
struct Inner {
    /// (node_id, boot_epoch) -> recent (written_at, lag) samples, one per heartbeat.
    samples: HashMap<(String, i64), VecDeque<(i64, i64)>>,
    /// node_id -> lag relative to this node (ms; positive: its clock is behind).
    by_node: HashMap<String, i64>,
    by_writer: HashMap<(String, i64), i64>,
    /// (node_id, boot_epoch) -> lag behind Cassandra's clock (ms; negative: ahead).
    behind_cassandra: HashMap<(String, i64), i64>,
    /// This node's own lag behind Cassandra's clock.
    mine: i64,
    /// The same, as measured (no deadband): the smallest of this node's recent samples, so at
    /// most its true lag plus the latency of a heartbeat write.
    mine_measured: i64,
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
            g.behind_cassandra.clear();
            g.mine = 0;
            g.mine_measured = 0;
            g.max_lag = 0;
            return;
        };
        let band = |l: i64| if l.abs() <= self.deadband_ms { 0 } else { l };
        let mut by_writer = HashMap::new();
        let mut behind_cassandra = HashMap::new();
        let mut by_node: HashMap<String, (i64, i64)> = HashMap::new();
        for (k, q) in &g.samples {
            let Some(l) = lag(q) else { continue };
            let rel = band(l - mine);
            by_writer.insert(k.clone(), rel);
            behind_cassandra.insert(k.clone(), band(l));
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
        g.behind_cassandra = behind_cassandra;
        g.mine = band(mine);
        g.mine_measured = mine;
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

    /// How much later than its end (plus the margin), in this node's clock, a window of the
    /// writer `(node_id, boot_epoch)` is read: once Cassandra's clock has passed the end in
    /// the writer's clock, or in Cassandra's own when the writer runs ahead, never earlier
    /// than this node's clock says. That is `max(lag(writer), 0) - lag(this node)`, lags
    /// against Cassandra's clock, floored at 0. A writer whose clock runs ahead answered due
    /// times in its future; read on Cassandra's time, its windows are never delivered before
    /// them, even by itself (a reader ahead of Cassandra waits its own lead). An unknown
    /// writer counts as on time. Readability only: the orphan grace keeps `writer_lag_ms`,
    /// and the compactor's Gate 2 `max_lag_ms`, both relative to this node.
    /// It is never less than `writer_lag_ms` (lags within the deadband of each other count
    /// there, so a window is never read earlier than by the relative rule).
    pub fn read_lag_ms(&self, node_id: &str, boot_epoch: i64) -> i64 {
        let g = self.lock();
        let key = (node_id.to_string(), boot_epoch);
        let writer = g.behind_cassandra.get(&key).copied().unwrap_or(0);
        let relative = g.by_writer.get(&key).copied().unwrap_or(0);
        (writer.max(0) - g.mine).max(relative).max(0)
    }

    /// How far this node's clock runs ahead of Cassandra's, as measured (0 when it does not,
    /// or before its first heartbeat is read back). No deadband: what delivers at a due time
    /// this node answered (the timer) waits this much, so that nothing goes out before that
    /// time on Cassandra's clock. The measure errs towards "behind" (a heartbeat's latency),
    /// so it never makes a delivery early.
    pub fn own_lead_ms(&self) -> i64 {
        (-self.lock().mine_measured).max(0)
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
    fn windows_are_read_on_cassandras_clock_when_a_clock_runs_ahead() {
        // f is 2.5 s ahead of Cassandra (5 ms latency), b on time, a 3 s behind; the
        // deadband is 1 s (half a 2 s margin).
        let members = [
            m("f", 1, 3_500, 1_005),
            m("b", 7, 1_000, 1_002),
            m("a", 4, -2_000, 1_003),
        ];
        let f = PeerClocks::new("f".into(), 1, 1_000, 10_000);
        f.update(&members);
        // f reads its own windows once Cassandra's clock has passed their end: 2,495 ms
        // later than its own clock says (before: on its own clock, 2.5 s early); b's as before
        // (b's latency was 3 ms less than f's).
        assert_eq!(f.writer_lag_ms("f", 1), 0);
        assert_eq!(f.read_lag_ms("f", 1), 2_495);
        assert_eq!(f.read_lag_ms("b", 7), 2_497);
        // a's once a's own clock has passed it, in f's clock (unchanged).
        assert_eq!(f.read_lag_ms("a", 4), 5_498);
        assert_eq!(f.read_lag_ms("a", 4), f.writer_lag_ms("a", 4));
        // An unknown writer counts as on time.
        assert_eq!(f.read_lag_ms("gone", 1), 2_495);
        // Gate 2 is unchanged: the writer furthest behind f.
        assert_eq!(f.max_lag_ms(), 5_498);

        // Seen from b (on time): f's windows on Cassandra's (= b's) clock, a's 3 s late.
        let b = PeerClocks::new("b".into(), 7, 1_000, 10_000);
        b.update(&members);
        assert_eq!(b.read_lag_ms("f", 1), 0);
        assert_eq!(b.read_lag_ms("b", 7), 0);
        assert_eq!(b.read_lag_ms("a", 4), 3_003);
        // Seen from a (behind): never earlier than its own clock says.
        let a = PeerClocks::new("a".into(), 4, 1_000, 10_000);
        a.update(&members);
        assert_eq!(a.read_lag_ms("f", 1), 0);
        assert_eq!(a.read_lag_ms("b", 7), 0);
        assert_eq!(a.read_lag_ms("a", 4), 0);

        // Within the deadband of Cassandra each, but a margin apart: read as the relative rule
        // says, never earlier.
        let x = PeerClocks::new("x".into(), 1, 1_000, 10_000);
        x.update(&[m("x", 1, 1_900, 1_000), m("y", 2, 100, 1_000)]);
        assert_eq!(x.writer_lag_ms("y", 2), 1_800);
        assert_eq!(x.read_lag_ms("y", 2), 1_800);
        assert_eq!(x.read_lag_ms("x", 1), 0);
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
