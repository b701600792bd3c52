//! The end of a run ([`Started::finish`]): the drain, the compensation chains, the
//! directory's end state, the dead letters, the checker and the rule sets of sagas, holds and
//! pushes, and the report.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient, retry_service_client::RetryServiceClient,
};

use super::{
    call, checker, directory, fmt_counts,
    history::{self, Answer, Kind},
    hold, push, saga,
    start::{DirectorySampling, Started},
    Shared, SERVICES,
};

/// What [`Started::finish`] needs of the run.
pub struct Finish<'a> {
    /// When the workload started (the history's times are printed from it).
    pub t0: i64,
    /// Every transaction the workload touched.
    pub touched: &'a BTreeSet<(String, String)>,
    pub drain_timeout: Duration,
    pub sampler: DirectorySampling,
    /// Aborted once the drain is over.
    pub executors: Vec<tokio::task::JoinHandle<()>>,
    pub fault_counts: &'a BTreeMap<String, usize>,
    /// How the end state is read.
    pub scan: directory::Scan,
    /// The services with a push target (checked by the push rules; empty: none).
    pub pushed: &'a [&'a str],
}

/// What the end of a run found.
pub struct Ending {
    /// From the answers to the history file, one line each.
    pub text: String,
    /// Of the checker, the directory samples, the end state and the pointers left.
    pub violations: usize,
    /// What is left in the directory beyond today's day (empty: nothing).
    pub end_state: Vec<String>,
    pub drain_s: f64,
    pub deliveries: usize,
}

