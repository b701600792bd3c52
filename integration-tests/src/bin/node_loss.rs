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

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    path::PathBuf,
    process::Command,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use rebound_integration_tests::chaos::{
    checker, directory, dur,
    history::{self, now_ms, AckOk, Answer, EnqueueOk, Event, FaultKind, History, Kind, Outcome},
    record_deliveries, ts_ms, StreamSpec,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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

fn policy() -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: Some(10),
        initial_backoff: Some(dur(1_000)),
        max_backoff: Some(dur(2_000)),
        multiplier: Some(2.0),
        jitter: Some(0.2),
        ack_timeout: Some(dur(10_000)),
        max_deliveries_per_attempt: Some(10),
        ..Default::default()
    }
}

async fn call<T>(
    f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded(
            "client timeout (node_loss)",
        )),
    }
}

fn code_name(code: tonic::Code) -> String {
    format!("{code:?}")
}

struct Shared {
    history: History,
    channels: Vec<Channel>,
    stop: AtomicBool,
    service: String,
    /// Transactions acked SUCCEEDED with an OK answer.
    settled: Mutex<HashSet<String>>,
    /// Enqueue item errors by gRPC code, and when they happened (ms, Cassandra clock).
    enqueue_errors: Mutex<BTreeMap<String, Vec<i64>>>,
    ack_errors: Mutex<BTreeMap<String, usize>>,
    /// Batch answers with a result count different from the request count, or an empty result.
    silent: AtomicUsize,
    accepted: AtomicUsize,
    calls: AtomicUsize,
}

/// Enqueues one batch, again (on the next node) for the items not accepted, until all are
/// accepted or two minutes pass. Returns the items never accepted.
async fn enqueue_batch(shared: Arc<Shared>, first_node: usize, ids: Vec<String>) -> usize {
    let n = shared.channels.len();
    let mut left = ids;
    let mut node = first_node;
    let started = Instant::now();
    while !left.is_empty() && started.elapsed() < Duration::from_secs(120) {
        let reqs: Vec<pb::EnqueueRetryRequest> = left
            .iter()
            .map(|tx| pb::EnqueueRetryRequest {
                service: shared.service.clone(),
                transaction_id: tx.clone(),
                payload: tx.as_bytes().to_vec(),
                schedule: Some(pb::enqueue_retry_request::Schedule::Delay(dur(0))),
                policy: Some(policy()),
                attempt: 1,
                last_error: "first try failed".into(),
                ..Default::default()
            })
            .collect();
        let mut client = RetryServiceClient::new(shared.channels[node].clone());
        shared.calls.fetch_add(1, Ordering::Relaxed);
        let start = now_ms();
        let r = call(client.enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: reqs.clone(),
        }))
        .await;
        let end = now_ms();
        let answers: Vec<(Answer<EnqueueOk>, Option<String>)> = match r {
            Ok(resp) => {
                if resp.results.len() != reqs.len() {
                    shared.silent.fetch_add(1, Ordering::Relaxed);
                }
                (0..reqs.len())
                    .map(
                        |i| match resp.results.get(i).and_then(|r| r.result.as_ref()) {
                            Some(pb::enqueue_retry_result::Result::Response(x)) => (
                                Answer::Ok(EnqueueOk {
                                    due_ms: ts_ms(&x.due_time).unwrap_or(0),
                                    generation: x.generation,
                                    deduplicated: x.deduplicated,
                                }),
                                None,
                            ),
                            Some(pb::enqueue_retry_result::Result::Error(e)) => (
                                Answer::from_item_error(e.code, &e.message),
                                Some(code_name(tonic::Code::from(e.code))),
                            ),
                            None => {
                                shared.silent.fetch_add(1, Ordering::Relaxed);
                                (Answer::Unknown("empty result".into()), Some("EMPTY".into()))
                            }
                        },
                    )
                    .collect()
            }
            Err(s) => reqs
                .iter()
                .map(|_| (Answer::from_status(&s), Some(code_name(s.code()))))
                .collect(),
        };
        let mut again = Vec::new();
        for (tx, (answer, code)) in left.iter().zip(answers) {
            let ok = matches!(answer, Answer::Ok(_));
            if let Some(c) = code {
                shared
                    .enqueue_errors
                    .lock()
                    .expect("errors")
                    .entry(c)
                    .or_default()
                    .push(end);
            }
            shared.history.push(Event {
                start_ms: start,
                end_ms: end,
                kind: Kind::Enqueue {
                    node,
                    service: shared.service.clone(),
                    tx: tx.clone(),
                    asked: "delay=0ms".into(),
                    batch: true,
                    answer,
                },
            });
            if ok {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
            } else {
                again.push(tx.clone());
            }
        }
        left = again;
        if !left.is_empty() {
            node = (node + 1) % n;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    left.len()
}

