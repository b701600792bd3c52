//! Node-0's directory compaction (docs/architecture.md, "The ring" and invariant 4, "Tree
//! integrity"): only the holder of the compactor lease deletes Tier-2 and Tier-1 rows, and only
//! behind both gates. Gate 1: the window has no live Tier-3 row, cluster-wide (no token
//! filter), so no node still has work in it. Gate 2: the window has ended plus a margin, so no
//! writer can add to it. Deleting a window that fails either gate would hide its remaining
//! pointers from every traversal, which is the one way this layout can lose a retry.

use std::{sync::Arc, time::Duration};

use tokio::sync::watch;

use crate::window::WindowGrid;
use crate::{error::Error, ownership::Ownership, walk::Walk};
use rebound_store::{clock::SharedClock, window::WindowId, DirectoryStore};

/// Compactor settings (`engine::Settings::options` derives them from the engine's
/// settings).
#[derive(Debug, Clone, Copy)]
pub struct CompactorOptions {
    /// Gate 2's margin: how long after its end (plus the largest writer lag) a window may go.
    pub gate_margin_ms: i64,
    /// Lease validity a delete needs left before it starts (fencing margin).
    pub fence_margin_ms: i64,
}

/// Node-0: deletes Tier-2 and Tier-1 rows behind both gates (above), and moves the
/// per-day low-water mark past compacted windows so no scan re-reads their tombstones.
#[derive(Debug)]
pub struct Compactor {
    store: Arc<dyn DirectoryStore>,
    ownership: Arc<dyn Ownership>,
    clock: SharedClock,
    grid: WindowGrid,
    /// Gate 2: a window is compacted only once `now >= end + margin`.
    margin_ms: i64,
    fence_margin_ms: i64,
    /// The writer lag last warned about (warned once per value).
    warned_lag: std::sync::atomic::AtomicI64,
}

/// What one compaction pass did, for tests and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    pub windows_deleted: Vec<WindowId>,
    pub days_deleted: Vec<i32>,
    pub blocked_by_instances: Vec<WindowId>,
}

impl Compactor {
    pub fn new(
        store: Arc<dyn DirectoryStore>,
        ownership: Arc<dyn Ownership>,
        clock: SharedClock,
        grid: WindowGrid,
        opts: CompactorOptions,
    ) -> Self {
        Self {
            store,
            ownership,
            clock,
            grid,
            margin_ms: opts.gate_margin_ms,
            fence_margin_ms: opts.fence_margin_ms,
            warned_lag: std::sync::atomic::AtomicI64::new(0),
        }
    }

    fn fenced(&self) -> bool {
        self.ownership
            .is_compactor(self.clock.now_ms() + self.fence_margin_ms)
    }

    pub async fn run(self: Arc<Self>, interval: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.compact().await {
                tracing::warn!(error = %e, "compaction pass failed, will retry");
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// One pass over every year that holds a day.
    pub async fn compact(&self) -> Result<CompactionReport, Error> {
        let mut report = CompactionReport::default();
        if !self.fenced() {
            return Ok(report);
        }
        // Gate 2 in the clock of the writer furthest behind: a live node whose clock lags
        // may still place retries in windows this node has long seen end (see `peers`).
        let lag = self.ownership.max_writer_lag_ms();
        if lag > 0
            && self
                .warned_lag
                .swap(lag, std::sync::atomic::Ordering::Relaxed)
                != lag
        {
            tracing::warn!(
                lag_ms = lag,
                "a live node's clock lags this one's; compaction waits for it (turn clock sync on: REBOUND_CLOCK_SYNC)"
            );
        }
        let now = self.clock.now_ms() - lag;
        let year = self.grid.window_of(now).year();
        // Every year that holds a day, however old (a backlog of any age).
        let walk = Walk(&*self.store);
        for y in walk.years(&[year - 1, year], Some(year)).await? {
            for day in walk.days(y).await? {
                if !self.fenced() {
                    return Ok(report);
                }
                self.compact_day(y, day, now, &mut report).await?;
            }
        }
        Ok(report)
    }

    async fn compact_day(
        &self,
        year: i32,
        day: i32,
        now: i64,
        report: &mut CompactionReport,
    ) -> Result<(), Error> {
        let (low, windows) = Walk(&*self.store).windows(day).await?;
        let mut new_low = None;
        let mut all_gone = true;
        for index in &windows {
            let window = WindowId { day, index: *index };
            // Gate 2: the window has ended, plus the margin.
            if !self.grid.is_readable(window, now, self.margin_ms) {
                all_gone = false;
                new_low.get_or_insert(*index);
                break;
            }
            // Gate 1: no live Tier-3 row for the window, cluster-wide (no token filter).
            if self.store.window_has_instances(window).await? {
                report.blocked_by_instances.push(window);
                all_gone = false;
                new_low.get_or_insert(*index);
                continue;
            }
            if !self.fenced() {
                return Ok(());
            }
            // The whole Tier-3 partition goes first (clearing its row tombstones), then the
            // Tier-2 row.
            self.store.delete_window_instances(window).await?;
            self.store.delete_window(window).await?;
            report.windows_deleted.push(window);
        }
        let day_end = self.grid.start_ms(WindowId {
            day: day + 1,
            index: 0,
        });
        if all_gone && now >= day_end + self.margin_ms {
            if !self.fenced() {
                return Ok(());
            }
            self.store.delete_day(year, day).await?;
            self.store.delete_low_water(day).await?;
            report.days_deleted.push(day);
            return Ok(());
        }
        let target = new_low.unwrap_or_else(|| windows.last().map_or(low, |w| w + 1));
        // Never past a window a writer may still place retries in, listed yet or not: a
        // writer that read its clock a moment before another may land a row in the window
        // before the one this pass found first. Only windows that have ended, plus the
        // margin, are closed to every writer.
        let open = self.grid.window_of(now - self.margin_ms);
        let target = match day.cmp(&open.day) {
            std::cmp::Ordering::Less => target,
            std::cmp::Ordering::Equal => target.min(open.index),
            std::cmp::Ordering::Greater => 0,
        };
        if target > low {
            self.store.set_low_water(day, target).await?;
        }
        Ok(())
    }
}
