//! Dependency holds (docs/architecture.md, "Dependency holds"): while a downstream
//! dependency is held, no retry naming it (`EnqueueRetryRequest.dependency`) is delivered, in
//! any service, and none uses an attempt. Holds are stored (`HoldStore`), so every node
//! applies them and they survive restarts; each node keeps them in memory, refreshed every
//! `REFRESH_EVERY` and at once for a hold set through it.
//!
//! When a hold ends, one delivery of the dependency goes first, the probe: one in the whole
//! cluster, sent by the node that claims it in the store (`HoldStore::claim_probe`, a
//! lightweight transaction on Cassandra); the other nodes keep their retries of the dependency
//! waiting and ask the store again every `RECHECK_MS`. The probe's ack decides:
//! - SUCCEEDED (or FAILED: the dependency answered): the owner marks the probe answered in the
//!   store, and every node releases its retries at a ramping rate, `RAMP_START` deliveries in
//!   the first second, doubling every second, then without limit after `RAMP_FOR` (a
//!   service's own limits still cap them);
//! - RETRY: the hold is renewed (a new hold end, so a new probe): for the duration the ack's
//!   own hold gives, else for twice the last hold's length (at most `MAX_RENEWAL`);
//! - not acked within `PROBE_TIMEOUT`: another node (or the same) claims the probe over.
//!
//! A released hold (`ReleaseDependency`) ramps the same way from the release, without a probe.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use tokio::sync::watch;

use crate::error::Error;
use rebound_store::{clock::SharedClock, HoldRow, HoldStore, ProbeClaim};

/// How often every node reads the holds table.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// The longest hold (`HoldDependency`, `AckRequest.hold`).
pub const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);
pub const MIN_HOLD: Duration = Duration::from_secs(1);
/// The longest reason kept with a hold, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;
/// The longest renewal after a failed probe.
pub const MAX_RENEWAL: Duration = Duration::from_secs(3600);
/// A probe not acknowledged within this lets another go.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// Deliveries released in the first second after a probe succeeded; doubling every second.
pub const RAMP_START: u64 = 10;
/// After this long the ramp is over.
pub const RAMP_FOR: Duration = Duration::from_secs(10);
/// How long a row outlives its hold's end in the store.
const KEEP_AFTER_END_SECONDS: u32 = 7 * 24 * 3600;
/// A retry waiting for a probe or the ramp asks again after this.
const RECHECK_MS: i64 = 1000;
/// How long a probe's row outlives its claim in the store.
const PROBE_ROW_TTL_SECONDS: u32 = 7 * 24 * 3600;

/// What a delivery of a retry naming a dependency may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Deliver it.
    Go,
    /// Deliver it as the dependency's probe (`Holds::probe_acked` with its outcome).
    Probe,
    /// Do not deliver it before this time (ms): postpone it without using an attempt.
    Wait(i64),
}

/// How a probe was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// SUCCEEDED or FAILED: the dependency answered.
    Answered,
    /// RETRY: the hold renews (for `Some(duration)` when the ack held it itself).
    Retry(Option<Duration>),
}

/// This node's view of one dependency after its hold ended.
#[derive(Debug, Clone, Copy)]
enum After {
    /// This node's probe is out since (ms), for the hold that ended at `until`.
    Probing { since: i64, until: i64 },
    /// Another node's probe is out: ask the store again at `next` (ms).
    Watching { next: i64, until: i64 },
    /// Released at (ms): `released` deliveries let through since.
    Ramping {
        from: i64,
        released: u64,
        until: i64,
    },
}

#[derive(Debug)]
pub struct Holds {
    store: Arc<dyn HoldStore>,
    clock: SharedClock,
    /// This node's id: the owner of the probes it claims.
    node: String,
    rows: RwLock<HashMap<String, HoldRow>>,
    /// Per dependency, the number of the last hold this node wrote itself (`local`), from
    /// `writes`: a refresh whose read began before it keeps that row rather than the older
    /// one it read.
    written: Mutex<HashMap<String, u64>>,
    writes: std::sync::atomic::AtomicU64,
    after: Mutex<HashMap<String, After>>,
    /// One claim in the store at a time on this node.
    claiming: tokio::sync::Mutex<()>,
}