async fn executor(shared: Arc<Shared>, node: usize, stream_no: usize, max_in_flight: u32) {
    let spec = StreamSpec {
        node,
        service: &shared.service,
        executor_id: format!("node-loss-n{}-{stream_no}", node + 1),
        max_in_flight,
        subscribe_timeout: Duration::from_secs(5),
    };
    record_deliveries(
        &shared.stop,
        &shared.channels[node],
        &shared.history,
        spec,
        |idx, d| {
            tokio::spawn(ack(shared.clone(), node, idx, d));
        },
    )
    .await;
}

async fn ack(shared: Arc<Shared>, node: usize, idx: usize, d: pb::Delivery) {
    let mut client = ExecutorServiceClient::new(shared.channels[node].clone());
    let start = now_ms();
    let r = call(client.ack(pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: pb::AckOutcome::Succeeded as i32,
        ..Default::default()
    }))
    .await;
    let end = now_ms();
    let answer = match r {
        Ok(x) => {
            shared
                .settled
                .lock()
                .expect("settled")
                .insert(d.transaction_id.clone());
            Answer::Ok(AckOk {
                next_due_ms: ts_ms(&x.next_due_time),
                dead_lettered: x.dead_lettered,
                snoozed: x.snoozed,
            })
        }
        Err(s) => {
            *shared
                .ack_errors
                .lock()
                .expect("ack errors")
                .entry(code_name(s.code()))
                .or_default() += 1;
            Answer::from_status(&s)
        }
    };
    shared.history.push(Event {
        start_ms: start,
        end_ms: end,
        kind: Kind::Ack {
            node,
            service: d.service,
            tx: d.transaction_id,
            delivery_id: d.delivery_id,
            delivery: idx,
            attempt: d.attempt,
            outcome: Outcome::Succeeded,
            retry_after_ms: None,
            error: String::new(),
            answer,
        },
    });
}

/// Runs the Cassandra script with the inherited environment (the cluster's).
async fn script(path: PathBuf, args: Vec<String>) -> anyhow::Result<(bool, String)> {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(&path).args(&args).output()?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok((out.status.success(), text))
    })
    .await?
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Whether `nodetool status` run against node `view` shows `n` nodes UN.
async fn all_un(a: &Args, view: usize, n: usize) -> bool {
    match script(
        a.script.clone(),
        vec!["nodetool".into(), view.to_string(), "status".into()],
    )
    .await
    {
        Ok((true, out)) => out.lines().filter(|l| l.starts_with("UN ")).count() >= n,
        _ => false,
    }
}

#[derive(Debug, Default, Clone)]
struct LossTimes {
    /// All ms on Cassandra's clock.
    kill: i64,
    exited: i64,
    restart: i64,
    cql: i64,
    un_others: Option<i64>,
    un_victim: Option<i64>,
    in_flight: usize,
    restart_ok: bool,
    detail: String,
}