impl Started {
    /// After the workload and the faults: the drain (every node up, executors ack SUCCEEDED,
    /// until nothing is SCHEDULED), the directory's end state, the dead letters and the
    /// checker. Stops the executors and the directory sampler; the nodes keep running until
    /// [`Started::teardown`]. The text goes from the answers to the history file.
    pub async fn finish(&self, f: Finish<'_>) -> anyhow::Result<Ending> {
        let shared = &self.shared;
        let (cql, keyspace) = (&self.cql, &self.keyspace);
        let (mut finals, drain_s) = drain(shared, f.touched, f.drain_timeout).await;
        // The compensation chains of the steps that died, run to their ends.
        let dead_steps: Vec<String> = finals
            .iter()
            .filter(|((s, _), r)| {
                s == saga::STEP
                    && matches!(r, Answer::Ok(x) if x.status == pb::RetryStatus::Dead as i32)
            })
            .map(|((_, t), _)| t.clone())
            .collect();
        let saga_steps = f.touched.iter().filter(|(s, _)| s == saga::STEP).count();
        if saga_steps > 0 {
            let keys = saga::chain_keys(&dead_steps);
            let started = Instant::now();
            let mut chains = final_states(shared, &keys).await;
            while started.elapsed() < Duration::from_secs(45) {
                let mut all = finals.clone();
                all.extend(chains.clone());
                if dead_steps.iter().all(|t| saga::settled(&all, t)) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                chains = final_states(shared, &keys).await;
            }
            // The chains of the steps that did not die: none may exist.
            let others: Vec<String> = f
                .touched
                .iter()
                .filter(|(s, t)| s == saga::STEP && !dead_steps.contains(t))
                .map(|(_, t)| t.clone())
                .collect();
            chains.extend(final_states(shared, &saga::chain_keys(&others)).await);
            finals.extend(chains);
        }
        // Compaction: tiers 2-5 empty, Tier 1 at most today's day.
        let end_state =
            directory::wait_end_state_with(cql, keyspace, Duration::from_secs(30), &f.scan).await;
        let leftover = if end_state.is_empty() {
            Vec::new()
        } else {
            directory::leftover_pointers(cql, keyspace).await
        };
        shared.stop.store(true, Ordering::SeqCst);
        f.sampler.stop.store(true, Ordering::SeqCst);
        let orphans = f.sampler.task.await?;
        let letters = dead_letters(shared, f.pushed).await;
        for e in f.executors {
            e.abort();
        }

        let events = shared.history.snapshot();
        let t0 = f.t0;
        let input = checker::Input {
            events: &events,
            finals: &finals,
            letters: &letters,
            clock_err_ms: self.err_ms + 5,
            t0,
            on_time: Some(checker::OnTime {
                limit_ms: super::LATE_LIMIT_MS,
                after_fault_ms: super::AFTER_FAULT_MS,
            }),
        };
        let unstored = if f.pushed.is_empty() {
            HashSet::new()
        } else {
            unstored_pushes(&self.log_dir)
        };
        let push_rules = checker::Push {
            services: f.pushed,
            timeout_ms: push::TIMEOUT_MS,
            unstored: &unstored,
        };
        let mut result = checker::check_with(&input, (!f.pushed.is_empty()).then_some(&push_rules));
        let saga_counts = if saga_steps > 0 {
            let (v, c) = saga::check(&events, &finals, &letters);
            result.violations.extend(v);
            Some(c)
        } else {
            None
        };
        let hold_counts = if f.touched.iter().any(|(s, _)| s == hold::SERVICE) {
            let (v, c) = hold::check(&events, &finals);
            result.violations.extend(v);
            Some(c)
        } else {
            None
        };

        let mut text = String::new();
        use std::fmt::Write;
        let mut answers: BTreeMap<String, usize> = BTreeMap::new();
        // Actions by action and answer; listings' rows seen.
        let mut acts: BTreeMap<String, usize> = BTreeMap::new();
        let mut list_rows = 0;
        for e in &events {
            let (k, tag) = match &e.kind {
                Kind::Enqueue { answer, .. } => ("enqueue item", answer_tag(answer)),
                Kind::Cancel { answer, .. } => ("cancel", answer_tag(answer)),
                Kind::Ack { answer, .. } => ("ack", answer_tag(answer)),
                Kind::Redrive { answer, .. } => ("redrive", answer_tag(answer)),
                Kind::Act { action, answer, .. } => {
                    let tag = match answer {
                        Answer::Ok(true) => "changed",
                        Answer::Ok(false) => "skipped",
                        other => answer_tag(other),
                    };
                    let name = action
                        .as_str_name()
                        .trim_start_matches("RETRY_ACTION_")
                        .to_lowercase();
                    *acts.entry(format!("{name} {tag}")).or_default() += 1;
                    ("act", tag)
                }
                Kind::List { answer, .. } => {
                    list_rows += answer.ok().copied().unwrap_or(0);
                    ("list", answer_tag(answer))
                }
                _ => continue,
            };
            *answers.entry(format!("{k} {tag}")).or_default() += 1;
        }
        let _ = writeln!(text, "answers: {}", fmt_counts(&answers));
        let lists: usize = answers
            .iter()
            .filter(|(k, _)| k.starts_with("list "))
            .map(|(_, n)| n)
            .sum();
        if !acts.is_empty() || lists > 0 {
            let _ = writeln!(
                text,
                "actions: {} ({}); listings: {lists} ({list_rows} rows seen)",
                acts.values().sum::<usize>(),
                if acts.is_empty() {
                    "none".to_string()
                } else {
                    fmt_counts(&acts)
                }
            );
        }
        let _ = writeln!(
            text,
            "faults: {} ({})",
            f.fault_counts.values().sum::<usize>(),
            fmt_counts(f.fault_counts)
        );
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for e in &events {
            if let Kind::Ack { outcome, .. } = &e.kind {
                *outcomes.entry(format!("{outcome:?}")).or_default() += 1;
            }
        }
        let _ = writeln!(
            text,
            "deliveries: {} (acks: {}; ignored on purpose: {})",
            result.deliveries,
            fmt_counts(&outcomes),
            shared.ignored.load(Ordering::SeqCst)
        );
        if !f.pushed.is_empty() {
            let mut replies: BTreeMap<String, usize> = BTreeMap::new();
            for e in &events {
                if let Kind::PushAnswer { reply, .. } = &e.kind {
                    let k = match reply {
                        history::Reply::Status { code, .. } if (200..300).contains(code) => {
                            "2xx".to_string()
                        }
                        history::Reply::Status { code, .. } => code.to_string(),
                        history::Reply::Stall => "stall".to_string(),
                    };
                    *replies.entry(k).or_default() += 1;
                }
            }
            let _ = writeln!(
                text,
                "pushed ({}): {} requests (answers: {}); attempts pushed again: {}; after a 2xx: {} (explained by a fault or an unstored outcome: {}); outcomes logged as not stored: {}",
                f.pushed.join(", "),
                result.pushes,
                fmt_counts(&replies),
                result.push_duplicates,
                result.pushes_after_2xx,
                result.explained_pushes_after_2xx,
                unstored.len()
            );
        }
        if let Some(c) = &saga_counts {
            let _ = writeln!(
                text,
                "sagas: {} steps, {} died: chains run to their end {}, stopped at a dead compensation {}; {} compensation deliveries ({} after its SUCCEEDED was acknowledged); DEAD steps one of whose deliveries was acknowledged SUCCEEDED: {}",
                c.steps, c.dead, c.completed, c.stopped, c.deliveries, c.after_success, c.dead_over_success
            );
        }
        if let Some(c) = &hold_counts {
            let _ = writeln!(
                text,
                "holds: {} retries naming {:?} ({} deliveries, {} holds asked for by the executors; {} deliveries excused by a SIGSTOP)",
                c.retries,
                hold::DEPENDENCY,
                c.deliveries,
                c.holds,
                c.excused
            );
        }
        let _ = writeln!(
            text,
            "duplicates: {} (explained by a fault or an expired deadline: {}) against a bound of {}",
            result.duplicates, result.explained_duplicates, result.duplicate_bound
        );
        let _ = writeln!(text, "{}", on_time_line(&result));
        let _ = writeln!(
            text,
            "directory: {} samples, {} persisting orphans; end state: {}",
            orphans.samples,
            orphans.orphans.len(),
            if end_state.is_empty() {
                "empty but for today's Tier-1 row".to_string()
            } else {
                end_state.join("; ")
            }
        );
        let mut violations = result.violations;
        for (at, o) in &orphans.orphans {
            violations.push(checker::Violation {
                kind: if o.contains("low_water") {
                    "Tier-3 row below the low-water mark"
                } else {
                    "orphan directory row"
                },
                subject: format!("{o} (sampled at {} ms)", at - t0),
                lines: vec![],
            });
        }
        for e in &end_state {
            violations.push(checker::Violation {
                kind: "directory not empty at the end",
                subject: e.clone(),
                lines: vec![],
            });
        }
        let mut tx_lines: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            if let Some(k) = e.tx() {
                tx_lines.entry(k).or_default().push(i);
            }
        }
        for (s, t, what) in &leftover {
            let mut lines = tx_lines
                .get(&(s.as_str(), t.as_str()))
                .cloned()
                .unwrap_or_default();
            if lines.len() > 40 {
                lines.drain(..lines.len() - 40);
            }
            violations.push(checker::Violation {
                kind: "pointer left at the end",
                subject: format!("{s}/{t}: {what}"),
                lines,
            });
        }
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &violations {
            *by_kind.entry(v.kind).or_default() += 1;
        }
        let _ = writeln!(
            text,
            "violations: {} (expected 0){}{}",
            violations.len(),
            if by_kind.is_empty() { "" } else { ": " },
            fmt_counts(&by_kind)
        );
        const SHOWN: usize = 6;
        let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &violations {
            let n = shown.entry(v.kind).or_default();
            *n += 1;
            if *n > SHOWN {
                continue;
            }
            let _ = writeln!(text, "-- VIOLATION {}: {}", v.kind, v.subject);
            for &i in &v.lines {
                let _ = writeln!(
                    text,
                    "     {}",
                    history::Line {
                        index: i,
                        event: &events[i],
                        t0
                    }
                );
            }
        }
        for (k, n) in &by_kind {
            if *n > SHOWN {
                let _ = writeln!(text, "-- ... and {} more of {k}", n - SHOWN);
            }
        }
        // The full history, for diagnosis.
        let hist_file = self.log_dir.join("history.txt");
        let mut all = format!(
            "# seed {}, keyspace {keyspace}, t0 = {} ({} ms since the epoch, Cassandra clock)\n",
            shared.seed,
            chrono::DateTime::from_timestamp_millis(t0).map_or(String::new(), |d| d.to_rfc3339()),
            t0
        );
        for (i, e) in events.iter().enumerate() {
            let _ = writeln!(
                all,
                "{}",
                history::Line {
                    index: i,
                    event: e,
                    t0
                }
            );
        }
        let _ = std::fs::write(&hist_file, all);
        let _ = writeln!(
            text,
            "history: {} events in {} (times in ms from the start of the workload, Cassandra clock)",
            events.len(),
            hist_file.display()
        );
        Ok(Ending {
            text,
            violations: violations.len(),
            end_state,
            drain_s,
            deliveries: result.deliveries,
        })
    }
}

