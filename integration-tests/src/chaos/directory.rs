//! The directory as CQL sees it: samples of the five tiers during the run (children read
//! first, parents after, since parents are deleted after their children), the orphans that
//! persist, and the end state.

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

/// Reads the tiers children first (Tier 5 → Tier 1): a parent deleted after its children can
/// then not look like an orphan.
pub async fn read(cql: &Session, ks: &str) -> anyhow::Result<Tiers> {
    let mut t = Tiers::default();
    for (day, window, service, instance, bucket) in rows::<BucketKey>(
        cql,
        format!(
            "SELECT day, window, service, instance, bucket FROM {ks}.retry_transactions_by_bucket"
        ),
    )
    .await?
    {
        t.pointers.insert((day, window, service, instance, bucket));
    }
    t.buckets = rows::<BucketKey>(
        cql,
        format!("SELECT day, window, service, instance, bucket FROM {ks}.buckets_by_instance"),
    )
    .await?
    .into_iter()
    .collect();
    t.instances = rows::<InstanceKey>(
        cql,
        format!("SELECT day, window, service, instance FROM {ks}.instances_by_window"),
    )
    .await?
    .into_iter()
    .collect();
    t.windows = rows::<(Day, i32)>(cql, format!("SELECT day, window FROM {ks}.windows_by_day"))
        .await?
        .into_iter()
        .collect();
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
    /// Orphans seen in one sample and still orphans in the next one, ~1.5 s later, with the
    /// time of the first of those samples.
    pub orphans: Vec<(i64, String)>,
}

/// Samples every second until `stop`; an orphan counts only if the next sample still has the
/// child without its parent.
pub async fn sampler(cql: Session, ks: String, stop: Arc<AtomicBool>) -> Samples {
    let mut samples = 0;
    let mut last: BTreeSet<(String, String)> = BTreeSet::new();
    let mut last_at = 0;
    // By child row: the first time it was seen orphaned, and what it lacked then.
    let mut found: std::collections::BTreeMap<String, (i64, String)> = Default::default();
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let at = super::history::now_ms();
        if let Ok(t) = read(&cql, &ks).await {
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
        let pause = Duration::from_millis(1_500).saturating_sub(started.elapsed());
        tokio::time::sleep(pause.max(Duration::from_millis(200))).await;
    }
    Samples {
        samples,
        orphans: found.into_values().collect(),
    }
}

/// Waits for tiers 2-5 to be empty and Tier 1 (and the low-water marks) to hold at most
/// today's day; returns what is left otherwise.
pub async fn wait_end_state(cql: &Session, ks: &str, within: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let mut left = Vec::new();
        match read(cql, ks).await {
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
