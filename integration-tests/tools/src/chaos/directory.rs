//! The directory as CQL sees it: samples of the five tiers during the run (children read
//! first, parents after, since parents are deleted after their children), the orphans that
//! persist, and the end state. A short run reads each table whole ([`Scan::Whole`]); a long
//! one in slices ([`Scan::Sliced`]), since a read that walks more row tombstones than
//! Cassandra's warning threshold is logged as a tombstone warning of the keyspace.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use chrono::{Datelike, NaiveDate};
use scylla::client::{
    execution_profile::ExecutionProfile, session::Session, session_builder::SessionBuilder,
};

pub async fn session(contact_point: &str) -> anyhow::Result<Session> {
    let profile = ExecutionProfile::builder()
        .request_timeout(Some(Duration::from_secs(3)))
        .build();
    Ok(SessionBuilder::new()
        .known_node(contact_point)
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await?)
}

/// Cassandra's clock minus ours, and the error of the measurement (the best of 5 rounds).
pub async fn clock_offset(cql: &Session) -> anyhow::Result<(i64, i64)> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..5 {
        let before = super::history::local_ms();
        let (t,): (i64,) = cql
            .query_unpaged(
                "SELECT toUnixTimestamp(currentTimestamp()) FROM system.local",
                (),
            )
            .await?
            .into_rows_result()?
            .single_row()?;
        let after = super::history::local_ms();
        let err = (after - before + 1) / 2 + 1;
        let offset = t - (before + after) / 2;
        if best.is_none_or(|(_, e)| err < e) {
            best = Some((offset, err));
        }
    }
    Ok(best.expect("measured"))
}

type Day = NaiveDate;
/// (day, window, service, instance, bucket)
type BucketKey = (Day, i32, String, String, i32);
/// (day, window, service, instance)
type InstanceKey = (Day, i32, String, String);

#[derive(Default, Debug)]
pub struct Tiers {
    pub pointers: BTreeSet<BucketKey>,
    pub buckets: BTreeSet<BucketKey>,
    pub instances: BTreeSet<InstanceKey>,
    pub windows: BTreeSet<(Day, i32)>,
    pub days: BTreeSet<(i32, Day)>,
    /// day → first window the scans read (window_low_water).
    pub low_water: std::collections::BTreeMap<Day, i32>,
}

async fn rows<R>(cql: &Session, q: String) -> anyhow::Result<Vec<R>>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    let mut out = Vec::new();
    let mut stream = cql.query_iter(q, ()).await?.rows_stream::<R>()?;
    use futures::StreamExt;
    while let Some(r) = stream.next().await {
        out.push(r?);
    }
    Ok(out)
}

/// Every row of `q`, prepared once and run with each of `values`.
async fn rows_each<R, V>(cql: &Session, q: String, values: Vec<V>) -> anyhow::Result<Vec<R>>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    V: scylla::serialize::row::SerializeRow,
{
    use futures::StreamExt;
    let p = cql.prepare(q).await?;
    let mut out = Vec::new();
    for v in values {
        let mut stream = cql.execute_iter(p.clone(), v).await?.rows_stream::<R>()?;
        while let Some(r) = stream.next().await {
            out.push(r?);
        }
    }
    Ok(out)
}

/// How [`read_with`] reads the tiers.
#[derive(Clone, Copy, Debug)]
pub enum Scan {
    /// One range scan per table: few enough row tombstones in a run of a few minutes.
    Whole,
    /// The tables of many partitions (tiers 3-5) in `token_slices` token ranges, and Tier 2
    /// (one partition per day) in runs of at most [`WINDOW_CHUNK`] windows of
    /// `window_seconds`, from `since_ms` until an hour from now on the days that span covers
    /// (whole on any other day Tier 1 or Tier 3 names): rows deleted during a long run stay
    /// tombstones for gc_grace_seconds (3 h), and no read may walk as many as Cassandra warns
    /// about (`tombstone_warn_threshold`, 1,000 here). A fresh keyspace has no Tier-2 row
    /// outside that span unless one was written to a wrong day.
    Sliced {
        token_slices: u32,
        window_seconds: u32,
        since_ms: i64,
    },
}

/// Tier-2 windows read at once by [`Scan::Sliced`].
pub const WINDOW_CHUNK: i32 = 500;

/// `n` token ranges (lo, hi] covering the Murmur3 ring.
pub fn token_ranges(n: u32) -> Vec<(i64, i64)> {
    let n = i128::from(n.max(1));
    let (min, max) = (i128::from(i64::MIN), i128::from(i64::MAX));
    (0..n)
        .map(|k| {
            let lo = min + (max - min) * k / n;
            let hi = if k + 1 == n {
                max
            } else {
                min + (max - min) * (k + 1) / n
            };
            (lo as i64, hi as i64)
        })
        .collect()
}

