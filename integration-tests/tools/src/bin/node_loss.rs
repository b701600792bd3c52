//! The node-loss test of `scripts/cluster test`: a drain of `--items` retries enqueued
//! through every Rebound node of the cluster and delivered to executors subscribed to every
//! node, during which one Cassandra node (RF 3, LOCAL_QUORUM) is killed, kept down, restarted
//! and left to rejoin. Every call, delivery and ack goes into a chaos [`History`] and the chaos
//! checker ([`checker::check`]) judges it (nothing lost, nothing still scheduled, duplicates
//! within the bound, nothing early); the loss is recorded as a Cassandra-wide fault spanning
//! the kill to the rejoin.
//!
//! usage: node_loss --rebound URL,URL,URL --http ADDR,ADDR,ADDR --contact-points H:P,H:P,H:P
//!                  --cassandra-script PATH [--items 20000] [--victim 2] [--signal KILL|TERM]
//!                  [--kill-at 0.2] [--down-seconds 15] [--rate 250] [--batch 50]
//!                  [--streams 2] [--max-in-flight 50] [--drain-timeout 600]
//! `--kill-at`: the fraction of the items accepted when the node is killed. The environment
//! must make `--cassandra-script` address the cluster (scripts/cluster exports it).
//! Exit 0: all accepted, delivered, terminal, duplicates within the bound, no violation;
//! 1: any of those failed; 2: harness error.
//!
//! The traffic (enqueues, executors, dead letters) is in `traffic`; the loss of the Cassandra
//! node and the samples of the Rebound nodes' listeners in `cassandra`.

#[path = "node_loss/cassandra.rs"]
mod cassandra;
#[path = "node_loss/traffic.rs"]
mod traffic;

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use rebound_tools::chaos::{
    checker, directory,
    history::{self, now_ms, Answer, Event, FaultKind, History, Kind},
};
use tonic::transport::{Channel, Endpoint};

use cassandra::{node_loss, sampler};
use traffic::{call, dead_letters, enqueue_batch, executor, Shared};

#[derive(Clone, Debug)]
struct Args {
    rebound: Vec<String>,
    http: Vec<String>,
    contact_points: Vec<String>,
    script: PathBuf,
    items: usize,
    victim: usize,
    signal: String,
    kill_at: f64,
    down: Duration,
    rate: f64,
    batch: usize,
    streams: usize,
    max_in_flight: u32,
    drain_timeout: Duration,
}

const USAGE: &str = "usage: node_loss --rebound URL,.. --http ADDR,.. --contact-points H:P,.. --cassandra-script PATH [--items N] [--victim 1|2|3] [--signal KILL|TERM] [--kill-at FRACTION] [--down-seconds S] [--rate ITEMS/S] [--batch N] [--streams PER_NODE] [--max-in-flight N] [--drain-timeout S]";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        rebound: vec![],
        http: vec![],
        contact_points: vec![],
        script: PathBuf::from("scripts/cassandra"),
        items: 20_000,
        victim: 2,
        signal: "KILL".into(),
        kill_at: 0.2,
        down: Duration::from_secs(15),
        rate: 250.0,
        batch: 50,
        streams: 2,
        max_in_flight: 50,
        drain_timeout: Duration::from_secs(600),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let list = |s: &str| {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    while i < args.len() {
        let k = args[i].as_str();
        if k == "-h" || k == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let v = args.get(i + 1).ok_or(format!("{k} needs a value"))?.clone();
        let num = |s: &str| {
            s.parse::<f64>()
                .map_err(|_| format!("{k}: not a number: {s}"))
        };
        match k {
            "--rebound" => a.rebound = list(&v),
            "--http" => a.http = list(&v),
            "--contact-points" => a.contact_points = list(&v),
            "--cassandra-script" => a.script = PathBuf::from(v),
            "--items" => a.items = num(&v)? as usize,
            "--victim" => a.victim = num(&v)? as usize,
            "--signal" => a.signal = v.trim_start_matches("SIG").to_ascii_uppercase(),
            "--kill-at" => a.kill_at = num(&v)?.clamp(0.0, 1.0),
            "--down-seconds" => a.down = Duration::from_secs_f64(num(&v)?),
            "--rate" => a.rate = num(&v)?.max(1.0),
            "--batch" => a.batch = (num(&v)? as usize).clamp(1, 500),
            "--streams" => a.streams = (num(&v)? as usize).max(1),
            "--max-in-flight" => a.max_in_flight = (num(&v)? as u32).max(1),
            "--drain-timeout" => a.drain_timeout = Duration::from_secs_f64(num(&v)?),
            _ => return Err(format!("unknown argument {k}")),
        }
        i += 2;
    }
    if a.rebound.is_empty() || a.contact_points.is_empty() {
        return Err("--rebound and --contact-points are required".into());
    }
    if !(1..=3).contains(&a.victim) {
        return Err("--victim must be 1, 2 or 3".into());
    }
    if a.signal != "KILL" && a.signal != "TERM" {
        return Err("--signal must be KILL or TERM".into());
    }
    Ok(a)
}

