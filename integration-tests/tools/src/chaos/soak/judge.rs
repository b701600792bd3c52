//! The soak's judgement, pure: lateness quantiles from histogram deltas, fault periods, the
//! growth of a node's RSS or open files between a reference level and the end, and the
//! criteria with their figures.

/// A Prometheus histogram: (upper bound `le`, cumulative count), in increasing `le`, the last
/// one `+Inf`.
pub type Hist = Vec<(f64, f64)>;

/// What `cur` counted since `prev` (the same process's earlier scrape), bucket by bucket. A
/// counter that went down (the process restarted), or buckets that differ, mean everything
/// in `cur` is new.
pub fn delta(prev: Option<&Hist>, cur: &Hist) -> Hist {
    let Some(prev) = prev else {
        return cur.clone();
    };
    let same_buckets =
        prev.len() == cur.len() && prev.iter().zip(cur).all(|(p, c)| p.0 == c.0 && p.1 <= c.1);
    if !same_buckets {
        return cur.clone();
    }
    prev.iter()
        .zip(cur)
        .map(|(p, c)| (c.0, c.1 - p.1))
        .collect()
}

/// Adds `h` into `into` (which takes `h`'s buckets when empty). Histograms with other
/// buckets are left out.
pub fn add(into: &mut Hist, h: &Hist) {
    if into.is_empty() {
        into.clone_from(h);
    } else if into.len() == h.len() && into.iter().zip(h).all(|(a, b)| a.0 == b.0) {
        for (a, b) in into.iter_mut().zip(h) {
            a.1 += b.1;
        }
    }
}

/// The number of observations of `h`.
pub fn count(h: &Hist) -> f64 {
    h.last().map_or(0.0, |b| b.1)
}

/// The `q` quantile of `h` as Prometheus's `histogram_quantile` estimates it: linear
/// interpolation within the bucket the rank falls in (from 0 for the first bucket); the
/// largest finite bound when it falls in `+Inf`. None without observations.
pub fn quantile(q: f64, h: &Hist) -> Option<f64> {
    let total = count(h);
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in h {
        if c >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            if c == prev.1 {
                return Some(le);
            }
            return Some(prev.0 + (le - prev.0) * (rank - prev.1) / (c - prev.1));
        }
        prev = (le, c);
    }
    Some(prev.0)
}

/// A fault of the run, in seconds from the start of the workload.
#[derive(Clone, Debug)]
pub struct FaultSpan {
    pub start_s: f64,
    pub end_s: f64,
    pub what: String,
}

/// Whether the interval (from_s, to_s] meets a fault period: from a fault's start until
/// `recovery_s` after its end.
pub fn in_fault_period(from_s: f64, to_s: f64, faults: &[FaultSpan], recovery_s: f64) -> bool {
    faults
        .iter()
        .any(|f| from_s < f.end_s + recovery_s && to_s > f.start_s)
}

/// One sample of one node's series: when, which process, the value.
#[derive(Clone, Copy, Debug)]
pub struct Point {
    pub t_s: f64,
    pub pid: Option<u32>,
    pub value: Option<f64>,
}

/// A node's level at its reference sample and at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    pub ref_s: f64,
    pub ref_level: f64,
    pub end_s: f64,
    pub end_level: f64,
}