/// What `Holds::decide` leaves to do.
enum Decision {
    Now(Gate),
    /// Ask the store for the probe of the hold that ended at `until`.
    Claim {
        until: i64,
    },
}

impl Holds {
    pub fn new(store: Arc<dyn HoldStore>, clock: SharedClock, node: &str) -> Self {
        Self {
            store,
            clock,
            node: node.to_string(),
            rows: RwLock::default(),
            written: Mutex::default(),
            writes: std::sync::atomic::AtomicU64::new(0),
            after: Mutex::default(),
            claiming: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the table into memory. A hold this node wrote while the read was out stays as
    /// written: the read may predate it, and putting the older row back would end the new
    /// hold here until the next refresh (and send a second probe for the old one).
    pub async fn refresh(&self) -> Result<(), Error> {
        use std::sync::atomic::Ordering;
        let began = self.writes.load(Ordering::SeqCst);
        let rows = self.store.list_holds().await?;
        let mut map: HashMap<String, HoldRow> = rows
            .into_iter()
            .map(|r| (r.dependency.clone(), r))
            .collect();
        let mut current = self.rows.write().expect("holds lock");
        for (dependency, n) in self.written.lock().expect("holds lock").iter() {
            if *n > began {
                if let Some(row) = current.get(dependency) {
                    map.insert(dependency.clone(), row.clone());
                }
            }
        }
        let now = self.clock.now_ms();
        let in_force = map.values().filter(|r| r.until_ms > now).count();
        crate::metric_definitions::metrics()
            .dependency_holds
            .set(in_force as i64);
        *current = map;
        Ok(())
    }

    /// Refreshes every `every` until the node stops.
    pub async fn run(self: Arc<Self>, every: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "cannot refresh dependency holds, will retry");
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    fn local(&self, row: HoldRow) {
        self.after
            .lock()
            .expect("holds lock")
            .remove(&row.dependency);
        let mut rows = self.rows.write().expect("holds lock");
        let n = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        self.written
            .lock()
            .expect("holds lock")
            .insert(row.dependency.clone(), n);
        rows.insert(row.dependency.clone(), row);
    }

    /// Holds `dependency` for `duration` from now (replacing a hold in force). `source` is
    /// "admin" or "executor". The caller has validated the arguments.
    pub async fn hold(
        &self,
        dependency: &str,
        duration: Duration,
        reason: &str,
        source: &str,
        renewals: u32,
    ) -> Result<HoldRow, Error> {
        let now = self.clock.now_ms();
        let row = HoldRow {
            dependency: dependency.to_string(),
            until_ms: now.saturating_add(duration.as_millis() as i64),
            reason: reason.to_string(),
            held_at_ms: now,
            source: source.to_string(),
            renewals,
        };
        let ttl = (duration.as_secs() as u32).saturating_add(KEEP_AFTER_END_SECONDS);
        self.store.put_hold(&row, ttl).await?;
        tracing::info!(
            dependency,
            until_ms = row.until_ms,
            source,
            reason,
            "dependency held"
        );
        self.local(row.clone());
        Ok(row)
    }

    /// Ends the hold of `dependency` now; false (nothing written) when it was not held.
    pub async fn release(&self, dependency: &str) -> Result<bool, Error> {
        let now = self.clock.now_ms();
        let rows = self.store.list_holds().await?;
        let Some(mut row) = rows
            .into_iter()
            .find(|r| r.dependency == dependency && r.until_ms > now)
        else {
            return Ok(false);
        };
        row.until_ms = now;
        row.held_at_ms = now;
        row.source = "release".into();
        row.renewals = 0;
        self.store.put_hold(&row, KEEP_AFTER_END_SECONDS).await?;
        tracing::info!(dependency, "dependency released");
        self.local(row);
        Ok(true)
    }

    /// The holds in force, as stored now, by dependency.
    pub async fn list(&self) -> Result<Vec<HoldRow>, Error> {
        let now = self.clock.now_ms();
        let mut rows: Vec<HoldRow> = self
            .store
            .list_holds()
            .await?
            .into_iter()
            .filter(|r| r.until_ms > now)
            .collect();
        rows.sort_by(|a, b| a.dependency.cmp(&b.dependency));
        Ok(rows)
    }

    /// The holds in force as this node sees them (for metrics and stats).
    pub fn in_force(&self) -> Vec<HoldRow> {
        let now = self.clock.now_ms();
        let mut rows: Vec<HoldRow> = self
            .rows
            .read()
            .expect("holds lock")
            .values()
            .filter(|r| r.until_ms > now)
            .cloned()
            .collect();
        rows.sort_by(|a, b| a.dependency.cmp(&b.dependency));
        rows
    }

    /// Whether a retry naming `dependency` may be delivered now. Asks the store only when the
    /// hold ended and this node does not know yet who sends the probe (then once a second).
    pub async fn gate(&self, dependency: &str) -> Gate {
        let until = match self.decide(dependency) {
            Decision::Now(g) => return g,
            Decision::Claim { until } => until,
        };
        let _one = self.claiming.lock().await;
        // Another task of this node may have asked meanwhile.
        if let Decision::Now(g) = self.decide(dependency) {
            return g;
        }
        let now = self.clock.now_ms();
        // A claim PROBE_TIMEOUT old or older is stale (as `decide` sees this node's own).
        let stale_before = now - PROBE_TIMEOUT.as_millis() as i64 + 1;
        let claim = self
            .store
            .claim_probe(
                dependency,
                until,
                &self.node,
                now,
                stale_before,
                PROBE_ROW_TTL_SECONDS,
            )
            .await;
        let mut after = self.after.lock().expect("holds lock");
        match claim {
            Ok(ProbeClaim::Won) => {
                tracing::info!(dependency, "the hold ended; this node sends the probe");
                after.insert(dependency.to_string(), After::Probing { since: now, until });
                Gate::Probe
            }
            Ok(ProbeClaim::Lost(p)) if p.answered_at_ms != 0 => {
                after.insert(
                    dependency.to_string(),
                    After::Ramping {
                        from: p.answered_at_ms,
                        released: 1,
                        until,
                    },
                );
                Gate::Go
            }
            other => {
                if let Err(e) = other {
                    tracing::warn!(dependency, error = %e, "cannot claim the probe of an ended hold; asking again");
                }
                let next = now + RECHECK_MS;
                after.insert(dependency.to_string(), After::Watching { next, until });
                Gate::Wait(next)
            }
        }
    }

    /// `gate` from what this node knows, or the claim it must make first.
    fn decide(&self, dependency: &str) -> Decision {
        if dependency.is_empty() {
            return Decision::Now(Gate::Go);
        }
        let now = self.clock.now_ms();
        let Some(row) = self
            .rows
            .read()
            .expect("holds lock")
            .get(dependency)
            .cloned()
        else {
            return Decision::Now(Gate::Go);
        };
        if row.until_ms > now {
            return Decision::Now(Gate::Wait(row.until_ms));
        }
        let until = row.until_ms;
        let mut after = self.after.lock().expect("holds lock");
        // A state left from an earlier hold does not apply to this one.
        let state = after.get(dependency).copied().filter(|s| match s {
            After::Probing { until: u, .. }
            | After::Watching { until: u, .. }
            | After::Ramping { until: u, .. } => *u == until,
        });
        let gate = match state {
            None if row.source == "release" => {
                after.insert(
                    dependency.to_string(),
                    After::Ramping {
                        from: until,
                        released: 1,
                        until,
                    },
                );
                Gate::Go
            }
            // The ramp of this hold is over (or it ended long ago): nothing to hold back.
            None if now - until
                > RAMP_FOR.as_millis() as i64 + PROBE_TIMEOUT.as_millis() as i64 =>
            {
                Gate::Go
            }
            None => return Decision::Claim { until },
            Some(After::Probing { since, .. }) => {
                if now - since >= PROBE_TIMEOUT.as_millis() as i64 {
                    return Decision::Claim { until };
                }
                Gate::Wait(now + RECHECK_MS)
            }
            Some(After::Watching { next, .. }) => {
                if now >= next {
                    return Decision::Claim { until };
                }
                Gate::Wait(next)
            }
            Some(After::Ramping { from, released, .. }) => {
                let elapsed = now - from;
                if elapsed >= RAMP_FOR.as_millis() as i64 {
                    return Decision::Now(Gate::Go);
                }
                if released < ramp_allowance(elapsed) {
                    after.insert(
                        dependency.to_string(),
                        After::Ramping {
                            from,
                            released: released + 1,
                            until,
                        },
                    );
                    Gate::Go
                } else {
                    Gate::Wait(now + RECHECK_MS)
                }
            }
        };
        Decision::Now(gate)
    }

    /// The answer to the probe of `dependency`. A renewal writes the hold again.
    pub async fn probe_answered(&self, dependency: &str, answer: ProbeAnswer) {
        let now = self.clock.now_ms();
        let row = self
            .rows
            .read()
            .expect("holds lock")
            .get(dependency)
            .cloned();
        let Some(row) = row else { return };
        let probing = matches!(
            self.after.lock().expect("holds lock").get(dependency),
            Some(After::Probing { until, .. }) if *until == row.until_ms
        );
        if !probing || row.until_ms > now {
            return;
        }
        match answer {
            ProbeAnswer::Answered => {
                tracing::info!(dependency, "probe answered; releasing the held retries");
                // Every node's retries of the dependency go once this is stored; should the
                // write fail, they go when another probe (after PROBE_TIMEOUT) is answered.
                match self
                    .store
                    .answer_probe(
                        dependency,
                        row.until_ms,
                        &self.node,
                        now,
                        PROBE_ROW_TTL_SECONDS,
                    )
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!(dependency, "another node took the probe over meanwhile")
                    }
                    Err(e) => {
                        tracing::warn!(dependency, error = %e, "cannot record the probe's answer; the other nodes probe again")
                    }
                }
                self.after.lock().expect("holds lock").insert(
                    dependency.to_string(),
                    After::Ramping {
                        from: now,
                        released: 1,
                        until: row.until_ms,
                    },
                );
            }
            ProbeAnswer::Retry(given) => {
                let last = Duration::from_millis((row.until_ms - row.held_at_ms).max(0) as u64);
                let duration = given
                    .unwrap_or_else(|| (last * 2).min(MAX_RENEWAL))
                    .max(MIN_HOLD);
                let reason = if row.reason.is_empty() {
                    "probe answered RETRY".to_string()
                } else {
                    row.reason.clone()
                };
                if let Err(e) = self
                    .hold(
                        dependency,
                        duration,
                        &reason,
                        &row.source,
                        row.renewals.saturating_add(1),
                    )
                    .await
                {
                    tracing::warn!(dependency, error = %e, "cannot renew the hold after a failed probe; another probe follows");
                }
            }
        }
    }
}

