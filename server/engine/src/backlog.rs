//! The backlog: scheduled retries per service and window, counted from the directory
//! (`walk`) and the pointers of each bucket. `GetStats` measures it on demand; on the
//! compactor node, `run` measures it every `REBOUND_STATS_INTERVAL_MS` into the
//! `rebound_pending` and `rebound_oldest_overdue_seconds` gauges, so that a scrape reads
//! numbers and never walks the directory.
//!
//! A bucket's pointers only grow while writers may still target its window; once the
//! window has started (plus twice the skew margin for a lagging writer) its count is fixed
//! until the whole bucket is deleted. `Counts` keeps such counts, so a periodic measure
//! counts the pointers of a closed window once, and re-counts only windows still open to
//! writers.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, TryStreamExt};
use tokio::sync::watch;

use crate::metric_definitions::{self as metrics, BandLabels};
use crate::window::WindowGrid;
use crate::{error::Error, ownership::Ownership, walk::Walk};
use rebound_common::metrics::ServiceLabel;
use rebound_store::{
    clock::SharedClock,
    window::{WindowId, DAY_MS},
    Location, RetryStore,
};

/// Pending retries of one service by due band (relative to the measuring instant).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bands {
    pub overdue: u64,
    pub within_minute: u64,
    pub within_hour: u64,
    pub within_day: u64,
    pub later: u64,
}

/// The backlog of one service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceBacklog {
    pub pending: u64,
    pub bands: Bands,
    /// Age of the oldest overdue window that holds pointers (from its start).
    pub oldest_due_age_ms: Option<i64>,
    /// Pointers per window, oldest first (windows with none are left out).
    pub windows: Vec<(WindowId, u64)>,
}

/// Pointer counts of buckets in windows closed to writers (see the module doc).
#[derive(Debug, Default)]
pub struct Counts {
    fixed: HashMap<(String, Location), u64>,
}

/// Counts every pointer of the directory (`only`'s when given), per service and window, at
/// `now`. Counts of closed windows are taken from, and kept in, `cache` when given.
pub async fn measure(
    store: &Arc<dyn RetryStore>,
    grid: &WindowGrid,
    now: i64,
    only: Option<&str>,
    closed_after_ms: i64,
    mut cache: Option<&mut Counts>,
) -> Result<BTreeMap<String, ServiceBacklog>, Error> {
    let year = grid.window_of(now).year();
    let walk = Walk(&**store);
    let years = walk.years(&[year - 1, year, year + 1], None).await?;
    let entries = walk.entries(&years, only).await?;
    let mut known: Vec<(usize, u64)> = Vec::new();
    let mut jobs: Vec<(usize, String, Location, bool)> = Vec::new();
    let mut seen: HashSet<(String, Location)> = HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let closed = grid.start_ms(e.window) + closed_after_ms < now;
        for b in &e.buckets {
            let loc = Location {
                window: e.window,
                instance: e.row.instance.clone(),
                bucket: *b,
            };
            let key = (e.row.service.clone(), loc);
            let hit = cache.as_ref().and_then(|c| c.fixed.get(&key).copied());
            match hit {
                Some(n) if closed => known.push((i, n)),
                _ => jobs.push((i, key.0.clone(), key.1.clone(), closed)),
            }
            seen.insert(key);
        }
    }
    let counted: Vec<(usize, String, Location, bool, u64)> = futures::stream::iter(jobs)
        .map(|(i, service, loc, closed)| {
            let store = store.clone();
            async move {
                let n = store.count_pointers(&service, &loc).await?;
                Ok::<_, Error>((i, service, loc, closed, n))
            }
        })
        .buffered(16)
        .try_collect()
        .await?;
    if let Some(c) = cache.as_deref_mut() {
        // Deleted buckets leave the cache with the directory rows that named them.
        c.fixed.retain(|k, _| seen.contains(k));
    }
    let mut by_window: BTreeMap<(String, WindowId), u64> = BTreeMap::new();
    for (i, n) in known {
        let e = &entries[i];
        *by_window
            .entry((e.row.service.clone(), e.window))
            .or_default() += n;
    }
    for (i, service, loc, closed, n) in counted {
        let e = &entries[i];
        *by_window
            .entry((e.row.service.clone(), e.window))
            .or_default() += n;
        if closed {
            if let Some(c) = cache.as_deref_mut() {
                c.fixed.insert((service, loc), n);
            }
        }
    }
    let mut per: BTreeMap<String, ServiceBacklog> = BTreeMap::new();
    for ((service, window), n) in by_window {
        if n == 0 {
            continue;
        }
        let st = per.entry(service).or_default();
        st.pending += n;
        let end = grid.end_ms(window);
        match end - now {
            d if d <= 0 => {
                st.bands.overdue += n;
                let age = now - grid.start_ms(window);
                if st.oldest_due_age_ms.is_none_or(|a| a < age) {
                    st.oldest_due_age_ms = Some(age);
                }
            }
            d if d <= 60_000 => st.bands.within_minute += n,
            d if d <= 3_600_000 => st.bands.within_hour += n,
            d if d <= DAY_MS => st.bands.within_day += n,
            _ => st.bands.later += n,
        }
        st.windows.push((window, n));
    }
    Ok(per)
}