/// `cols` of every row of `ks.table`, whose partition key is `pk`, as `scan` says.
async fn table<R>(
    cql: &Session,
    ks: &str,
    table: &str,
    cols: &str,
    pk: &str,
    scan: &Scan,
) -> anyhow::Result<Vec<R>>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    match scan {
        Scan::Whole => rows(cql, format!("SELECT {cols} FROM {ks}.{table}")).await,
        Scan::Sliced { token_slices, .. } => {
            rows_each(
                cql,
                format!(
                    "SELECT {cols} FROM {ks}.{table} WHERE token({pk}) > ? AND token({pk}) <= ?"
                ),
                token_ranges(*token_slices),
            )
            .await
        }
    }
}

/// The (day, first window, end window) runs of Tier 2 that [`Scan::Sliced`] reads: the
/// windows from `since_ms` to `until_ms` on the days they span, every window of any other
/// of `days`, at most [`WINDOW_CHUNK`] at a time.
pub fn window_runs(
    window_seconds: u32,
    since_ms: i64,
    until_ms: i64,
    days: &BTreeSet<Day>,
) -> Vec<(Day, i32, i32)> {
    let w = i64::from(window_seconds.max(1)) * 1000;
    let per_day = (86_400_000 / w) as i32;
    let day_of = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("a time")
            .date_naive()
    };
    let window_of = |ms: i64| (ms.rem_euclid(86_400_000) / w) as i32;
    let (first, last) = (day_of(since_ms), day_of(until_ms));
    let mut spans: std::collections::BTreeMap<Day, (i32, i32)> = Default::default();
    let mut d = first;
    while d <= last {
        let lo = if d == first { window_of(since_ms) } else { 0 };
        let hi = if d == last {
            window_of(until_ms) + 1
        } else {
            per_day
        };
        spans.insert(d, (lo, hi));
        d = d.succ_opt().expect("a next day");
    }
    for d in days {
        spans.entry(*d).or_insert((0, per_day));
    }
    let mut out = Vec::new();
    for (d, (lo, hi)) in spans {
        let mut a = lo;
        while a < hi {
            let b = (a + WINDOW_CHUNK).min(hi);
            out.push((d, a, b));
            a = b;
        }
    }
    out
}

/// Reads the tiers children first (Tier 5 → Tier 1), each table whole.
pub async fn read(cql: &Session, ks: &str) -> anyhow::Result<Tiers> {
    read_with(cql, ks, &Scan::Whole).await
}

/// Reads the tiers children first (Tier 5 → Tier 1): a parent deleted after its children can
/// then not look like an orphan.
pub async fn read_with(cql: &Session, ks: &str, scan: &Scan) -> anyhow::Result<Tiers> {
    let mut t = Tiers::default();
    const DAY_WINDOW: &str = "region, cluster, day, window";
    for (day, window, service, instance, bucket) in table::<BucketKey>(
        cql,
        ks,
        "retry_transactions_by_bucket",
        "day, window, service, instance, bucket",
        &format!("{DAY_WINDOW}, service, instance, bucket"),
        scan,
    )
    .await?
    {
        t.pointers.insert((day, window, service, instance, bucket));
    }
    t.buckets = table::<BucketKey>(
        cql,
        ks,
        "buckets_by_instance",
        "day, window, service, instance, bucket",
        &format!("{DAY_WINDOW}, service, instance"),
        scan,
    )
    .await?
    .into_iter()
    .collect();
    t.instances = table::<InstanceKey>(
        cql,
        ks,
        "instances_by_window",
        "day, window, service, instance",
        DAY_WINDOW,
        scan,
    )
    .await?
    .into_iter()
    .collect();
    // Tiers 2 and 1 in turn, Tier 1 (a row per day, a partition per year) whole.
    t.windows = match scan {
        Scan::Whole => {
            rows::<(Day, i32)>(cql, format!("SELECT day, window FROM {ks}.windows_by_day"))
                .await?
                .into_iter()
                .collect()
        }
        Scan::Sliced {
            window_seconds,
            since_ms,
            ..
        } => {
            let mut days: BTreeSet<Day> = t.instances.iter().map(|i| i.0).collect();
            days.extend(
                rows::<(i32, Day)>(cql, format!("SELECT year, day FROM {ks}.days_by_year"))
                    .await?
                    .into_iter()
                    .map(|d| d.1),
            );
            let until = super::history::now_ms() + 3_600_000;
            rows_each::<(Day, i32), _>(
                cql,
                format!(
                    "SELECT day, window FROM {ks}.windows_by_day WHERE region = 'local' \
                     AND cluster = 'default' AND day = ? AND window >= ? AND window < ?"
                ),
                window_runs(*window_seconds, *since_ms, until, &days),
            )
            .await?
            .into_iter()
            .collect()
        }
    };
    t.days = rows::<(i32, Day)>(cql, format!("SELECT year, day FROM {ks}.days_by_year"))
        .await?
        .into_iter()
        .collect();
    t.low_water = rows::<(Day, i32)>(
        cql,
        format!("SELECT day, low_window FROM {ks}.window_low_water"),
    )
    .await?
    .into_iter()
    .collect();
    Ok(t)
}