impl Growth {
    /// The change from the reference level to the end, in percent.
    pub fn percent(&self) -> f64 {
        if self.ref_level == 0.0 {
            if self.end_level == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (self.end_level / self.ref_level - 1.0) * 100.0
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The growth of one node's series over the load (`points` in time order, those of the
/// load only). Only the process the node ends with counts: its reference is the median of
/// its first three samples once it has lived `warmup_s` (a process seen in the first sample
/// counts as started at 0), its end level the median of its last three; a process restarted
/// by a fault too late to have `warmup_s / 2` of life after its reference is not judged (the
/// error says why).
pub fn growth(points: &[Point], warmup_s: f64) -> Result<Growth, String> {
    let Some(pid) = points.iter().rev().find_map(|p| p.pid) else {
        return Err("never sampled".into());
    };
    let own: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.pid == Some(pid))
        .filter_map(|p| p.value.map(|v| (p.t_s, v)))
        .collect();
    let Some(&(first_s, _)) = own.first() else {
        return Err("never sampled".into());
    };
    let original = points.iter().find_map(|p| p.pid) == Some(pid);
    let born_s = if original { 0.0 } else { first_s };
    let last_s = own.last().map_or(first_s, |p| p.0);
    let at = own.iter().position(|p| p.0 >= born_s + warmup_s);
    let Some(at) = at.filter(|&i| last_s - own[i].0 >= warmup_s / 2.0) else {
        return Err(format!(
            "restarted at {first_s:.0} s, too late for a reference {warmup_s:.0} s into its life with {:.0} s left to compare",
            warmup_s / 2.0
        ));
    };
    let mut head: Vec<f64> = own[at..].iter().take(3).map(|p| p.1).collect();
    let mut tail: Vec<f64> = own[at..].iter().rev().take(3).map(|p| p.1).collect();
    Ok(Growth {
        ref_s: own[at].0,
        ref_level: median(&mut head),
        end_s: last_s,
        end_level: median(&mut tail),
    })
}

/// How far above its reference a series may end: `percent` of the reference, or `floor` (in
/// the series' unit) when that is more.
#[derive(Clone, Copy, Debug)]
pub struct Allowance {
    pub percent: f64,
    pub floor: f64,
}

/// Whether `g` ends within `a` above its reference (a fall is no leak).
pub fn within(g: &Growth, a: Allowance) -> bool {
    g.end_level - g.ref_level <= (g.ref_level * a.percent / 100.0).max(a.floor)
}

/// One criterion of the judgement, with the figure it was judged on.
#[derive(Clone, Debug)]
pub struct Criterion {
    pub name: String,
    pub figure: String,
    pub pass: bool,
}

impl std::fmt::Display for Criterion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            if self.pass { "PASS" } else { "FAIL" },
            self.name,
            self.figure
        )
    }
}

/// The growth criterion of one series over every node: each judged node within `allowance`;
/// nodes left out are named with the reason. Fails when no node is judged.
pub fn growth_criterion(
    name: &str,
    unit: &str,
    per_node: &[(String, Result<Growth, String>)],
    allowance: Allowance,
) -> Criterion {
    let mut parts = Vec::new();
    let mut pass = true;
    let mut judged = 0;
    for (node, g) in per_node {
        match g {
            Ok(g) => {
                judged += 1;
                let ok = within(g, allowance);
                pass &= ok;
                parts.push(format!(
                    "{node} {:.1} {unit} at {:.0} s -> {:.1} {unit} at {:.0} s ({:+.1} %){}",
                    g.ref_level,
                    g.ref_s,
                    g.end_level,
                    g.end_s,
                    g.percent(),
                    if ok { "" } else { " OVER" }
                ));
            }
            Err(why) => parts.push(format!("{node} not judged ({why})")),
        }
    }
    if judged == 0 {
        pass = false;
        parts.push("no node judged".into());
    }
    Criterion {
        name: name.into(),
        figure: parts.join("; "),
        pass,
    }
}

/// One interval's lateness: the sample's time, the interval's length, its deliveries and
/// their p99 (None: no delivery in it).
#[derive(Clone, Copy, Debug)]
pub struct LatenessSample {
    pub t_s: f64,
    pub interval_s: f64,
    pub deliveries: u64,
    pub p99_s: Option<f64>,
}

/// The fewest deliveries of an interval whose p99 is judged: below 100, the p99 is the
/// largest lateness of the interval (interpolated in its bucket), one redelivery decides it.
pub const MIN_DELIVERIES: u64 = 100;

/// Lateness p99 at most `limit_s` in every interval of at least [`MIN_DELIVERIES`]
/// deliveries outside fault periods. Fails when no interval is judged.
pub fn lateness_criterion(
    samples: &[LatenessSample],
    faults: &[FaultSpan],
    recovery_s: f64,
    limit_s: f64,
    name: &str,
) -> Criterion {
    let (mut judged, mut in_faults, mut few, mut over) = (0, 0, 0, Vec::new());
    let mut worst: Option<(f64, f64)> = None;
    for s in samples {
        let Some(p) = s.p99_s.filter(|_| s.deliveries >= MIN_DELIVERIES) else {
            few += 1;
            continue;
        };
        if in_fault_period(s.t_s - s.interval_s, s.t_s, faults, recovery_s) {
            in_faults += 1;
            continue;
        }
        judged += 1;
        if worst.is_none_or(|w| p > w.0) {
            worst = Some((p, s.t_s));
        }
        if p > limit_s {
            over.push(format!("{p:.2} s at {:.0} s", s.t_s));
        }
    }
    let mut figure = match worst {
        Some((p, t)) => format!("worst {p:.2} s at {t:.0} s"),
        None => "no interval judged".into(),
    };
    figure.push_str(&format!(
        " over {judged} intervals judged ({in_faults} in fault periods, {few} of fewer than {MIN_DELIVERIES} deliveries); {} over {limit_s:.1} s",
        over.len()
    ));
    if !over.is_empty() {
        figure.push_str(&format!(": {}", over.join(", ")));
    }
    Criterion {
        name: name.into(),
        figure,
        pass: judged > 0 && over.is_empty(),
    }
}

