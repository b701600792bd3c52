//! The soak: the chaos cluster (three `rebound-server` processes on one keyspace) under a
//! steady mixed load for M minutes, sampled every 10 s, to show that nothing grows.
//!
//! The load, at a steady rate: the chaos workload's enqueues (single and batched, new ids and
//! recent ones) and cancels; executors answering SUCCEEDED, RETRY, FAILED and snooze (never
//! leaving a delivery unanswered: a redelivery's lateness counts from its due time); redrives
//! of recent dead letters, one letter per call; executors joining and leaving (a transient
//! executor joins every ~15 s for 15-60 s, beside one steady executor per service and node);
//! and a fault of the chaos injector every few minutes (default 3). Then the drain, the
//! chaos checker over the whole history, and the directory's end state.
//!
//! Every 10 s ([`sample`]): each node's RSS and open files, live tasks and subscribers, the
//! pending gauge, the lateness p99 of the interval, Cassandra's SSTables of the keyspace and
//! its tombstone warnings. The judgement ([`judge`]) is printed criterion by criterion with
//! its figures, and written with the samples under `target/soak/<time>-seed<S>/`.

pub mod judge;
mod load;
pub mod sample;

use std::{
    fmt::Write as _,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU8, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use tokio::sync::Mutex as AsyncMutex;

use super::{
    directory,
    end::Finish,
    faults::{draw_fault, PlannedFault},
    fmt_counts,
    history::{now_ms, Kind},
    start::{keyspace_name, start_cluster, Setup},
    Options, MAX_SKEW_MS, WINDOW_SECONDS,
};
use judge::{Criterion, FaultSpan, LatenessSample, Point};
use load::{churn, record_stalls, redrive, sample_every, watch_cassandra, workload};

#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Seed, load duration, nodes, drain timeout, keep, Cassandra: as for chaos.
    /// `fault_every` is the time between two faults here (zero: none).
    pub base: Options,
    /// Operations of the workload per second.
    pub rate: f64,
    /// Where the samples and the summary go; default `target/soak/<UTC time>-seed<S>`.
    pub out_dir: Option<PathBuf>,
    pub sample_every: Duration,
    /// How long after a fault ends its effects are allowed (lateness is not judged then).
    pub recovery: Duration,
    /// Mean pause between two transient executors joining.
    pub churn_every: Duration,
    /// Mean pause between two rounds of redrives.
    pub redrive_every: Duration,
}

impl SoakOptions {
    pub fn new(seed: u64, duration: Duration) -> SoakOptions {
        let mut base = Options::new(seed, duration);
        base.fault_every = Duration::from_secs(180);
        base.drain_timeout = Duration::from_secs(90);
        SoakOptions {
            base,
            rate: 15.0,
            out_dir: None,
            sample_every: Duration::from_secs(10),
            recovery: Duration::from_secs(30),
            churn_every: Duration::from_secs(15),
            redrive_every: Duration::from_secs(20),
        }
    }

    /// The reference of the growth criteria (see [`warmup`]).
    pub fn warmup(&self) -> Duration {
        warmup(self.base.duration)
    }
}

/// The reference of the growth criteria for a load of `d`: 5 minutes in, or half of a run
/// shorter than 10 minutes. Not a third: a debug node under this load took 1.5-2 minutes to
/// reach the RSS it then kept (its allocator's high-water mark, with transient executors
/// piling up on it), so a third of a 3-minute run is still in that warm-up.
pub fn warmup(d: Duration) -> Duration {
    if d >= Duration::from_secs(600) {
        Duration::from_secs(300)
    } else {
        d / 2
    }
}

/// The outcome of a soak.
pub struct SoakReport {
    pub text: String,
    pub passed: bool,
    pub dir: PathBuf,
}

/// The growth allowed to RSS and open files between the reference and the end.
pub const GROWTH_LIMIT_PERCENT: f64 = 10.0;

/// What RSS may grow by in a run shorter than 10 minutes, when that is more than 10 %: the
/// compactor node of 3-minute runs here sometimes stepped up by 10-17 MB (of ~42) at a random
/// moment and stayed there, flat, with its threads and tasks unchanged, an allocator's
/// high-water mark and not a trend; a run that short cannot tell the two apart, the long run
/// can (it keeps 10 %).
pub const SHORT_RUN_RSS_FLOOR_MB: f64 = 20.0;