/// Every lower-tier row of `t` whose parent `t` lacks, as (child, missing parent) text.
pub fn orphans(t: &Tiers) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for p in &t.pointers {
        if !t.buckets.contains(p) {
            out.insert((
                format!("pointer partition {p:?}"),
                format!("buckets_by_instance row {p:?}"),
            ));
        }
    }
    for (d, w, s, i, b) in &t.buckets {
        let k = (*d, *w, s.clone(), i.clone());
        if !t.instances.contains(&k) {
            out.insert((
                format!("bucket row {:?}", (d, w, s, i, b)),
                format!("instances_by_window row {k:?}"),
            ));
        }
    }
    for (d, w, s, i) in &t.instances {
        if !t.windows.contains(&(*d, *w)) {
            out.insert((
                format!("instance row {:?}", (d, w, s, i)),
                format!("windows_by_day row {:?}", (d, w)),
            ));
        }
    }
    // The scans start at the low-water mark: a window below it that still has Tier-3 rows is
    // never read again (its retries are stranded).
    for (d, w, s, i) in &t.instances {
        if let Some(low) = t.low_water.get(d).filter(|low| *low > w) {
            out.insert((
                format!("instance row {:?}", (d, w, s, i)),
                format!("a window_low_water of {low} at most {w} (the scans skip it)"),
            ));
        }
    }
    for (d, w) in &t.windows {
        if !t.days.contains(&(d.year(), *d)) {
            out.insert((
                format!("window row {:?}", (d, w)),
                format!("days_by_year row {:?}", (d.year(), d)),
            ));
        }
    }
    out
}

pub struct Samples {
    pub samples: usize,
    /// Orphans seen in one sample and still orphans in the next one, with the time of the
    /// first of those samples.
    pub orphans: Vec<(i64, String)>,
}

/// Samples every 1.5 s until `stop`, each table whole (see [`sampler_with`]).
pub async fn sampler(cql: Session, ks: String, stop: Arc<AtomicBool>) -> Samples {
    sampler_with(cql, ks, stop, Scan::Whole, Duration::from_millis(1_500)).await
}

/// Samples every `every` until `stop`; an orphan counts only if the next sample still has
/// the child without its parent.
pub async fn sampler_with(
    cql: Session,
    ks: String,
    stop: Arc<AtomicBool>,
    scan: Scan,
    every: Duration,
) -> Samples {
    let mut samples = 0;
    let mut last: BTreeSet<(String, String)> = BTreeSet::new();
    let mut last_at = 0;
    // By child row: the first time it was seen orphaned, and what it lacked then.
    let mut found: std::collections::BTreeMap<String, (i64, String)> = Default::default();
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let at = super::history::now_ms();
        if let Ok(t) = read_with(&cql, &ks, &scan).await {
            samples += 1;
            let now = orphans(&t);
            for o in now.intersection(&last) {
                found
                    .entry(o.0.clone())
                    .or_insert_with(|| (last_at, format!("{} without {}", o.0, o.1)));
            }
            last = now;
            last_at = at;
        } else {
            // A failed read (Cassandra paused) proves nothing either way.
            last.clear();
        }
        // At least 200 ms apart; in short sleeps, so that a stop is seen soon.
        let pause = every
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(200));
        let until = Instant::now() + pause;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || stop.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_millis(200))).await;
        }
    }
    Samples {
        samples,
        orphans: found.into_values().collect(),
    }
}

/// Waits for tiers 2-5 to be empty and Tier 1 (and the low-water marks) to hold at most
/// today's day; returns what is left otherwise. Each table is read whole.
pub async fn wait_end_state(cql: &Session, ks: &str, within: Duration) -> Vec<String> {
    wait_end_state_with(cql, ks, within, &Scan::Whole).await
}