/// How a call was answered, for the report: ok, unknown or refused.
fn answer_tag<T>(a: &Answer<T>) -> &'static str {
    match a {
        Answer::Ok(_) => "ok",
        Answer::Unknown(_) => "unknown",
        Answer::Refused(_) => "refused",
    }
}

/// Executors answer SUCCEEDED from now on; waits until no transaction of `touched` is
/// SCHEDULED (or `timeout`). Returns every final state (read again at the end) and the
/// seconds it took.
async fn drain(
    shared: &Arc<Shared>,
    touched: &BTreeSet<(String, String)>,
    timeout: Duration,
) -> (BTreeMap<(String, String), Answer<pb::Retry>>, f64) {
    shared.draining.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let scheduled =
        |finals: &BTreeMap<(String, String), Answer<pb::Retry>>| -> BTreeSet<(String, String)> {
            finals
            .iter()
            .filter(|(_, r)| matches!(r, Answer::Ok(x) if x.status == pb::RetryStatus::Scheduled as i32))
            .map(|(k, _)| k.clone())
            .collect()
        };
    let mut finals = final_states(shared, touched).await;
    // Only those still SCHEDULED are read again while waiting; every one at the end.
    let mut pending = scheduled(&finals);
    let mut waited = false;
    while !pending.is_empty() && started.elapsed() <= timeout {
        tokio::time::sleep(Duration::from_secs(2)).await;
        pending = scheduled(&final_states(shared, &pending).await);
        waited = true;
    }
    if waited {
        finals = final_states(shared, touched).await;
    }
    (finals, started.elapsed().as_secs_f64())
}