/// The RSS and open-file allowances of a load of `d`.
pub fn allowances(d: Duration) -> (judge::Allowance, judge::Allowance) {
    let percent = GROWTH_LIMIT_PERCENT;
    let floor = if d >= Duration::from_secs(600) {
        0.0
    } else {
        SHORT_RUN_RSS_FLOOR_MB
    };
    (
        judge::Allowance { percent, floor },
        judge::Allowance {
            percent,
            floor: 0.0,
        },
    )
}

/// The faults of a soak: one every `every` (± a quarter), the first half a period in, none in
/// the last 20 s of the load; each drawn as the chaos plan draws them (skews within half
/// the margin).
pub fn fault_plan(
    seed: u64,
    duration: Duration,
    every: Duration,
    nodes: usize,
) -> Vec<PlannedFault> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xFA17_FA17);
    let (span, every) = (duration.as_millis() as i64, every.as_millis() as i64);
    let mut out = Vec::new();
    if every <= 0 {
        return out;
    }
    for k in 0.. {
        let jitter = rng.random_range(-(every / 4)..=every / 4);
        let at = every * k + every / 2 + jitter;
        if at > span - 20_000 {
            break;
        }
        out.push(draw_fault(&mut rng, at, nodes, MAX_SKEW_MS, false));
    }
    out
}

const PHASES: [&str; 2] = ["load", "drain"];