/// [`wait_end_state`], reading as `scan` says.
pub async fn wait_end_state_with(
    cql: &Session,
    ks: &str,
    within: Duration,
    scan: &Scan,
) -> Vec<String> {
    let started = Instant::now();
    loop {
        let mut left = Vec::new();
        match read_with(cql, ks, scan).await {
            Ok(t) => {
                let today = chrono::DateTime::from_timestamp_millis(super::history::now_ms())
                    .expect("now")
                    .date_naive();
                let n = |what: &str, k: usize, sample: String| {
                    format!("{k} {what} left, e.g. {sample}")
                };
                if let Some(x) = t.pointers.first() {
                    left.push(n("pointer partitions", t.pointers.len(), format!("{x:?}")));
                }
                if let Some(x) = t.buckets.first() {
                    left.push(n("bucket rows", t.buckets.len(), format!("{x:?}")));
                }
                if let Some(x) = t.instances.first() {
                    left.push(n("instance rows", t.instances.len(), format!("{x:?}")));
                }
                if let Some(x) = t.windows.first() {
                    left.push(n("window rows", t.windows.len(), format!("{x:?}")));
                }
                let old_days: Vec<_> = t.days.iter().filter(|(_, d)| *d != today).collect();
                if let Some(x) = old_days.first() {
                    left.push(n(
                        "Tier-1 rows of another day",
                        old_days.len(),
                        format!("{x:?}"),
                    ));
                }
                let old_low: Vec<_> = t.low_water.keys().filter(|d| **d != today).collect();
                if let Some(x) = old_low.first() {
                    left.push(n(
                        "low-water rows of another day",
                        old_low.len(),
                        format!("{x:?}"),
                    ));
                }
            }
            Err(e) => left.push(format!("cannot read the directory: {e}")),
        }
        if left.is_empty() || started.elapsed() > within {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The pointers still in Tier 5, each with the state row it points at:
/// (service, transaction, description).
pub async fn leftover_pointers(cql: &Session, ks: &str) -> Vec<(String, String, String)> {
    type Row = (Day, i32, String, String, i32, String, i64);
    let pointers = match rows::<Row>(
        cql,
        format!("SELECT day, window, service, instance, bucket, transaction_id, generation FROM {ks}.retry_transactions_by_bucket"),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return vec![(String::new(), String::new(), format!("cannot read: {e}"))],
    };
    let mut out = Vec::new();
    for (day, window, service, instance, bucket, tx, generation) in pointers {
        let state = rows::<(Option<String>, Option<i64>, Option<i32>, Option<i64>)>(
            cql,
            format!(
                "SELECT status, generation, loc_window, toUnixTimestamp(due_at) FROM {ks}.transactions \
                 WHERE region = 'local' AND cluster = 'default' AND service = '{service}' AND transaction_id = '{tx}'"
            ),
        )
        .await;
        let state = match state {
            Ok(r) => match r.first() {
                Some((st, g, w, due)) => {
                    format!("state row: status {st:?} generation {g:?} window {w:?} due_at {due:?}")
                }
                None => "no state row".into(),
            },
            Err(e) => format!("state row unreadable: {e}"),
        };
        out.push((
            service.clone(),
            tx.clone(),
            format!(
                "pointer {day} window {window} {instance} bucket {bucket} generation {generation}; {state}"
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ranges_cover_the_ring_without_overlap() {
        let r = token_ranges(64);
        assert_eq!(r.len(), 64);
        assert_eq!(r[0].0, i64::MIN);
        assert_eq!(r[63].1, i64::MAX);
        for w in r.windows(2) {
            assert_eq!(w[0].1, w[1].0, "each range starts where the last ended");
            assert!(w[0].0 < w[0].1);
        }
        assert_eq!(token_ranges(1), vec![(i64::MIN, i64::MAX)]);
    }

    #[test]
    fn tier_two_is_read_over_the_span_of_the_run_in_chunks() {
        let ms = |s: &str| rebound_integration_tests::utc_ms(s);
        let day = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        // 1 s windows from 00:10:00 to 01:00:00 of one day: windows 600..=3600.
        let runs = window_runs(
            1,
            ms("2026-12-02 00:10:00.000"),
            ms("2026-12-02 01:00:00.500"),
            &BTreeSet::from([day("2026-12-02")]),
        );
        assert_eq!(runs.first(), Some(&(day("2026-12-02"), 600, 1100)));
        assert_eq!(runs.last(), Some(&(day("2026-12-02"), 3600, 3601)));
        assert_eq!(runs.len(), 7);
        assert!(runs.windows(2).all(|w| w[0].2 == w[1].1));
        // Across midnight: the end of one day, the start of the next; another day named by
        // Tier 1 whole (86,400 windows of 1 s in chunks of 500).
        let runs = window_runs(
            1,
            ms("2026-12-02 23:59:00.000"),
            ms("2026-12-03 00:01:00.000"),
            &BTreeSet::from([day("2026-11-30")]),
        );
        let of = |d: &str| runs.iter().filter(|r| r.0 == day(d)).count();
        assert_eq!(
            (of("2026-11-30"), of("2026-12-02"), of("2026-12-03")),
            (173, 1, 1)
        );
        assert!(runs.contains(&(day("2026-12-02"), 86_340, 86_400)));
        assert!(runs.contains(&(day("2026-12-03"), 0, 61)));
    }
}
