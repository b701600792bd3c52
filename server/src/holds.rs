//! Dependency holds (docs/architecture.md, "Dependency holds"): while a downstream
//! dependency is held, no retry naming it (`EnqueueRetryRequest.dependency`) is delivered, in
//! any service, and none uses an attempt. Holds are stored (`HoldStore`), so every node
//! applies them and they survive restarts; each node keeps them in memory, refreshed every
//! `REFRESH_EVERY` and at once for a hold set through it.
//!
//! When a hold ends, each node lets one delivery of the dependency go first, the probe:
//! - acked SUCCEEDED (or FAILED: the dependency answered), the rest are released at a
//!   ramping rate, `RAMP_START` deliveries in the first second, doubling every second, then
//!   without limit after `RAMP_FOR` (a service's own limits still cap them);
//! - acked RETRY, the hold is renewed: for the duration the ack's own hold gives, else for
//!   twice the last hold's length (at most `MAX_RENEWAL`);
//! - not acked within `PROBE_TIMEOUT`, another probe may go.
//!
//! A released hold (`ReleaseDependency`) ramps the same way from the release, without a probe.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use tokio::sync::watch;

use crate::{
    clock::SharedClock,
    error::Error,
    store::{HoldRow, HoldStore},
};

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
    /// A probe is out since (ms), for the hold that ended at `until`.
    Probing { since: i64, until: i64 },
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
    rows: RwLock<HashMap<String, HoldRow>>,
    after: Mutex<HashMap<String, After>>,
}

impl Holds {
    pub fn new(store: Arc<dyn HoldStore>, clock: SharedClock) -> Self {
        Self {
            store,
            clock,
            rows: RwLock::default(),
            after: Mutex::default(),
        }
    }

    /// Reads the table into memory.
    pub async fn refresh(&self) -> Result<(), Error> {
        let rows = self.store.list_holds().await?;
        let map: HashMap<String, HoldRow> = rows
            .into_iter()
            .map(|r| (r.dependency.clone(), r))
            .collect();
        let now = self.clock.now_ms();
        let in_force = map.values().filter(|r| r.until_ms > now).count();
        crate::metrics::global()
            .dependency_holds
            .set(in_force as i64);
        *self.rows.write().expect("holds lock") = map;
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
        self.rows
            .write()
            .expect("holds lock")
            .insert(row.dependency.clone(), row);
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

    /// Whether a retry naming `dependency` may be delivered now.
    pub fn gate(&self, dependency: &str) -> Gate {
        if dependency.is_empty() {
            return Gate::Go;
        }
        let now = self.clock.now_ms();
        let Some(row) = self
            .rows
            .read()
            .expect("holds lock")
            .get(dependency)
            .cloned()
        else {
            return Gate::Go;
        };
        if row.until_ms > now {
            return Gate::Wait(row.until_ms);
        }
        let mut after = self.after.lock().expect("holds lock");
        let state = after.get(dependency).copied();
        // A state left from an earlier hold does not apply to this one.
        let state = state.filter(|s| match s {
            After::Probing { until, .. } | After::Ramping { until, .. } => *until == row.until_ms,
        });
        match state {
            None if row.source == "release" => {
                after.insert(
                    dependency.to_string(),
                    After::Ramping {
                        from: row.until_ms,
                        released: 1,
                        until: row.until_ms,
                    },
                );
                Gate::Go
            }
            // The ramp of this hold is over (or it ended long ago): nothing to hold back.
            None if now - row.until_ms
                > RAMP_FOR.as_millis() as i64 + PROBE_TIMEOUT.as_millis() as i64 =>
            {
                Gate::Go
            }
            None => {
                after.insert(
                    dependency.to_string(),
                    After::Probing {
                        since: now,
                        until: row.until_ms,
                    },
                );
                Gate::Probe
            }
            Some(After::Probing { since, until }) => {
                if now - since >= PROBE_TIMEOUT.as_millis() as i64 {
                    after.insert(dependency.to_string(), After::Probing { since: now, until });
                    Gate::Probe
                } else {
                    Gate::Wait(now + RECHECK_MS)
                }
            }
            Some(After::Ramping {
                from,
                released,
                until,
            }) => {
                let elapsed = now - from;
                if elapsed >= RAMP_FOR.as_millis() as i64 {
                    return Gate::Go;
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
        }
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
    use crate::{clock::ManualClock, store::embedded::EmbeddedStore};

    async fn holds() -> (Arc<Holds>, ManualClock, tempfile::TempDir) {
        use crate::store::MigrationStore;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let shared: SharedClock = Arc::new(clock.clone());
        let store = EmbeddedStore::open(dir.path(), "r", "c", shared.clone()).unwrap();
        store.migrate(0).await.unwrap();
        (Arc::new(Holds::new(Arc::new(store), shared)), clock, dir)
    }

    #[tokio::test]
    async fn a_hold_waits_then_one_probe_goes_then_the_ramp() {
        let (h, clock, _dir) = holds().await;
        assert_eq!(h.gate("pay"), Gate::Go);
        h.hold("pay", Duration::from_secs(30), "503", "admin", 0)
            .await
            .unwrap();
        assert_eq!(h.gate("pay"), Gate::Wait(1_030_000));
        assert_eq!(h.gate("other"), Gate::Go);
        clock.advance(30_000);
        assert_eq!(h.gate("pay"), Gate::Probe);
        assert!(
            matches!(h.gate("pay"), Gate::Wait(_)),
            "one probe at a time"
        );
        h.probe_answered("pay", ProbeAnswer::Answered).await;
        let first_second = (0..100).filter(|_| h.gate("pay") == Gate::Go).count();
        assert_eq!(first_second as u64, RAMP_START - 1);
        clock.advance(RAMP_FOR.as_millis() as i64);
        assert_eq!(h.gate("pay"), Gate::Go);
    }

    #[tokio::test]
    async fn a_probe_answered_retry_renews_the_hold_with_backoff() {
        let (h, clock, _dir) = holds().await;
        h.hold("pay", Duration::from_secs(10), "", "executor", 0)
            .await
            .unwrap();
        clock.advance(10_000);
        assert_eq!(h.gate("pay"), Gate::Probe);
        h.probe_answered("pay", ProbeAnswer::Retry(None)).await;
        let row = h.list().await.unwrap().pop().unwrap();
        assert_eq!(row.until_ms - row.held_at_ms, 20_000, "twice the last hold");
        assert_eq!(row.renewals, 1);
        assert!(matches!(h.gate("pay"), Gate::Wait(_)));
    }

    #[tokio::test]
    async fn a_release_ramps_without_a_probe_and_a_stale_probe_is_replaced() {
        let (h, clock, _dir) = holds().await;
        assert!(!h.release("pay").await.unwrap(), "not held");
        h.hold("pay", Duration::from_secs(60), "", "admin", 0)
            .await
            .unwrap();
        assert!(h.release("pay").await.unwrap());
        assert_eq!(h.gate("pay"), Gate::Go);
        assert!(h.list().await.unwrap().is_empty());

        h.hold("db", Duration::from_secs(5), "", "admin", 0)
            .await
            .unwrap();
        clock.advance(5_000);
        assert_eq!(h.gate("db"), Gate::Probe);
        clock.advance(PROBE_TIMEOUT.as_millis() as i64);
        assert_eq!(
            h.gate("db"),
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
}