/// GetRetry of every transaction the workload touched.
async fn final_states(
    shared: &Shared,
    touched: &BTreeSet<(String, String)>,
) -> BTreeMap<(String, String), Answer<pb::Retry>> {
    use futures::StreamExt;
    // The spare node is down at the end.
    let n = shared.channels.len() - usize::from(shared.spare.is_some());
    futures::stream::iter(touched.iter().enumerate())
        .map(|(i, (s, t))| {
            let ch = shared.channels[i % n].clone();
            async move {
                let mut c = RetryServiceClient::new(ch);
                let r = call(c.get_retry(pb::GetRetryRequest {
                    service: s.clone(),
                    transaction_id: t.clone(),
                }))
                .await;
                let a = match r {
                    Ok(x) => Answer::Ok(x),
                    Err(e) => Answer::from_status(&e),
                };
                ((s.clone(), t.clone()), a)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// The delivery ids whose push outcome a node logged as not stored (`push outcome not
/// stored`, at warn) in the node logs of `log_dir`: pushed again after their deadline.
pub fn unstored_pushes(log_dir: &std::path::Path) -> HashSet<String> {
    let mut out = HashSet::new();
    let Ok(dir) = std::fs::read_dir(log_dir) else {
        return out;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text
            .lines()
            .filter(|l| l.contains("push outcome not stored"))
        {
            if let Some(id) = logged_delivery_id(line) {
                out.insert(id);
            }
        }
    }
    out
}

/// The `delivery_id` field of a log line, in text (with or without colours) or JSON.
fn logged_delivery_id(line: &str) -> Option<String> {
    // Without ANSI escapes (ESC [ ... m).
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let rest = &plain[plain.find("delivery_id")? + "delivery_id".len()..];
    let rest = rest.trim_start_matches(['=', '"', ':', ' ']);
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// Every dead letter of the run's services (the streamed ones and `pushed`): (service, tx) →
/// last errors.
async fn dead_letters(shared: &Shared, pushed: &[&str]) -> HashMap<(String, String), Vec<String>> {
    let mut out: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut admin = AdminServiceClient::new(shared.channels[0].clone());
    for svc in SERVICES.iter().chain(saga::SERVICES).chain(pushed) {
        let mut token = String::new();
        loop {
            let r = call(admin.list_dead_letters(pb::ListDeadLettersRequest {
                service: svc.to_string(),
                page_size: 1000,
                page_token: token.clone(),
                include_redriven: true,
                ..Default::default()
            }))
            .await;
            match r {
                Ok(page) => {
                    for l in page.dead_letters {
                        out.entry((l.service, l.transaction_id))
                            .or_default()
                            .push(l.last_error);
                    }
                    if page.next_page_token.is_empty() {
                        break;
                    }
                    token = page.next_page_token;
                }
                Err(e) => {
                    eprintln!("chaos: ListDeadLetters({svc}) failed: {e}");
                    break;
                }
            }
        }
    }
    out
}

/// Rule 10's figures: how many schedules were judged, their lateness, the limit.
fn on_time_line(result: &checker::CheckResult) -> String {
    fn pct(v: &[i64]) -> String {
        let mut l = v.to_vec();
        l.sort_unstable();
        match l.last() {
            None => "none".into(),
            Some(max) => {
                let at = |q: f64| l[((l.len() - 1) as f64 * q).round() as usize];
                format!("p50 {} ms, p99 {} ms, max {max} ms", at(0.5), at(0.99))
            }
        }
    }
    format!(
        "on time: {} schedules judged away from faults (limit {} ms after max(due, answered), {} ms after a fault); lateness from the answered due time {}; of the {} enqueues among them, from the due time asked for {}",
        result.on_time_judged,
        super::LATE_LIMIT_MS,
        super::AFTER_FAULT_MS,
        pct(&result.lateness_ms),
        result.lateness_requested_ms.len(),
        pct(&result.lateness_requested_ms),
    )
}

#[cfg(test)]
mod tests {
    use super::logged_delivery_id;

    #[test]
    fn the_delivery_id_of_a_logged_unstored_push_is_found_in_colour_and_json() {
        let text = "\u{1b}[2m2026-12-02T21:30:45.703924Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mrebound_server::push::pusher\u{1b}[0m\u{1b}[2m:\u{1b}[0m push outcome not stored; the delivery is pushed again after its deadline \u{1b}[3mservice\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"pushed\" \u{1b}[3mdelivery_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"1796247029349-10-1264499652\" \u{1b}[3merror\u{1b}[0m\u{1b}[2m=\u{1b}[0mdelivery";
        assert_eq!(
            logged_delivery_id(text).as_deref(),
            Some("1796247029349-10-1264499652")
        );
        let json = r#"{"level":"WARN","fields":{"message":"push outcome not stored","delivery_id":"17-1-2"}}"#;
        assert_eq!(logged_delivery_id(json).as_deref(), Some("17-1-2"));
        assert_eq!(logged_delivery_id("push outcome not stored"), None);
    }
}