/// Sets the backlog gauges to `per`; services measured before and absent now read 0.
fn publish(per: &BTreeMap<String, ServiceBacklog>, published: &mut HashSet<Arc<str>>, now: i64) {
    let m = metrics::metrics();
    let mut sums: HashMap<Arc<str>, (Bands, Option<i64>)> = HashMap::new();
    for (service, b) in per {
        let e = sums
            .entry(rebound_common::metrics::service(service))
            .or_default();
        e.0.overdue += b.bands.overdue;
        e.0.within_minute += b.bands.within_minute;
        e.0.within_hour += b.bands.within_hour;
        e.0.within_day += b.bands.within_day;
        e.0.later += b.bands.later;
        e.1 = e.1.max(b.oldest_due_age_ms);
    }
    for gone in published
        .iter()
        .filter(|s| !sums.contains_key(*s))
        .cloned()
        .collect::<Vec<_>>()
    {
        sums.insert(gone, Default::default());
    }
    published.clear();
    for (service, (bands, oldest)) in sums {
        for (band, n) in [
            ("overdue", bands.overdue),
            ("within_minute", bands.within_minute),
            ("within_hour", bands.within_hour),
            ("within_day", bands.within_day),
            ("later", bands.later),
        ] {
            m.pending
                .get_or_create(&BandLabels {
                    service: service.clone(),
                    band,
                })
                .set(n as i64);
        }
        m.oldest_overdue
            .get_or_create(&ServiceLabel {
                service: service.clone(),
            })
            .set(oldest.unwrap_or(0) as f64 / 1000.0);
        published.insert(service);
    }
    m.backlog_measured.set(now as f64 / 1000.0);
}

/// Measures the backlog every `every` while this node is the compactor, until `stop`.
pub async fn run(
    store: Arc<dyn RetryStore>,
    ownership: Arc<dyn Ownership>,
    clock: SharedClock,
    grid: WindowGrid,
    closed_after_ms: i64,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut cache = Counts::default();
    let mut published: HashSet<Arc<str>> = HashSet::new();
    loop {
        let now = clock.now_ms();
        if ownership.is_compactor(now) {
            match measure(&store, &grid, now, None, closed_after_ms, Some(&mut cache)).await {
                Ok(per) => publish(&per, &mut published, clock.now_ms()),
                Err(e) => tracing::warn!(error = %e, "measuring the backlog failed, will retry"),
            }
        } else if !published.is_empty() {
            // Another node measures now: export nothing rather than a stale figure.
            let m = metrics::metrics();
            m.pending.clear();
            m.oldest_overdue.clear();
            m.backlog_measured.set(0.0);
            published.clear();
            cache = Counts::default();
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