pub async fn run(o: SoakOptions) -> anyhow::Result<SoakReport> {
    let started = Instant::now();
    let b = &o.base;
    let dir = o.out_dir.clone().unwrap_or_else(|| {
        b.repo.join("target/soak").join(format!(
            "{}-seed{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S"),
            b.seed
        ))
    });
    std::fs::create_dir_all(&dir)?;
    let keyspace = keyspace_name("soak", b.seed);
    let minutes = b.duration.as_secs_f64() / 60.0;
    println!(
        "soak: seed {}, {minutes} min at {} operations/s on {} nodes, a fault every {} s; keyspace {keyspace}; output in {}",
        b.seed,
        o.rate,
        b.nodes,
        b.fault_every.as_secs(),
        dir.display()
    );
    println!(
        "soak: re-run with: scripts/soak --minutes {minutes} --seed {} --fault-every {}",
        b.seed,
        b.fault_every.as_secs()
    );
    let cassandra = sample::CassandraFiles::locate(&b.repo, &keyspace);
    if cassandra.log_paths().is_empty() {
        println!("soak: Cassandra's log not found (scripts/cassandra log): tombstone warnings and SSTables are not counted");
    }
    let cluster = start_cluster(
        b,
        Setup {
            name: "soak",
            keyspace: keyspace.clone(),
            log_dir: dir.join("logs"),
            http: true,
            let_deadlines_pass: false,
            spare: false,
        },
    )
    .await?;
    let shared = cluster.shared.clone();
    let t0 = now_ms();

    let executors = cluster.spawn_executors();
    let steady_executors = executors.len() as i64;
    // The directory in slices small enough that no read walks 1,000 tombstones, every 10 s.
    let scan = directory::Scan::Sliced {
        token_slices: ((minutes * 4.0).ceil() as u32).max(16),
        window_seconds: WINDOW_SECONDS,
        since_ms: t0 - 60_000,
    };
    let dir_sampler = cluster
        .sample_directory(&b.contact_point, scan, Duration::from_secs(10))
        .await?;
    let planned = fault_plan(b.seed, b.duration, b.fault_every, b.nodes);
    let faults = cluster.inject(planned, b.cassandra_pid, t0);

    let sampler = Arc::new(AsyncMutex::new(sample::Sampler::new(
        t0,
        shared.nodes.clone(),
        cluster.http_ports.clone(),
        cassandra,
        &dir.join("samples.csv"),
    )?));
    let phase = Arc::new(AtomicU8::new(0));
    let sampling_stop = Arc::new(AtomicBool::new(false));
    let sampling = tokio::spawn(sample_every(
        sampler.clone(),
        o.sample_every,
        phase.clone(),
        sampling_stop.clone(),
    ));
    let load_stop = Arc::new(AtomicBool::new(false));
    let stalls = tokio::spawn(watch_cassandra(
        directory::session(&b.contact_point).await?,
        load_stop.clone(),
    ));
    let churn = tokio::spawn(churn(
        shared.clone(),
        b.seed,
        o.churn_every,
        load_stop.clone(),
    ));
    let redrives = tokio::spawn(redrive(
        shared.clone(),
        b.seed,
        o.redrive_every,
        load_stop.clone(),
    ));

    let (op_counts, touched) = workload(&shared, b.seed, o.rate, b.duration, t0).await;
    load_stop.store(true, Ordering::SeqCst);
    let mut fault_counts = faults.await??;
    let stalls = stalls.await?;
    let stalls = record_stalls(&shared, stalls);
    if stalls > 0 {
        fault_counts.insert("CassandraStall (seen, not injected)".into(), stalls);
    }
    let (joined, left) = churn.await?;
    let redrive_counts = redrives.await?;
    let load_end_s = (now_ms() - t0) as f64 / 1000.0;
    println!(
        "soak: load over after {:.0} s; draining (executors answer SUCCEEDED)",
        started.elapsed().as_secs_f64()
    );
    // The transient executors are gone: only the steady ones are subscribed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_load = sampler.lock().await.sample("after-load").await.clone();
    phase.store(1, Ordering::SeqCst);

    let end = cluster
        .finish(Finish {
            t0,
            touched: &touched,
            drain_timeout: b.drain_timeout,
            sampler: dir_sampler,
            executors,
            fault_counts: &fault_counts,
            scan,
            pushed: &[],
        })
        .await?;
    sampling_stop.store(true, Ordering::SeqCst);
    let _ = sampling.await;
    // Every executor is gone now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last = sampler.lock().await.sample("end").await.clone();
    cluster.teardown(true).await;

    let events = shared.history.snapshot();
    let faults: Vec<FaultSpan> = events
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Fault { kind, node, detail } => Some(FaultSpan {
                start_s: (e.start_ms - t0) as f64 / 1000.0,
                end_s: (e.end_ms - t0) as f64 / 1000.0,
                what: format!(
                    "{kind:?} {}: {detail}",
                    node.map_or("cassandra".to_string(), |n| format!("n{}", n + 1))
                ),
            }),
            _ => None,
        })
        .collect();
    let sampler = sampler.lock().await;
    let rows = &sampler.rows;
    let warmup_s = o.warmup().as_secs_f64();
    let recovery_s = o.recovery.as_secs_f64();
    let limit_s = f64::from(WINDOW_SECONDS) + 1.0;

    // The criteria.
    let mut criteria = Vec::new();
    criteria.push(Criterion {
        name: "checker violations".into(),
        figure: format!("{} (expected 0)", end.violations),
        pass: end.violations == 0,
    });
    criteria.push(Criterion {
        name: "directory end state".into(),
        figure: if end.end_state.is_empty() {
            "empty but for today's day".into()
        } else {
            end.end_state.join("; ")
        },
        pass: end.end_state.is_empty(),
    });
    let cass = &sampler.cassandra;
    criteria.push(Criterion {
        name: format!("tombstone warnings naming {keyspace}"),
        figure: if cass.log_paths().is_empty() {
            "not counted: no Cassandra log found".into()
        } else {
            let mut f = format!(
                "{} in {} since the start (other keyspaces: {})",
                cass.ours,
                cass.log_paths()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                cass.others
            );
            for e in &cass.examples {
                f.push_str(&format!("\n       {e}"));
            }
            f
        },
        pass: cass.ours == 0 && !cass.log_paths().is_empty(),
    });
    let load_rows: Vec<&sample::Row> = rows.iter().filter(|r| r.phase == "load").collect();
    let series = |f: &dyn Fn(&sample::NodeSample) -> Option<f64>| -> Vec<(String, Result<judge::Growth, String>)> {
        (0..b.nodes)
            .map(|i| {
                let points: Vec<Point> = load_rows
                    .iter()
                    .map(|r| Point {
                        t_s: r.t_s,
                        pid: r.nodes[i].pid,
                        value: f(&r.nodes[i]),
                    })
                    .collect();
                (format!("n{}", i + 1), judge::growth(&points, warmup_s))
            })
            .collect()
    };
    let reference = if b.duration >= Duration::from_secs(600) {
        format!("its level {warmup_s:.0} s in")
    } else {
        format!("its level {warmup_s:.0} s in (half the load: a run shorter than 10 min)")
    };
    let (rss_allowance, fds_allowance) = allowances(b.duration);
    let rss_limit = if rss_allowance.floor > 0.0 {
        format!("{GROWTH_LIMIT_PERCENT} % or {} MB", rss_allowance.floor)
    } else {
        format!("{GROWTH_LIMIT_PERCENT} %")
    };
    criteria.push(judge::growth_criterion(
        &format!("RSS at the end of the load within {rss_limit} above {reference}"),
        "MB",
        &series(&|n| n.rss_mb),
        rss_allowance,
    ));
    criteria.push(judge::growth_criterion(
        &format!(
            "open files at the end of the load within {GROWTH_LIMIT_PERCENT} % above {reference}"
        ),
        "fds",
        &series(&|n| n.fds.map(|v| v as f64)),
        fds_allowance,
    ));
    let lateness: Vec<LatenessSample> = rows
        .iter()
        .map(|r| LatenessSample {
            t_s: r.t_s,
            interval_s: r.interval_s,
            deliveries: r.deliveries,
            p99_s: r.lateness_p99_s,
        })
        .collect();
    criteria.push(judge::lateness_criterion(
        &lateness,
        &faults,
        recovery_s,
        limit_s,
        &format!(
            "lateness p99 of each {} s interval at most {limit_s:.0} s (a {WINDOW_SECONDS} s window + 1 s) outside fault periods",
            o.sample_every.as_secs()
        ),
    ));
    criteria.push(Criterion {
        name: "subscribers once executors leave".into(),
        figure: format!(
            "{} after the churn stopped (expected the {steady_executors} steady executors), {} once every executor left (expected 0)",
            fmt_opt(after_load.subscribers),
            fmt_opt(last.subscribers)
        ),
        pass: after_load.subscribers == Some(steady_executors) && last.subscribers == Some(0),
    });
    let passed = criteria.iter().all(|c| c.pass);

    // The summary.
    let mut text = String::new();
    let _ = writeln!(text, "== soak summary (seed {})", b.seed);
    let _ = writeln!(
        text,
        "run: {:.0} s in all: load {load_end_s:.0} s at {} operations/s, drain {:.1} s; {} samples in {}",
        started.elapsed().as_secs_f64(),
        o.rate,
        end.drain_s,
        rows.len(),
        dir.join("samples.csv").display()
    );
    let _ = writeln!(
        text,
        "operations: {} ({}), transactions {}; redrives: {}; executors: {steady_executors} steady, {joined} joined and {left} left",
        op_counts.values().sum::<usize>(),
        fmt_counts(&op_counts),
        touched.len(),
        if redrive_counts.is_empty() {
            "none".to_string()
        } else {
            fmt_counts(&redrive_counts)
        }
    );
    text.push_str(&end.text);
    let _ = writeln!(
        text,
        "fault periods (from a fault until {recovery_s:.0} s after it ended; lateness is not judged in them): {}",
        if faults.is_empty() { "none" } else { "" }
    );
    for f in &faults {
        let _ = writeln!(
            text,
            "  {:.0}..{:.0} s  {}",
            f.start_s,
            f.end_s + recovery_s,
            f.what
        );
    }
    let _ = writeln!(
        text,
        "series (first sample, last sample of the load, the end; max):"
    );
    let _ = write!(text, "{}", series_text(rows, b.nodes));
    let _ = writeln!(
        text,
        "  SSTables by table at the end: {}",
        sampler
            .cassandra
            .sstables_by_table()
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(text, "criteria:");
    for c in &criteria {
        let _ = writeln!(text, "  {c}");
    }
    let failed = criteria.iter().filter(|c| !c.pass).count();
    let _ = writeln!(
        text,
        "soak: {}",
        if passed {
            "PASSED".to_string()
        } else {
            format!("FAILED ({failed} of {} criteria)", criteria.len())
        }
    );
    std::fs::write(dir.join("summary.txt"), &text)?;
    let run_json = serde_json::json!({
        "seed": b.seed,
        "minutes": minutes,
        "rate": o.rate,
        "nodes": b.nodes,
        "window_s": WINDOW_SECONDS,
        "lateness_limit_s": limit_s,
        "recovery_s": recovery_s,
        "reference_s": warmup_s,
        "load_end_s": load_end_s,
        "keyspace": keyspace,
        "faults": faults.iter().map(|f| serde_json::json!({
            "start_s": f.start_s, "end_s": f.end_s, "what": f.what,
        })).collect::<Vec<_>>(),
        "criteria": criteria.iter().map(|c| serde_json::json!({
            "name": c.name, "figure": c.figure, "pass": c.pass,
        })).collect::<Vec<_>>(),
        "passed": passed,
    });
    std::fs::write(
        dir.join("run.json"),
        serde_json::to_string_pretty(&run_json)?,
    )?;
    if !b.keep_keyspace && passed {
        let _ = cluster
            .cql
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await;
    }
    Ok(SoakReport { text, passed, dir })
}