/// Deliveries the ramp lets through in its first `elapsed_ms`: `RAMP_START` in the first
/// second, doubling every second.
fn ramp_allowance(elapsed_ms: i64) -> u64 {
    let seconds = (elapsed_ms.max(0) / 1000).min(30) as u32;
    RAMP_START.saturating_mul((1u64 << (seconds + 1)) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_store::clock::ManualClock;
    use rebound_store_embedded::EmbeddedStore;

    async fn holds() -> (Arc<Holds>, ManualClock, tempfile::TempDir) {
        let (mut nodes, clock, dir) = nodes(1).await;
        (nodes.remove(0), clock, dir)
    }

    /// `n` nodes' holds over one store.
    async fn nodes(n: usize) -> (Vec<Arc<Holds>>, ManualClock, tempfile::TempDir) {
        use rebound_store::MigrationStore;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let shared: SharedClock = Arc::new(clock.clone());
        let store = EmbeddedStore::open(dir.path(), "r", "c", shared.clone()).unwrap();
        store.migrate(0).await.unwrap();
        let store: Arc<dyn HoldStore> = Arc::new(store);
        let nodes = (0..n)
            .map(|i| {
                Arc::new(Holds::new(
                    store.clone(),
                    shared.clone(),
                    &format!("node-{i}"),
                ))
            })
            .collect();
        (nodes, clock, dir)
    }

    #[tokio::test]
    async fn one_probe_in_the_cluster_and_every_node_ramps_on_its_answer() {
        let (nodes, clock, _dir) = nodes(3).await;
        nodes[0]
            .hold("pay", Duration::from_secs(30), "503", "executor", 0)
            .await
            .unwrap();
        for n in &nodes[1..] {
            n.refresh().await.unwrap();
            assert!(matches!(n.gate("pay").await, Gate::Wait(_)), "held");
        }
        clock.advance(30_000);
        let mut probes = 0;
        for n in &nodes {
            for _ in 0..5 {
                if n.gate("pay").await == Gate::Probe {
                    probes += 1;
                }
            }
        }
        assert_eq!(probes, 1, "one probe in the whole cluster");
        assert!(
            matches!(nodes[1].gate("pay").await, Gate::Wait(_)),
            "the others wait for its answer"
        );
        nodes[0].probe_answered("pay", ProbeAnswer::Answered).await;
        // The others learn the answer from the store within a second.
        clock.advance(RECHECK_MS);
        for n in &nodes[1..] {
            assert_eq!(n.gate("pay").await, Gate::Go, "the ramp is open");
        }
    }

    #[tokio::test]
    async fn a_probe_unanswered_for_a_minute_is_taken_over_by_another_node() {
        let (nodes, clock, _dir) = nodes(2).await;
        nodes[0]
            .hold("db", Duration::from_secs(5), "", "admin", 0)
            .await
            .unwrap();
        nodes[1].refresh().await.unwrap();
        clock.advance(5_000);
        assert_eq!(nodes[0].gate("db").await, Gate::Probe);
        assert!(matches!(nodes[1].gate("db").await, Gate::Wait(_)));
        clock.advance(PROBE_TIMEOUT.as_millis() as i64 - 1_000);
        assert!(
            matches!(nodes[1].gate("db").await, Gate::Wait(_)),
            "not stale yet"
        );
        clock.advance(1_000);
        assert_eq!(nodes[1].gate("db").await, Gate::Probe, "taken over");
        assert!(
            matches!(nodes[0].gate("db").await, Gate::Wait(_)),
            "the first node's late answer is not the probe any more"
        );
    }

    #[tokio::test]
    async fn a_hold_waits_then_one_probe_goes_then_the_ramp() {
        let (h, clock, _dir) = holds().await;
        assert_eq!(h.gate("pay").await, Gate::Go);
        h.hold("pay", Duration::from_secs(30), "503", "admin", 0)
            .await
            .unwrap();
        assert_eq!(h.gate("pay").await, Gate::Wait(1_030_000));
        assert_eq!(h.gate("other").await, Gate::Go);
        clock.advance(30_000);
        assert_eq!(h.gate("pay").await, Gate::Probe);
        assert!(
            matches!(h.gate("pay").await, Gate::Wait(_)),
            "one probe at a time"
        );
        h.probe_answered("pay", ProbeAnswer::Answered).await;
        let mut first_second = 0;
        for _ in 0..100 {
            if h.gate("pay").await == Gate::Go {
                first_second += 1;
            }
        }
        assert_eq!(first_second as u64, RAMP_START - 1);
        clock.advance(RAMP_FOR.as_millis() as i64);
        assert_eq!(h.gate("pay").await, Gate::Go);
    }

    #[tokio::test]
    async fn a_probe_answered_retry_renews_the_hold_with_backoff() {
        let (h, clock, _dir) = holds().await;
        h.hold("pay", Duration::from_secs(10), "", "executor", 0)
            .await
            .unwrap();
        clock.advance(10_000);
        assert_eq!(h.gate("pay").await, Gate::Probe);
        h.probe_answered("pay", ProbeAnswer::Retry(None)).await;
        let row = h.list().await.unwrap().pop().unwrap();
        assert_eq!(row.until_ms - row.held_at_ms, 20_000, "twice the last hold");
        assert_eq!(row.renewals, 1);
        assert!(matches!(h.gate("pay").await, Gate::Wait(_)));
    }

    #[tokio::test]
    async fn a_release_ramps_without_a_probe_and_a_stale_probe_is_replaced() {
        let (h, clock, _dir) = holds().await;
        assert!(!h.release("pay").await.unwrap(), "not held");
        h.hold("pay", Duration::from_secs(60), "", "admin", 0)
            .await
            .unwrap();
        assert!(h.release("pay").await.unwrap());
        assert_eq!(h.gate("pay").await, Gate::Go);
        assert!(h.list().await.unwrap().is_empty());

        h.hold("db", Duration::from_secs(5), "", "admin", 0)
            .await
            .unwrap();
        clock.advance(5_000);
        assert_eq!(h.gate("db").await, Gate::Probe);
        clock.advance(PROBE_TIMEOUT.as_millis() as i64);
        assert_eq!(
            h.gate("db").await,
            Gate::Probe,
            "the first probe was never answered"
        );
    }

    #[test]
    fn the_ramp_doubles_every_second() {
        assert_eq!(ramp_allowance(0), 10);
        assert_eq!(ramp_allowance(1000), 30);
        assert_eq!(ramp_allowance(2500), 70);
    }

    /// A store whose `list_holds` reads, then waits for `go` before answering: a refresh
    /// whose read is older than what the node writes meanwhile.
    #[derive(Debug)]
    struct SlowList {
        inner: Arc<dyn HoldStore>,
        go: Arc<tokio::sync::Semaphore>,
    }

    #[async_trait::async_trait]
    impl HoldStore for SlowList {
        async fn put_hold(&self, hold: &HoldRow, ttl: u32) -> rebound_store::StoreResult<()> {
            self.inner.put_hold(hold, ttl).await
        }
        async fn list_holds(&self) -> rebound_store::StoreResult<Vec<HoldRow>> {
            let rows = self.inner.list_holds().await;
            self.go.acquire().await.unwrap().forget();
            rows
        }
        async fn claim_probe(
            &self,
            dependency: &str,
            until_ms: i64,
            owner: &str,
            now_ms: i64,
            stale_before_ms: i64,
            ttl: u32,
        ) -> rebound_store::StoreResult<ProbeClaim> {
            self.inner
                .claim_probe(dependency, until_ms, owner, now_ms, stale_before_ms, ttl)
                .await
        }
        async fn answer_probe(
            &self,
            dependency: &str,
            until_ms: i64,
            owner: &str,
            answered_at_ms: i64,
            ttl: u32,
        ) -> rebound_store::StoreResult<bool> {
            self.inner
                .answer_probe(dependency, until_ms, owner, answered_at_ms, ttl)
                .await
        }
    }

    #[tokio::test]
    async fn a_refresh_older_than_a_hold_written_here_does_not_undo_it() {
        // Issue 46's CI: a probe acked with a new hold, then a refresh whose read predated
        // that hold put the ended one back, and this node, which owned its probe, sent a
        // second probe while the new hold was in force.
        let (nodes, clock, _dir) = nodes(1).await;
        let go = Arc::new(tokio::sync::Semaphore::new(0));
        let slow = Arc::new(Holds::new(
            Arc::new(SlowList {
                inner: nodes[0].store.clone(),
                go: go.clone(),
            }),
            nodes[0].clock.clone(),
            "node-0",
        ));
        slow.hold("pay", Duration::from_secs(2), "503", "executor", 0)
            .await
            .unwrap();
        clock.advance(2_000);
        assert_eq!(slow.gate("pay").await, Gate::Probe);
        // A refresh reads the table (the ended hold) and is held up ...
        let refresh = tokio::spawn({
            let slow = slow.clone();
            async move { slow.refresh().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // ... while the probe's ack holds the dependency again.
        slow.hold(
            "pay",
            Duration::from_secs(2),
            "Retry-After: 2",
            "executor",
            1,
        )
        .await
        .unwrap();
        go.add_permits(1);
        refresh.await.unwrap().unwrap();
        assert!(
            matches!(slow.gate("pay").await, Gate::Wait(_)),
            "the new hold stands: no second probe"
        );
        // A refresh that began after the write takes the table as it is.
        go.add_permits(1);
        slow.refresh().await.unwrap();
        assert!(matches!(slow.gate("pay").await, Gate::Wait(_)));
        clock.advance(2_000);
        assert_eq!(
            slow.gate("pay").await,
            Gate::Probe,
            "its own probe after it"
        );
    }
}