async fn node_loss(a: Args, shared: Arc<Shared>, trigger: usize) -> anyhow::Result<LossTimes> {
    while shared.accepted.load(Ordering::Relaxed) < trigger {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = a.victim;
    let (ok, out) = script(a.script.clone(), vec!["pid".into(), v.to_string()]).await?;
    let pid: u32 = out
        .trim()
        .parse()
        .ok()
        .filter(|_| ok)
        .ok_or_else(|| anyhow::anyhow!("no pid for Cassandra node {v}: {out}"))?;
    let mut t = LossTimes {
        kill: now_ms(),
        ..Default::default()
    };
    t.in_flight = shared.history.in_flight_at(t.kill, None);
    println!(
        "node_loss: SIG{} to Cassandra node {v} (pid {pid}) with {} accepted, {} deliveries in flight",
        a.signal,
        shared.accepted.load(Ordering::Relaxed),
        t.in_flight
    );
    rebound_integration_tests::chaos::cluster::signal(pid, &a.signal);
    let deadline = Instant::now() + Duration::from_secs(90);
    while pid_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if pid_alive(pid) {
        rebound_integration_tests::chaos::cluster::signal(pid, "KILL");
    }
    t.exited = now_ms();
    // The script keeps a pid file; stop-node removes it (the process is gone already).
    let _ = script(a.script.clone(), vec!["stop-node".into(), v.to_string()]).await;
    tokio::time::sleep(a.down).await;
    t.restart = now_ms();
    println!(
        "node_loss: restarting Cassandra node {v} after {:.1} s down",
        (t.restart - t.exited) as f64 / 1000.0
    );
    let (ok, out) = script(a.script.clone(), vec!["start-node".into(), v.to_string()]).await?;
    t.cql = now_ms();
    t.restart_ok = ok;
    if !ok {
        t.detail = format!("start-node failed: {}", out.trim());
        return Ok(t);
    }
    let others: Vec<usize> = (1..=3).filter(|&i| i != v).collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline && (t.un_others.is_none() || t.un_victim.is_none()) {
        if t.un_others.is_none() && all_un(&a, others[0], 3).await {
            t.un_others = Some(now_ms());
        }
        if t.un_victim.is_none() && all_un(&a, v, 3).await {
            t.un_victim = Some(now_ms());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    t.detail = format!(
        "node loss: Cassandra node {v} SIG{}, down {:.1} s, restarted, rejoined: {}",
        a.signal,
        (t.restart - t.exited) as f64 / 1000.0,
        t.un_others.is_some() && t.un_victim.is_some()
    );
    Ok(t)
}

/// One sample of a Rebound node's HTTP listener: /readyz status and the store error count.
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, text))
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
}

/// One node in one sample: /readyz answered 200, its store error count.
type NodeSample = (Option<bool>, Option<f64>);

#[derive(Default, Debug)]
struct Samples {
    /// (ms, per node)
    rows: Vec<(i64, Vec<NodeSample>)>,
}

async fn sampler(http: Vec<String>, stop: Arc<AtomicBool>) -> Samples {
    let mut s = Samples::default();
    while !stop.load(Ordering::SeqCst) {
        let at = now_ms();
        let mut row = Vec::new();
        for addr in &http {
            let ready = http_get(addr, "/readyz").await.map(|(c, _)| c == 200);
            let errors = http_get(addr, "/metrics").await.map(|(_, body)| {
                body.lines()
                    .filter(|l| l.starts_with("rebound_store_request_errors_total"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>()
            });
            row.push((ready, errors));
        }
        s.rows.push((at, row));
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    s
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

async fn dead_letters(shared: &Shared) -> HashMap<(String, String), Vec<String>> {
    let mut out: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut admin = AdminServiceClient::new(shared.channels[0].clone());
    let mut token = String::new();
    loop {
        match call(admin.list_dead_letters(pb::ListDeadLettersRequest {
            service: shared.service.clone(),
            page_size: 1000,
            page_token: token.clone(),
            include_redriven: true,
            ..Default::default()
        }))
        .await
        {
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
                eprintln!("node_loss: ListDeadLetters failed: {e}");
                break;
            }
        }
    }
    out
}