/// Whether a line of Cassandra's system.log is a tombstone warning (the patterns `.ci/run`
/// greps for: over `tombstone_warn_threshold`, or a query aborted past
/// `tombstone_failure_threshold`).
pub fn is_tombstone_warning(line: &str) -> bool {
    line.contains("tombstone cells")
        || (line.contains("Scanned over") && line.contains("tombstones"))
        || line.contains("TombstoneOverwhelming")
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;
    const TEN: Allowance = Allowance {
        percent: 10.0,
        floor: 0.0,
    };

    fn hist(counts: &[f64]) -> Hist {
        let les = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, INF];
        les.iter().copied().zip(counts.iter().copied()).collect()
    }

    #[test]
    fn p99_of_an_interval_comes_from_the_bucket_deltas() {
        // 10 late deliveries (2-5 s) before the interval.
        let before = hist(&[0.0, 0.0, 0.0, 0.0, 0.0, 10.0, 10.0]);
        // 100 in it: 98 within 0.5 s, 1 in (0.5, 1], 1 in (1, 2].
        let after = hist(&[10.0, 50.0, 98.0, 99.0, 100.0, 110.0, 110.0]);
        let d = delta(Some(&before), &after);
        assert_eq!(count(&d), 100.0);
        assert_eq!(d[2], (0.5, 98.0));
        // Rank 99 falls in (0.5, 1]: 98 below it, 1 in it, so its upper bound.
        assert_eq!(quantile(0.99, &d), Some(1.0));
        // The histogram since the start would blame the interval for the earlier ones.
        assert!(quantile(0.99, &after).unwrap() > 2.0);
    }

    #[test]
    fn quantile_interpolates_within_a_bucket_like_prometheus() {
        // 100 observations, all in (0.25, 0.5]: the p50 is halfway.
        let h = hist(&[0.0, 0.0, 100.0, 100.0, 100.0, 100.0, 100.0]);
        assert!((quantile(0.5, &h).unwrap() - 0.375).abs() < 1e-9);
        // In the first bucket, from 0.
        let h = hist(&[100.0; 7]);
        assert!((quantile(0.99, &h).unwrap() - 0.099).abs() < 1e-9);
        // In +Inf: the largest finite bound.
        let h = hist(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 10.0]);
        assert_eq!(quantile(0.99, &h), Some(5.0));
        assert_eq!(quantile(0.99, &hist(&[0.0; 7])), None);
    }

    #[test]
    fn a_restarted_process_counts_from_zero() {
        let before = hist(&[10.0, 50.0, 90.0, 100.0, 100.0, 100.0, 100.0]);
        let after_restart = hist(&[5.0, 5.0, 5.0, 6.0, 6.0, 6.0, 6.0]);
        assert_eq!(delta(Some(&before), &after_restart), after_restart);
        assert_eq!(delta(None, &after_restart), after_restart);
    }

    #[test]
    fn nodes_add_up_bucket_by_bucket() {
        let mut sum = Hist::new();
        add(&mut sum, &hist(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]));
        add(&mut sum, &hist(&[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]));
        assert_eq!(count(&sum), 8.0);
        assert_eq!(sum[3], (1.0, 5.0));
    }

    fn faults() -> Vec<FaultSpan> {
        vec![FaultSpan {
            start_s: 100.0,
            end_s: 105.0,
            what: "Kill n2".into(),
        }]
    }

    #[test]
    fn a_fault_period_runs_from_the_fault_until_the_recovery_after_it() {
        let f = faults();
        assert!(!in_fault_period(80.0, 90.0, &f, 30.0));
        assert!(in_fault_period(90.0, 100.5, &f, 30.0));
        assert!(in_fault_period(130.0, 140.0, &f, 30.0));
        assert!(!in_fault_period(135.0, 145.0, &f, 30.0));
    }

    fn late(t_s: f64, p99_s: Option<f64>) -> LatenessSample {
        LatenessSample {
            t_s,
            interval_s: 10.0,
            deliveries: if p99_s.is_some() { 150 } else { 0 },
            p99_s,
        }
    }

    #[test]
    fn lateness_is_judged_outside_fault_periods_only() {
        let samples = [
            late(10.0, Some(0.6)),
            late(20.0, None),
            late(110.0, Some(4.0)), // in the fault period
            late(150.0, Some(1.9)),
        ];
        let c = lateness_criterion(&samples, &faults(), 30.0, 2.0, "lateness");
        assert!(c.pass, "{c}");
        assert!(c.figure.starts_with("worst 1.90 s at 150 s over 2 intervals judged (1 in fault periods, 1 of fewer than 100 deliveries)"), "{c}");
        // An interval of a few deliveries (the drain's) is shown, not judged.
        let few = LatenessSample {
            deliveries: 20,
            ..late(160.0, Some(2.5))
        };
        assert!(lateness_criterion(&[late(150.0, Some(1.9)), few], &faults(), 30.0, 2.0, "l").pass);
        let c = lateness_criterion(&[late(150.0, Some(2.1))], &faults(), 30.0, 2.0, "lateness");
        assert!(!c.pass, "{c}");
        // Nothing judged is no evidence.
        assert!(!lateness_criterion(&[late(110.0, Some(0.5))], &faults(), 30.0, 2.0, "l").pass);
    }

    fn points(pids_values: &[(u32, f64)]) -> Vec<Point> {
        pids_values
            .iter()
            .enumerate()
            .map(|(i, &(pid, v))| Point {
                t_s: 10.0 * (i + 1) as f64,
                pid: Some(pid),
                value: Some(v),
            })
            .collect()
    }

    #[test]
    fn growth_compares_the_level_after_the_warmup_with_the_end() {
        // 12 samples, 10 s apart; warm-up 40 s: the reference is the median of 40, 50, 60 s.
        let p = points(&[
            (1, 10.0),
            (1, 20.0),
            (1, 30.0),
            (1, 40.0),
            (1, 41.0),
            (1, 39.0),
            (1, 40.0),
            (1, 42.0),
            (1, 40.0),
            (1, 43.0),
            (1, 90.0), // one spike at the end does not decide
            (1, 42.0),
        ]);
        let g = growth(&p, 40.0).unwrap();
        assert_eq!((g.ref_s, g.ref_level), (40.0, 40.0));
        assert_eq!((g.end_s, g.end_level), (120.0, 43.0));
        let pct = |percent| Allowance {
            percent,
            floor: 0.0,
        };
        assert!(within(&g, pct(10.0)));
        assert!(!within(&g, pct(7.0)));
        // Or a floor, when that is more: 3 units on a level of 40 is 7.5 %.
        assert!(within(
            &g,
            Allowance {
                percent: 7.0,
                floor: 3.0
            }
        ));
        // A fall is no leak.
        assert!(within(
            &Growth {
                ref_s: 0.0,
                ref_level: 40.0,
                end_s: 1.0,
                end_level: 20.0
            },
            pct(10.0)
        ));
    }

    #[test]
    fn growth_judges_a_restarted_node_by_its_new_process_or_not_at_all() {
        let mut v: Vec<(u32, f64)> = vec![(1, 40.0); 4];
        v.extend(vec![(2, 20.0); 8]); // restarted at 50 s
        let g = growth(&points(&v), 20.0).unwrap();
        assert_eq!(g.ref_s, 70.0, "20 s into the new process's life");
        assert_eq!((g.ref_level, g.end_level), (20.0, 20.0));
        // Restarted too late: no reference with 10 s left to compare.
        let mut v: Vec<(u32, f64)> = vec![(1, 40.0); 10];
        v.extend(vec![(2, 20.0); 2]);
        let e = growth(&points(&v), 20.0).unwrap_err();
        assert!(e.starts_with("restarted at 110 s"), "{e}");
        let c = growth_criterion(
            "RSS",
            "MB",
            &[
                ("n1".into(), Err(e)),
                ("n2".into(), growth(&points(&[(3, 1.0); 12]), 20.0)),
            ],
            TEN,
        );
        assert!(c.pass, "{c}");
        assert!(
            c.figure.contains("n1 not judged (restarted at 110 s"),
            "{c}"
        );
        let c = growth_criterion("RSS", "MB", &[("n1".into(), Err("x".into()))], TEN);
        assert!(!c.pass, "no node judged");
    }

    #[test]
    fn tombstone_warnings_are_the_lines_ci_greps_for() {
        assert!(is_tombstone_warning(
            "WARN  [ReadStage-2] 2025-01-01 ReadCommand.java:608 - Read 1 live rows and 1500 tombstone cells for query SELECT * FROM ks.windows_by_day WHERE ... (see tombstone_warn_threshold)"
        ));
        assert!(is_tombstone_warning(
            "ERROR [ReadStage-1] Scanned over 100001 tombstones during query 'SELECT ...'; query aborted"
        ));
        assert!(is_tombstone_warning(
            "org.apache.cassandra.db.filter.TombstoneOverwhelmingException: null"
        ));
        assert!(!is_tombstone_warning(
            "INFO  [CompactionExecutor:1] Compacted (abc) 4 sstables to [..]"
        ));
    }
}