fn fmt_opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// Each series at the first sample, the last sample of the load and the end, and its
/// largest value.
fn series_text(rows: &[sample::Row], nodes: usize) -> String {
    let first = rows.first();
    let last_load = rows.iter().rev().find(|r| r.phase == "load");
    let end = rows.last();
    let mut out = String::new();
    let line = |name: &str, f: &dyn Fn(&sample::Row) -> Option<f64>, digits: usize| -> String {
        let at = |r: Option<&sample::Row>| {
            r.and_then(f)
                .map_or("-".into(), |v| format!("{v:.digits$}"))
        };
        let max = rows
            .iter()
            .filter_map(f)
            .fold(None::<f64>, |m, v| Some(m.map_or(v, |m| m.max(v))));
        format!(
            "  {name}: {} -> {} -> {} (max {})\n",
            at(first),
            at(last_load),
            at(end),
            max.map_or("-".into(), |v| format!("{v:.digits$}"))
        )
    };
    for i in 0..nodes {
        out.push_str(&line(
            &format!("n{} RSS MB", i + 1),
            &|r| r.nodes[i].rss_mb,
            1,
        ));
        out.push_str(&line(
            &format!("n{} open files", i + 1),
            &|r| r.nodes[i].fds.map(|v| v as f64),
            0,
        ));
        out.push_str(&line(
            &format!("n{} tasks", i + 1),
            &|r| r.nodes[i].tasks.map(|v| v as f64),
            0,
        ));
    }
    out.push_str(&line(
        "subscribers",
        &|r| r.subscribers.map(|v| v as f64),
        0,
    ));
    out.push_str(&line("pending", &|r| r.pending.map(|v| v as f64), 0));
    out.push_str(&line("lateness p99 s", &|r| r.lateness_p99_s, 2));
    out.push_str(&line(
        "deliveries per interval",
        &|r| Some(r.deliveries as f64),
        0,
    ));
    out.push_str(&line(
        "SSTables of the keyspace",
        &|r| r.sstables.map(|v| v as f64),
        0,
    ));
    out.push_str(&line(
        "tombstone warnings",
        &|r| Some(r.tombstone_warnings as f64),
        0,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_come_every_period_and_end_before_the_load() {
        let f = fault_plan(7, Duration::from_secs(1800), Duration::from_secs(180), 3);
        assert_eq!(f.len(), 10);
        for (k, x) in f.iter().enumerate() {
            let mid = 180_000 * k as i64 + 90_000;
            assert!((x.at_ms - mid).abs() <= 45_000, "{x:?}");
        }
        let f = fault_plan(7, Duration::from_secs(180), Duration::from_secs(180), 3);
        assert_eq!(f.len(), 1);
        assert!(fault_plan(7, Duration::from_secs(180), Duration::ZERO, 3).is_empty());
    }

    #[test]
    fn a_short_run_allows_rss_a_floor_a_long_one_ten_percent() {
        let (rss, fds) = allowances(Duration::from_secs(180));
        assert_eq!((rss.percent, rss.floor, fds.floor), (10.0, 20.0, 0.0));
        let (rss, _) = allowances(Duration::from_secs(1800));
        assert_eq!(rss.floor, 0.0);
    }

    #[test]
    fn the_reference_is_five_minutes_in_or_half_a_short_run() {
        assert_eq!(warmup(Duration::from_secs(1800)), Duration::from_secs(300));
        assert_eq!(warmup(Duration::from_secs(600)), Duration::from_secs(300));
        assert_eq!(warmup(Duration::from_secs(180)), Duration::from_secs(90));
    }
}