fn main() -> std::process::ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("node_loss: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match rt.block_on(run(args)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("node_loss: harness error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(a: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let service = format!("nodeloss{}", std::process::id());
    let cql = directory::session(&a.contact_points[0]).await?;
    let (offset, err) = directory::clock_offset(&cql).await?;
    history::set_offset_ms(offset);
    let channels: Vec<Channel> = a
        .rebound
        .iter()
        .map(|u| {
            Endpoint::from_shared(u.clone())
                .expect("endpoint")
                .connect_timeout(Duration::from_millis(1000))
                .tcp_nodelay(true)
                .connect_lazy()
        })
        .collect();
    let n = channels.len();
    let shared = Arc::new(Shared {
        history: History::default(),
        channels,
        stop: AtomicBool::new(false),
        service: service.clone(),
        settled: Mutex::new(HashSet::new()),
        enqueue_errors: Mutex::new(BTreeMap::new()),
        ack_errors: Mutex::new(BTreeMap::new()),
        silent: AtomicUsize::new(0),
        accepted: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    });
    println!(
        "node_loss: {} items of service {service} through {n} nodes at {} items/s, {} stream(s) per node with max_in_flight {}; Cassandra clock - ours = {offset} ms (± {err})",
        a.items, a.rate, a.streams, a.max_in_flight
    );
    let mut executors = Vec::new();
    for node in 0..n {
        for s in 0..a.streams {
            executors.push(tokio::spawn(executor(
                shared.clone(),
                node,
                s,
                a.max_in_flight,
            )));
        }
    }
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sampler(a.http.clone(), sampler_stop.clone()));
    // Subscriptions settle before the first enqueue.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t0 = now_ms();
    let trigger = ((a.items as f64) * a.kill_at) as usize;
    let loss = tokio::spawn(node_loss(a.clone(), shared.clone(), trigger));

    // Paced enqueue: batch i leaves at t0 + i * batch / rate, round robin over the nodes.
    let ids: Vec<String> = (0..a.items).map(|i| format!("tx-{i:06}")).collect();
    let batches: Vec<Vec<String>> = ids.chunks(a.batch).map(<[String]>::to_vec).collect();
    let enqueue_started = Instant::now();
    let mut calls = Vec::new();
    for (i, b) in batches.into_iter().enumerate() {
        let at = Duration::from_secs_f64(i as f64 * a.batch as f64 / a.rate);
        if let Some(wait) = at.checked_sub(enqueue_started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        calls.push(tokio::spawn(enqueue_batch(shared.clone(), i % n, b)));
    }
    let mut never_accepted = 0;
    for c in calls {
        never_accepted += c.await?;
    }
    let enqueue_s = enqueue_started.elapsed().as_secs_f64();
    println!(
        "node_loss: enqueue done in {enqueue_s:.1} s ({} accepted, {never_accepted} never accepted)",
        shared.accepted.load(Ordering::Relaxed)
    );
    let loss = loss.await??;

    // Drain: until every transaction was acked SUCCEEDED with an OK answer.
    let drain_started = Instant::now();
    while shared.settled.lock().expect("settled").len() < a.items
        && drain_started.elapsed() < a.drain_timeout
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let drained_at = now_ms();
    // Late duplicates get a moment to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all: BTreeSet<(String, String)> =
        ids.iter().map(|t| (service.clone(), t.clone())).collect();
    let finals: BTreeMap<(String, String), Answer<pb::Retry>> =
        futures::stream::iter(all.iter().enumerate())
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
            .buffer_unordered(32)
            .collect()
            .await;
    let letters = dead_letters(&shared).await;
    shared.stop.store(true, Ordering::SeqCst);
    sampler_stop.store(true, Ordering::SeqCst);
    for e in executors {
        e.abort();
    }
    let samples = sampler.await?;
    shared.history.push(Event {
        start_ms: loss.kill,
        end_ms: loss.un_others.max(loss.un_victim).unwrap_or(loss.cql),
        kind: Kind::Fault {
            kind: FaultKind::CassandraPause,
            node: None,
            detail: loss.detail.clone(),
        },
    });
    let events = shared.history.snapshot();
    let result = checker::check(&checker::Input {
        events: &events,
        finals: &finals,
        letters: &letters,
        clock_err_ms: err + 5,
        t0,
        on_time: None,
    });

    // Figures.
    let mut delivered: HashSet<&str> = HashSet::new();
    let mut deliveries = 0usize;
    for e in &events {
        if let Kind::Delivery { tx, .. } = &e.kind {
            delivered.insert(tx);
            deliveries += 1;
        }
    }
    let accepted: HashSet<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Enqueue {
                tx,
                answer: Answer::Ok(_),
                ..
            } => Some(tx.as_str()),
            _ => None,
        })
        .collect();
    let lost = accepted.iter().filter(|t| !delivered.contains(*t)).count();
    let mut status: BTreeMap<String, usize> = BTreeMap::new();
    for a in finals.values() {
        let k = match a {
            Answer::Ok(r) => pb::RetryStatus::try_from(r.status)
                .map(|s| format!("{s:?}"))
                .unwrap_or_else(|_| r.status.to_string()),
            Answer::Refused(m) | Answer::Unknown(m) => format!("GetRetry error {m}"),
        };
        *status.entry(k).or_default() += 1;
    }
    let terminal = finals
        .values()
        .filter(|a| {
            matches!(a, Answer::Ok(r) if r.status == pb::RetryStatus::Succeeded as i32
                || r.status == pb::RetryStatus::Dead as i32
                || r.status == pb::RetryStatus::Cancelled as i32)
        })
        .count();
    let static_bound = n * a.streams * a.max_in_flight as usize;
    let errors = shared.enqueue_errors.lock().expect("errors").clone();
    let error_items: usize = errors.values().map(Vec::len).sum();
    let fault_end = loss.un_others.max(loss.un_victim).unwrap_or(loss.cql);
    let (mut during, mut outside) = (0, 0);
    let (mut first_err, mut last_err) = (None::<i64>, None::<i64>);
    for ts in errors.values().flatten() {
        if *ts >= loss.kill && *ts <= fault_end + 5_000 {
            during += 1;
        } else {
            outside += 1;
        }
        first_err = Some(first_err.map_or(*ts, |f| f.min(*ts)));
        last_err = Some(last_err.map_or(*ts, |l| l.max(*ts)));
    }
    let rel = |t: i64| (t - loss.kill) as f64 / 1000.0;
    let secs = |from: i64, to: Option<i64>| {
        to.map_or("never".into(), |t| {
            format!("{:.1} s", (t - from) as f64 / 1000.0)
        })
    };
    // Store errors: the last sample where any node's count rose, and readiness failures.
    let mut last_rise: Option<i64> = None;
    let mut rises_before_kill = 0.0;
    let mut total_rise = vec![0.0f64; a.http.len()];
    let mut not_ready = vec![0usize; a.http.len()];
    for w in samples.rows.windows(2) {
        let (t, ref prev) = w[0];
        let (t2, ref cur) = w[1];
        let _ = t;
        for (i, ((_, pe), (r, ce))) in prev.iter().zip(cur).enumerate() {
            if let (Some(pe), Some(ce)) = (pe, ce) {
                if ce > pe {
                    total_rise[i] += ce - pe;
                    last_rise = Some(t2);
                    if t2 < loss.kill {
                        rises_before_kill += ce - pe;
                    }
                }
            }
            if *r != Some(true) {
                not_ready[i] += 1;
            }
        }
    }

    let mut failures = Vec::new();
    if lost > 0 {
        failures.push(format!("{lost} accepted item(s) never delivered"));
    }
    if never_accepted > 0 {
        failures.push(format!(
            "{never_accepted} item(s) never accepted in 120 s of retrying"
        ));
    }
    if terminal < a.items {
        failures.push(format!(
            "{} item(s) not in a terminal state",
            a.items - terminal
        ));
    }
    if result.duplicates > static_bound {
        failures.push(format!(
            "{} duplicates over the in-flight bound {static_bound}",
            result.duplicates
        ));
    }
    if shared.silent.load(Ordering::Relaxed) > 0 {
        failures.push("batch answers with missing results".into());
    }
    if !result.violations.is_empty() {
        failures.push(format!("{} checker violation(s)", result.violations.len()));
    }
    if loss.un_others.is_none() || loss.un_victim.is_none() {
        failures.push("the node did not rejoin (UN) within 180 s".into());
    }

    println!("== node loss summary");
    println!(
        "items: {} (accepted {}, never accepted {never_accepted}) in {} batch calls of up to {}",
        a.items,
        accepted.len(),
        shared.calls.load(Ordering::Relaxed),
        a.batch
    );
    println!(
        "enqueue item errors: {error_items} ({}), {during} between the kill and 5 s after the rejoin, {outside} outside; first at {}, last at {} from the kill; batches with missing results: {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors
                .iter()
                .map(|(k, v)| format!("{k} {}", v.len()))
                .collect::<Vec<_>>()
                .join(", ")
        },
        first_err.map_or("-".into(), |t| format!("{:+.1} s", rel(t))),
        last_err.map_or("-".into(), |t| format!("{:+.1} s", rel(t))),
        shared.silent.load(Ordering::Relaxed)
    );
    println!(
        "delivered: {} of {} distinct ({deliveries} deliveries); ack errors: {:?}",
        delivered.len(),
        a.items,
        shared.ack_errors.lock().expect("ack errors")
    );
    println!(
        "duplicates: {} (explained by the fault or a late ack: {}), bound: sum of max_in_flight {static_bound}; checker's bound (in flight at the loss + deliveries without an OK ack) {}",
        result.duplicates, result.explained_duplicates, result.duplicate_bound
    );
    println!("lost: {lost}");
    println!("final states: {status:?} ({terminal} terminal)");
    println!(
        "checker violations: {}",
        if result.violations.is_empty() {
            "0".to_string()
        } else {
            let mut by: BTreeMap<&str, usize> = BTreeMap::new();
            for v in &result.violations {
                *by.entry(v.kind).or_default() += 1;
            }
            format!("{} {by:?}", result.violations.len())
        }
    );
    for v in result.violations.iter().take(5) {
        println!("-- VIOLATION {}: {}", v.kind, v.subject);
        for &i in v.lines.iter().take(12) {
            println!(
                "     {}",
                history::Line {
                    index: i,
                    event: &events[i],
                    t0
                }
            );
        }
    }
    println!(
        "cassandra node {}: SIG{} with {} in flight; exited {:.1} s after the signal; down {:.1} s; restart to CQL {:.1} s{}; restart to UN seen from node {}: {}, from node {}: {}",
        a.victim,
        a.signal,
        loss.in_flight,
        (loss.exited - loss.kill) as f64 / 1000.0,
        (loss.restart - loss.exited) as f64 / 1000.0,
        (loss.cql - loss.restart) as f64 / 1000.0,
        if loss.restart_ok { "" } else { " (FAILED)" },
        (1..=3).find(|&i| i != a.victim).unwrap_or(1),
        secs(loss.restart, loss.un_others),
        a.victim,
        secs(loss.restart, loss.un_victim)
    );
    println!(
        "rebound store errors (rebound_store_request_errors_total): per node {:?} during the run ({} before the kill); last increase at {} from the kill, {} from the restart",
        total_rise,
        rises_before_kill,
        last_rise.map_or("-".into(), |t| format!("{:+.1} s", rel(t))),
        last_rise.map_or("-".into(), |t| format!("{:+.1} s", (t - loss.restart) as f64 / 1000.0))
    );
    println!(
        "rebound /readyz not-ready samples per node: {not_ready:?} of {}",
        samples.rows.len()
    );
    println!(
        "times: enqueue {enqueue_s:.1} s, drain done {:.1} s after the start of enqueue, total {:.1} s",
        (drained_at - t0) as f64 / 1000.0,
        started.elapsed().as_secs_f64()
    );
    let hist = std::env::temp_dir().join(format!("rebound-node-loss-{}.txt", std::process::id()));
    let mut text = String::new();
    for (i, e) in events.iter().enumerate() {
        use std::fmt::Write;
        let _ = writeln!(
            text,
            "{}",
            history::Line {
                index: i,
                event: e,
                t0
            }
        );
    }
    let _ = std::fs::write(&hist, text);
    println!("history: {} events in {}", events.len(), hist.display());
    if failures.is_empty() {
        println!("RESULT: PASS");
        Ok(true)
    } else {
        println!("RESULT: FAIL: {}", failures.join("; "));
        Ok(false)
    }
}
