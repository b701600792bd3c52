//! The Rust half of `scripts/bench` (issue 6): Rebound through its gRPC API, and two
//! baselines straight on Cassandra with the same driver: raw inserts of Rebound's pointer row
//! (the ceiling of the write path) and the naive single-table queue that Rebound's layout
//! avoids. Each writes one JSON result in the shape `bench/report.py` reads.
//!
//! usage:
//!   bench rebound --addr http://127.0.0.1:50090 --pid PID --keyspace KS --n N --out F
//!   bench raw --n N [--singles S (min(N, 20000))] --out F
//!   bench naive --n N --out F
//!   bench costs --cassandra-pid PID --n N --out F   (Cassandra CPU per state-row operation)
//!   bench ring --addrs A,B --metrics M,N --slots S --n N --out F   (per-node ring and scan cost)
//! common: --concurrency C (32) --cassandra HOST:PORT (127.0.0.1:9042) --late L (lateness
//! items, default min(n/10, 20000))

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use futures::StreamExt;
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use scylla::{
    client::{session::Session, session_builder::SessionBuilder},
    statement::{batch::Batch, batch::BatchType, prepared::PreparedStatement},
    value::{CqlDate, CqlTimestamp},
};
use tonic::transport::Channel;

#[path = "bench/ring.rs"]
mod ring;

struct Args {
    map: HashMap<String, String>,
}

impl Args {
    fn get<T: std::str::FromStr>(&self, k: &str, default: T) -> anyhow::Result<T> {
        match self.map.get(k) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| anyhow::anyhow!("--{k}: cannot parse {v:?}")),
        }
    }
    fn text(&self, k: &str, default: &str) -> String {
        self.map.get(k).cloned().unwrap_or_else(|| default.into())
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// p50, p99 and max of a sample, in the sample's unit.
fn percentiles(mut v: Vec<f64>) -> serde_like::Pct {
    if v.is_empty() {
        return serde_like::Pct::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    serde_like::Pct {
        p50: at(0.5),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

/// Hand-written JSON: the harness needs no serde.
mod serde_like {
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Pct {
        pub p50: f64,
        pub p99: f64,
        pub max: f64,
    }

    pub enum J {
        N(f64),
        S(String),
        B(bool),
        Null,
        O(Vec<(&'static str, J)>),
        A(Vec<J>),
    }

    impl J {
        pub fn render(&self) -> String {
            match self {
                J::N(x) if x.is_finite() => format!("{:.3}", x),
                J::N(_) | J::Null => "null".into(),
                J::B(b) => b.to_string(),
                J::S(s) => format!("{s:?}"),
                J::A(items) => format!(
                    "[{}]",
                    items.iter().map(J::render).collect::<Vec<_>>().join(", ")
                ),
                J::O(kv) => format!(
                    "{{{}}}",
                    kv.iter()
                        .map(|(k, v)| format!("{k:?}: {}", v.render()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    }
}
use serde_like::J;

fn single_json(ops: f64, lat: serde_like::Pct, concurrency: usize) -> J {
    J::O(vec![
        ("ops_per_sec", J::N(ops)),
        ("p50_ms", J::N(lat.p50)),
        ("p99_ms", J::N(lat.p99)),
        ("concurrency", J::N(concurrency as f64)),
    ])
}

fn lateness_json(l: serde_like::Pct) -> J {
    J::O(vec![
        ("p50", J::N(l.p50)),
        ("p99", J::N(l.p99)),
        ("max", J::N(l.max)),
    ])
}

/// Runs `total` calls of `f` with `concurrency` at once; returns (ops/s, latency ms).
async fn closed_loop<F, Fut>(
    total: usize,
    concurrency: usize,
    f: F,
) -> anyhow::Result<(f64, serde_like::Pct)>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    let lat: Vec<f64> = futures::stream::iter(0..total)
        .map(|i| {
            let fut = f(i);
            async move {
                let t = Instant::now();
                fut.await?;
                Ok::<f64, anyhow::Error>(t.elapsed().as_secs_f64() * 1000.0)
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let secs = started.elapsed().as_secs_f64();
    Ok((total as f64 / secs, percentiles(lat)))
}

/// Tombstone warnings and failures in Cassandra's log (`--cassandra-log`), to diff.
fn tombstone_lines(a: &Args) -> (usize, usize) {
    let Some(path) = a.map.get("cassandra-log") else {
        return (0, 0);
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let warn = text
        .lines()
        .filter(|l| l.contains("tombstone cells"))
        .count();
    let fail = text
        .lines()
        .filter(|l| {
            (l.contains("Scanned over") && l.contains("tombstones"))
                || l.contains("TombstoneOverwhelming")
        })
        .count();
    (warn, fail)
}

fn tombstone_json(a: &Args, before: (usize, usize)) -> Vec<(&'static str, J)> {
    if !a.map.contains_key("cassandra-log") {
        return vec![
            ("tombstone_warnings", J::Null),
            ("tombstone_failures", J::Null),
        ];
    }
    let after = tombstone_lines(a);
    vec![
        (
            "tombstone_warnings",
            J::N(after.0.saturating_sub(before.0) as f64),
        ),
        (
            "tombstone_failures",
            J::N(after.1.saturating_sub(before.1) as f64),
        ),
    ]
}

fn vm_hwm_mb(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn enqueue_req(service: &str, id: String, due_ms: Option<i64>) -> pb::EnqueueRetryRequest {
    pb::EnqueueRetryRequest {
        service: service.into(),
        transaction_id: id,
        payload: vec![b'x'; 64],
        attempt: 1,
        schedule: Some(match due_ms {
            None => pb::enqueue_retry_request::Schedule::Delay(prost_types::Duration::default()),
            Some(ms) => pb::enqueue_retry_request::Schedule::DueTime(prost_types::Timestamp {
                seconds: ms / 1000,
                nanos: ((ms % 1000) * 1_000_000) as i32,
            }),
        }),
        ..Default::default()
    }
}

/// No-op executors on `streams` streams of `service`: every delivery is acked SUCCEEDED at
/// once. Each delivery's lateness (now - requested due time, carried in the payload when
/// `late` is set) is recorded.
fn executors(
    ch: &Channel,
    service: &str,
    streams: usize,
    max_in_flight: u32,
    acked: Arc<AtomicUsize>,
    lateness: Option<Arc<Mutex<Vec<f64>>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..streams)
        .map(|s| {
            let ch = ch.clone();
            let service = service.to_string();
            let acked = acked.clone();
            let lateness = lateness.clone();
            tokio::spawn(async move {
                let mut ex = ExecutorServiceClient::new(ch);
                let Ok(sub) = ex
                    .subscribe(pb::SubscribeRequest {
                        service,
                        executor_id: format!("bench-{s}"),
                        max_in_flight,
                    })
                    .await
                else {
                    return;
                };
                let mut sub = sub.into_inner();
                // Acks go as the Rust SDK sends them: those that queue up while an ack call
                // is out travel together in one AckBatch (up to 500, 4 calls out at once).
                let (acks, queued) = tokio::sync::mpsc::unbounded_channel::<String>();
                let acker = tokio::spawn(ack_batches(ex.clone(), queued, acked));
                while let Ok(Some(d)) = sub.message().await {
                    if let Some(l) = &lateness {
                        if let Ok(due) =
                            std::str::from_utf8(&d.payload).unwrap_or("").parse::<i64>()
                        {
                            l.lock().expect("lateness").push((now_ms() - due) as f64);
                        }
                    }
                    if acks.send(d.delivery_id).is_err() {
                        break;
                    }
                }
                drop(acks);
                let _ = acker.await;
            })
        })
        .collect()
}

/// Sends the queued acks of one stream as AckBatch calls and counts those answered OK.
async fn ack_batches(
    ex: ExecutorServiceClient<Channel>,
    mut queued: tokio::sync::mpsc::UnboundedReceiver<String>,
    acked: Arc<AtomicUsize>,
) {
    let mut calls = tokio::task::JoinSet::new();
    loop {
        while calls.len() >= 4 {
            calls.join_next().await;
        }
        let first = tokio::select! {
            biased;
            Some(_) = calls.join_next(), if !calls.is_empty() => continue,
            first = queued.recv() => first,
        };
        let Some(first) = first else { break };
        let mut ids = vec![first];
        while ids.len() < 500 {
            match queued.try_recv() {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
        }
        let mut ex = ex.clone();
        let acked = acked.clone();
        calls.spawn(async move {
            let acks = ids
                .into_iter()
                .map(|delivery_id| pb::AckRequest {
                    delivery_id,
                    outcome: pb::AckOutcome::Succeeded as i32,
                    ..Default::default()
                })
                .collect();
            if let Ok(r) = ex.ack_batch(pb::AckBatchRequest { acks }).await {
                let ok = r
                    .into_inner()
                    .results
                    .iter()
                    .filter(|r| matches!(r.result, Some(pb::ack_batch_result::Result::Response(_))))
                    .count();
                acked.fetch_add(ok, Ordering::Relaxed);
            }
        });
    }
    while calls.join_next().await.is_some() {}
}

async fn wait_for(counter: &AtomicUsize, target: usize, limit: Duration, what: &str) -> f64 {
    let started = Instant::now();
    let mut report = Instant::now();
    while counter.load(Ordering::Relaxed) < target && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if report.elapsed() > Duration::from_secs(10) {
            eprintln!("  {what}: {} of {target}", counter.load(Ordering::Relaxed));
            report = Instant::now();
        }
    }
    started.elapsed().as_secs_f64()
}

async fn rebound(a: &Args) -> anyhow::Result<J> {
    let addr = a.text("addr", "http://127.0.0.1:50090");
    let n: usize = a.get("n", 100_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let singles = n.min(20_000);
    let late_n: usize = a.get("late", (n / 10).clamp(1_000, 20_000))?;
    let pid: u32 = a.get("pid", 0)?;
    let keyspace = a.text("keyspace", "");
    let tombstones_before = tombstone_lines(a);
    let ch = Channel::from_shared(addr.clone())?
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let client = RetryServiceClient::new(ch.clone())
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);

    let meter = Meter::from_args(a, pid)?;
    let quiet_s = quiesce(a, "rebound").await?;
    eprintln!("rebound: {singles} single enqueues at concurrency {conc}");
    let before = meter.read().await;
    let (single_ops, single_lat) = closed_loop(singles, conc, |i| {
        let mut c = client.clone();
        async move {
            c.enqueue_retry(enqueue_req("bench-single", format!("s-{i}"), None))
                .await?;
            Ok(())
        }
    })
    .await?;
    let single_cost = meter.per_item(before, singles).await;
    eprintln!("rebound: {n} enqueues in batches of 500");
    let before = meter.read().await;
    let batches: Vec<usize> = (0..n).step_by(500).collect();
    let started = Instant::now();
    let failed = AtomicUsize::new(0);
    futures::stream::iter(batches)
        .map(|from| {
            let mut c = client.clone();
            let failed = &failed;
            async move {
                let requests = (from..(from + 500).min(n))
                    .map(|i| enqueue_req("bench", format!("b-{i}"), None))
                    .collect();
                match c
                    .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                    .await
                {
                    Ok(r) => {
                        let bad = r
                            .into_inner()
                            .results
                            .iter()
                            .filter(|r| {
                                !matches!(
                                    r.result,
                                    Some(pb::enqueue_retry_result::Result::Response(_))
                                )
                            })
                            .count();
                        failed.fetch_add(bad, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("batch failed: {e}");
                        failed.fetch_add(500, Ordering::Relaxed);
                    }
                }
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();
    let batch_cost = meter.per_item(before, n).await;
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        bail!("{failed} batch enqueues failed");
    }
    let hold_rss = if pid > 0 { vm_hwm_mb(pid) } else { None };

    eprintln!(
        "rebound: draining {} with 4 no-op streams x 500",
        n + singles
    );
    let acked = Arc::new(AtomicUsize::new(0));
    let before = meter.read().await;
    let mut tasks = executors(&ch, "bench", 4, 500, acked.clone(), None);
    tasks.extend(executors(&ch, "bench-single", 2, 500, acked.clone(), None));
    let drain_secs = wait_for(&acked, n + singles, Duration::from_secs(3600), "acked").await;
    let drained = acked.load(Ordering::Relaxed);
    let drain_ops = drained as f64 / drain_secs;
    let drain_cost = meter.per_item(before, drained).await;

    eprintln!("rebound: lateness of {late_n} retries enqueued at 1,000/s, due 3 s later");
    let late_acked = Arc::new(AtomicUsize::new(0));
    let lateness = Arc::new(Mutex::new(Vec::new()));
    tasks.extend(executors(
        &ch,
        "bench-late",
        2,
        500,
        late_acked.clone(),
        Some(lateness.clone()),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for chunk in 0..late_n.div_ceil(10) {
        tick.tick().await;
        let due = now_ms() + 3_000;
        let requests = (chunk * 10..((chunk + 1) * 10).min(late_n))
            .map(|i| {
                let mut r = enqueue_req("bench-late", format!("l-{i}"), Some(due));
                r.payload = due.to_string().into_bytes();
                r
            })
            .collect();
        let mut c = client.clone();
        tokio::spawn(async move {
            let _ = c
                .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                .await;
        });
    }
    wait_for(&late_acked, late_n, Duration::from_secs(600), "late acked").await;
    let late = percentiles(lateness.lock().expect("lateness").clone());
    for t in &tasks {
        t.abort();
    }
    let peak = if pid > 0 { vm_hwm_mb(pid) } else { None };
    // The full cycle ends when Node-0 has compacted every window of the run.
    let mut compaction_s = None;
    if !keyspace.is_empty() {
        eprintln!("rebound: waiting for the compactor to empty the directory");
        let s = session(a).await?;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(300) {
            let left: i64 = s
                .query_unpaged(
                    format!("SELECT COUNT(*) FROM {keyspace}.windows_by_day"),
                    (),
                )
                .await?
                .into_rows_result()?
                .single_row::<(i64,)>()?
                .0;
            if left == 0 {
                compaction_s = Some(started.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    if a.map.contains_key("drop-keyspace") && !keyspace.is_empty() {
        let s = session(a).await?;
        s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await?;
    }
    let mut fields = vec![
        ("system", J::S("rebound".into())),
        ("version", J::S(env!("CARGO_PKG_VERSION").into())),
        (
            "guarantees",
            J::S("Cassandra LOCAL_QUORUM writes (commitlog periodic 10 s, 1 node here): an acknowledged enqueue is on the replicas; at-least-once delivery, no tombstone scans".into()),
        ),
        ("n", J::N(n as f64)),
        ("cassandra_quiet_after_s", J::N(quiet_s)),
        ("enqueue_single", single_json(single_ops, single_lat, conc)),
        (
            "enqueue_batch",
            J::O(vec![("ops_per_sec", J::N(batch_ops)), ("batch", J::N(500.0))]),
        ),
        (
            "drain",
            J::O(vec![
                ("acked_per_sec", J::N(drain_ops)),
                ("n", J::N(drained as f64)),
            ]),
        ),
        (
            "cost_per_item",
            J::O(vec![
                ("enqueue_single", single_cost),
                ("enqueue_batch", batch_cost),
                ("delivery_cycle", drain_cost),
            ]),
        ),
        ("lateness_ms", lateness_json(late)),
        ("retry_ok", J::B(drained >= n + singles)),
        ("hold_rss_mb", hold_rss.map_or(J::Null, J::N)),
        ("peak_rss_mb", peak.map_or(J::Null, J::N)),
        (
            "peak_rss_method",
            J::S("VmHWM of the node process (the node has no children)".into()),
        ),
        (
            "compaction_s_after_drain",
            compaction_s.map_or(J::Null, J::N),
        ),
    ];
    fields.extend(tombstone_json(a, tombstones_before));
    Ok(J::O(fields))
}

async fn session(a: &Args) -> anyhow::Result<Session> {
    let host = a.text("cassandra", "127.0.0.1:9042");
    SessionBuilder::new()
        .known_node(&host)
        .build()
        .await
        .with_context(|| format!("connecting to Cassandra at {host}"))
}

async fn fresh_keyspace(s: &Session, ks: &str) -> anyhow::Result<()> {
    s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), ())
        .await?;
    s.query_unpaged(
        format!(
            "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
        (),
    )
    .await?;
    Ok(())
}

async fn prepared(s: &Session, cql: String) -> anyhow::Result<PreparedStatement> {
    let mut p = s.prepare(cql).await?;
    p.set_is_idempotent(true);
    p.set_consistency(scylla::statement::Consistency::LocalQuorum);
    Ok(p)
}

/// Raw driver inserts of Rebound's Tier-5 pointer row: the ceiling of the write path.
async fn raw(a: &Args) -> anyhow::Result<J> {
    let n: usize = a.get("n", 100_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let s = Arc::new(session(a).await?);
    let ks = "bench_raw";
    fresh_keyspace(&s, ks).await?;
    s.query_unpaged(
        format!(
            "CREATE TABLE {ks}.pointers (region text, cluster text, day date, window int, \
             service text, instance text, bucket int, transaction_id text, generation bigint, \
             attempt int, enqueued_at timestamp, PRIMARY KEY ((region, cluster, day, window, \
             service, instance, bucket), transaction_id))"
        ),
        (),
    )
    .await?;
    let ins = prepared(
        &s,
        format!(
            "INSERT INTO {ks}.pointers (region, cluster, day, window, service, instance, bucket, \
             transaction_id, generation, attempt, enqueued_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
    )
    .await?;
    let row = |i: usize| {
        (
            "r",
            "c",
            CqlDate(1 << 31),
            (i / 50_000) as i32,
            "bench",
            format!("lane-{}", i % 8),
            0i32,
            format!("tx-{i}"),
            i as i64,
            1i32,
            CqlTimestamp(now_ms()),
        )
    };
    let singles: usize = a.get("singles", n.min(20_000))?;
    // The floor of the costs: one request per insert, Cassandra's CPU and the driver's.
    let meter = Meter::from_args(a, 0)?;
    let quiet_s = quiesce(a, "raw").await?;
    eprintln!("raw: {singles} single inserts at concurrency {conc}");
    let before = meter.read().await;
    let (single_ops, single_lat) = closed_loop(singles, conc, |i| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            s.execute_unpaged(&ins, row(i)).await?;
            Ok(())
        }
    })
    .await?;
    let single_cost = meter.per_item(before, singles).await;
    eprintln!("raw: {n} inserts in single-partition unlogged batches of 500");
    let before = meter.read().await;
    let started = Instant::now();
    let batches = n.div_ceil(500);
    closed_loop(batches, 4, |b| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            let mut batch = Batch::new(BatchType::Unlogged);
            let mut values = Vec::new();
            for i in b * 500..((b + 1) * 500).min(n) {
                batch.append_statement(ins.clone());
                let mut r = row(i + 1_000_000);
                r.5 = format!("lane-{}", b % 8);
                r.3 = b as i32;
                values.push(r);
            }
            s.batch(&batch, values).await?;
            Ok(())
        }
    })
    .await?;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();
    let batch_cost = meter.per_item(before, n).await;
    s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), ())
        .await?;
    Ok(J::O(vec![
        ("system", J::S("cassandra-raw".into())),
        ("version", J::S("Cassandra 5.0.8, scylla driver 1.x".into())),
        (
            "guarantees",
            J::S("Write ceiling only: one prepared INSERT per item at LOCAL_QUORUM, no state row, no directory, no delivery".into()),
        ),
        ("n", J::N(n as f64)),
        ("cassandra_quiet_after_s", J::N(quiet_s)),
        ("enqueue_single", single_json(single_ops, single_lat, conc)),
        (
            "enqueue_batch",
            J::O(vec![("ops_per_sec", J::N(batch_ops)), ("batch", J::N(500.0))]),
        ),
        ("drain", J::Null),
        (
            "cost_per_item",
            J::O(vec![
                ("enqueue_single", single_cost),
                ("enqueue_batch", batch_cost),
            ]),
        ),
        ("lateness_ms", J::Null),
        ("retry_ok", J::Null),
        ("peak_rss_mb", J::Null),
    ]))
}

/// The naive design that Rebound's directory avoids (docs/architecture.md, invariant 5,
/// "Tombstones stay bounded"): one table read by status and due time, with a row delete per
/// finished job. Its drain polls the head of the partition, where the deleted rows'
/// tombstones pile up.
async fn naive(a: &Args) -> anyhow::Result<J> {
    let n: usize = a.get("n", 100_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let s = Arc::new(session(a).await?);
    let ks = "bench_naive";
    fresh_keyspace(&s, ks).await?;
    s.query_unpaged(
        format!(
            "CREATE TABLE {ks}.jobs (queue text, status text, due_at timestamp, id text, \
             payload blob, attempt int, PRIMARY KEY ((queue, status), due_at, id))"
        ),
        (),
    )
    .await?;
    let ins = prepared(
        &s,
        format!(
            "INSERT INTO {ks}.jobs (queue, status, due_at, id, payload, attempt) \
             VALUES (?, 'pending', ?, ?, ?, 1)"
        ),
    )
    .await?;
    let poll = prepared(
        &s,
        format!(
            "SELECT due_at, id FROM {ks}.jobs WHERE queue = ? AND status = 'pending' \
             AND due_at <= ? LIMIT 500"
        ),
    )
    .await?;
    let del = prepared(
        &s,
        format!("DELETE FROM {ks}.jobs WHERE queue = ? AND status = 'pending' AND due_at = ? AND id = ?"),
    )
    .await?;
    let singles = n.min(20_000);
    let tombstones_before = tombstone_lines(a);
    let t0 = now_ms();
    let quiet_s = quiesce(a, "naive").await?;
    eprintln!("naive: {singles} single inserts at concurrency {conc}");
    let (single_ops, single_lat) = closed_loop(singles, conc, |i| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            s.execute_unpaged(
                &ins,
                ("q", CqlTimestamp(t0), format!("s-{i}"), vec![b'x'; 64]),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    eprintln!("naive: {n} inserts in unlogged batches of 500");
    let started = Instant::now();
    closed_loop(n.div_ceil(500), 4, |b| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            let mut batch = Batch::new(BatchType::Unlogged);
            let mut values = Vec::new();
            for i in b * 500..((b + 1) * 500).min(n) {
                batch.append_statement(ins.clone());
                values.push(("q", CqlTimestamp(t0), format!("b-{i}"), vec![b'x'; 64]));
            }
            s.batch(&batch, values).await?;
            Ok(())
        }
    })
    .await?;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();

    // Drain: poll the due head, delete each job (the "ack"), until empty or the reads fail.
    eprintln!("naive: draining {} by polling and deleting", n + singles);
    let started = Instant::now();
    let mut drained = 0usize;
    let mut read_failures = 0usize;
    let mut poll_ms = Vec::new();
    let mut aborted = None;
    while drained < n + singles && started.elapsed() < Duration::from_secs(1800) {
        let t = Instant::now();
        let res = s
            .execute_unpaged(&poll, ("q", CqlTimestamp(now_ms())))
            .await;
        poll_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let rows: Vec<(CqlTimestamp, String)> = match res {
            Ok(r) => r.into_rows_result()?.rows()?.collect::<Result<_, _>>()?,
            Err(e) => {
                read_failures += 1;
                eprintln!("naive: poll failed after {drained} drained: {e}");
                if read_failures >= 3 {
                    aborted = Some(format!("{e}"));
                    break;
                }
                continue;
            }
        };
        if rows.is_empty() {
            break;
        }
        let k = rows.len();
        futures::stream::iter(rows)
            .map(|(due, id)| {
                let s = s.clone();
                let del = del.clone();
                async move { s.execute_unpaged(&del, ("q", due, id)).await }
            })
            .buffer_unordered(conc)
            .collect::<Vec<_>>()
            .await;
        drained += k;
    }
    let drain_secs = started.elapsed().as_secs_f64();
    let polls = percentiles(poll_ms.clone());
    let first_polls: Vec<f64> = poll_ms.iter().take(10).copied().collect();
    let last_polls: Vec<f64> = poll_ms.iter().rev().take(10).copied().collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    // Let Cassandra write its warnings before counting them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tombstones = tombstone_json(a, tombstones_before);
    let mut fields = vec![
        ("system", J::S("cassandra-naive".into())),
        ("version", J::S("Cassandra 5.0.8, scylla driver 1.x".into())),
        (
            "guarantees",
            J::S("One table (queue, status) by due_at with a row delete per job, LOCAL_QUORUM; single poller, so no double delivery here; tombstones accumulate at the read head".into()),
        ),
        ("n", J::N(n as f64)),
        ("cassandra_quiet_after_s", J::N(quiet_s)),
        ("enqueue_single", single_json(single_ops, single_lat, conc)),
        (
            "enqueue_batch",
            J::O(vec![("ops_per_sec", J::N(batch_ops)), ("batch", J::N(500.0))]),
        ),
        (
            "drain",
            J::O(vec![
                ("acked_per_sec", J::N(drained as f64 / drain_secs)),
                ("n", J::N(drained as f64)),
            ]),
        ),
        ("lateness_ms", J::Null),
        ("retry_ok", J::B(aborted.is_none() && drained >= n + singles)),
        ("peak_rss_mb", J::Null),
        (
            "poll_ms",
            J::O(vec![
                ("first10_mean", J::N(mean(&first_polls))),
                ("last10_mean", J::N(mean(&last_polls))),
                ("p99", J::N(polls.p99)),
                ("max", J::N(polls.max)),
            ]),
        ),
        ("read_failures", J::N(read_failures as f64)),
        ("aborted", aborted.map_or(J::Null, J::S)),
    ];
    fields.extend(tombstones);
    Ok(J::O(fields))
}

/// CPU seconds the process `pid` has used so far (utime + stime).
/// What one phase of a run costs per item: CPU of Cassandra, of the node and of this harness
/// (µs, from /proc), and the node's Cassandra requests (the count of its
/// `rebound_store_request_duration_seconds` histogram, from its /metrics).
#[derive(Clone)]
struct Meter {
    cassandra: u32,
    node: u32,
    metrics: Option<std::net::SocketAddr>,
}

#[derive(Clone, Copy, Default)]
struct Reading {
    cassandra: f64,
    node: f64,
    client: f64,
    requests: Option<f64>,
}

impl Meter {
    fn from_args(a: &Args, node: u32) -> anyhow::Result<Meter> {
        let metrics = match a.map.get("metrics") {
            Some(m) => Some(m.parse().with_context(|| format!("--metrics {m:?}"))?),
            None => None,
        };
        Ok(Meter {
            cassandra: a.get("cassandra-pid", 0)?,
            node,
            metrics,
        })
    }

    async fn read(&self) -> Reading {
        let cpu = |pid: u32| {
            if pid > 0 {
                cpu_secs(pid).unwrap_or(0.0)
            } else {
                0.0
            }
        };
        let requests = match self.metrics {
            None => None,
            Some(addr) => rebound_integration_tests::http_get(addr, "/metrics")
                .await
                .ok()
                .map(|(_, body)| {
                    body.lines()
                        .filter(|l| l.starts_with("rebound_store_request_duration_seconds_count"))
                        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                        .sum()
                }),
        };
        Reading {
            cassandra: cpu(self.cassandra),
            node: cpu(self.node),
            client: cpu(std::process::id()),
            requests,
        }
    }

    /// The cost per item of what happened since `before`.
    async fn per_item(&self, before: Reading, items: usize) -> J {
        let after = self.read().await;
        let n = items.max(1) as f64;
        let us = |a: f64, b: f64, pid: u32| {
            if pid > 0 {
                J::N((a - b) * 1e6 / n)
            } else {
                J::Null
            }
        };
        J::O(vec![
            (
                "cassandra_cpu_us",
                us(after.cassandra, before.cassandra, self.cassandra),
            ),
            ("node_cpu_us", us(after.node, before.node, self.node)),
            (
                "client_cpu_us",
                J::N((after.client - before.client) * 1e6 / n),
            ),
            (
                "cassandra_requests",
                match (after.requests, before.requests) {
                    (Some(a), Some(b)) => J::N((a - b) / n),
                    _ => J::Null,
                },
            ),
        ])
    }
}

/// Waits (at most 30 s) until Cassandra is quiet: under 0.3 of a core over a second. A schema
/// change (the node's migrations, a baseline's CREATE TABLE) keeps Cassandra busy for several
/// seconds after it returns; every system measured on Cassandra starts after the same wait.
async fn quiesce(a: &Args, what: &str) -> anyhow::Result<f64> {
    let pid: u32 = a.get("cassandra-pid", 0)?;
    let started = Instant::now();
    if pid == 0 {
        return Ok(0.0);
    }
    while started.elapsed() < Duration::from_secs(30) {
        let before = cpu_secs(pid)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if cpu_secs(pid)? - before < 0.3 {
            break;
        }
    }
    let waited = started.elapsed().as_secs_f64();
    eprintln!("{what}: Cassandra quiet after {waited:.1} s");
    Ok(waited)
}

fn cpu_secs(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = &stat[stat.rfind(')').context("bad /proc stat")? + 2..];
    let f: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// What one state-row operation of Rebound's store costs Cassandra, in requests per second
/// and Cassandra CPU per operation, one at a time (each call its own request) and at
/// `--concurrency` (coalesced into `IN` reads and small batches). On a box where Cassandra
/// shares the cores this is what bounds Rebound. Needs `--cassandra-pid PID`.
async fn costs(a: &Args) -> anyhow::Result<J> {
    use rebound_server::{
        config::Config,
        policy::RetryPolicy,
        store::{cassandra, RetryStore, Status, TxState},
    };
    let n: usize = a.get("n", 20_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let pid: u32 = a.get("cassandra-pid", 0)?;
    anyhow::ensure!(pid > 0, "--cassandra-pid is required");
    let config = Config {
        cassandra_contact_points: vec![a.text("cassandra", "127.0.0.1:9042")],
        keyspace: format!("bench_costs_{}", now_ms()),
        ..Config::default()
    };
    let clock: rebound_server::clock::SharedClock = Arc::new(rebound_server::clock::SystemClock);
    rebound_server::node::run_migrations(&config, &clock).await?;
    let opts = rebound_server::node::cassandra_options(&config).expect("cassandra options");
    let connection = cassandra::connect(&opts).await?;
    let store: Arc<dyn RetryStore> =
        Arc::new(cassandra::CassandraStore::new(&connection, &opts).await?);
    let state = |i: usize| TxState {
        service: "bench".into(),
        transaction_id: format!("tx-{i}"),
        status: Status::Scheduled,
        generation: i as i64,
        attempt: 1,
        payload: vec![b'x'; 64],
        attributes: Default::default(),
        policy: RetryPolicy::default(),
        first_enqueued_at_ms: now_ms(),
        last_enqueued_at_ms: now_ms(),
        updated_at_ms: now_ms(),
        due_at_ms: now_ms(),
        last_error: String::new(),
        location: None,
        enqueue_count: 1,
        delivery_count: 0,
        legacy_columns: false,
        base_generation: 0,
        cancelled_generation: None,
        succeeded_generation: None,
        trace: Default::default(),
        written: Default::default(),
    };
    let mut fields = Vec::new();
    for (label, c) in [("one_at_a_time", 1usize), ("concurrent", conc)] {
        let base = if c == 1 { 0 } else { n };
        let mut ops = Vec::new();
        for op in ["write", "read_hit", "read_miss"] {
            let cpu0 = cpu_secs(pid)?;
            let (rate, _) = closed_loop(n, c, |i| {
                let store = store.clone();
                let st = state(base + i);
                async move {
                    match op {
                        "write" => store.put_state(&st, None).await?,
                        "read_hit" => {
                            let got = store.get_state("bench", &st.transaction_id).await?;
                            anyhow::ensure!(got.is_some_and(|g| g.generation == st.generation));
                        }
                        _ => {
                            let missing = format!("missing-{}", st.transaction_id);
                            anyhow::ensure!(store.get_state("bench", &missing).await?.is_none());
                        }
                    }
                    Ok(())
                }
            })
            .await?;
            let us = (cpu_secs(pid)? - cpu0) * 1e6 / n as f64;
            eprintln!("costs: {label} {op}: {rate:.0}/s, Cassandra {us:.0} us CPU each");
            ops.push((
                op,
                J::O(vec![
                    ("ops_per_sec", J::N(rate)),
                    ("cassandra_cpu_us", J::N(us)),
                ]),
            ));
        }
        fields.push((label, J::O(ops)));
    }
    // A session of its own: the store's connection carries only its prepared statements.
    session(a)
        .await?
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", config.keyspace), ())
        .await?;
    fields.push(("n", J::N(n as f64)));
    fields.push(("concurrency", J::N(conc as f64)));
    Ok(J::O(fields))
}

/// An OTLP trace receiver that counts and discards what it is sent (`scripts/bench
/// --tracing`: the collector of the traced runs); prints the count every 5 s to stderr.
async fn otlp_sink(a: &Args) -> anyhow::Result<()> {
    use opentelemetry_proto::tonic::collector::trace::v1::{
        trace_service_server::{TraceService, TraceServiceServer},
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    #[derive(Clone, Default)]
    struct Sink(Arc<std::sync::atomic::AtomicU64>);
    #[tonic::async_trait]
    impl TraceService for Sink {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let n: usize = request
                .into_inner()
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum();
            self.0
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            }))
        }
    }
    let listen: std::net::SocketAddr = a.text("listen", "127.0.0.1:4317").parse()?;
    let sink = Sink::default();
    let count = sink.0.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            eprintln!(
                "otlp-sink: {} spans",
                count.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
    });
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve(listen)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first().cloned() else {
        bail!("usage: bench rebound|raw|naive [--key value]...");
    };
    let mut map = HashMap::new();
    let mut it = argv.into_iter().skip(1);
    while let Some(k) = it.next() {
        let Some(k) = k.strip_prefix("--") else {
            bail!("expected --key value, got {k:?}");
        };
        let v = it.next().with_context(|| format!("--{k} needs a value"))?;
        map.insert(k.to_string(), v);
    }
    let a = Args { map };
    let out = a.text("out", &format!("target/bench/{cmd}.json"));
    let result = match cmd.as_str() {
        "rebound" => rebound(&a).await?,
        "otlp-sink" => return otlp_sink(&a).await,
        "raw" => raw(&a).await?,
        "costs" => costs(&a).await?,
        "ring" => ring::ring(&a).await?,
        "naive" => naive(&a).await?,
        "cleanup" => {
            // Drops the keyspaces earlier runs left behind (`--prefix`, default "bench_").
            let s = session(&a).await?;
            let prefix = a.text("prefix", "bench_");
            let rows = s
                .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces", ())
                .await?
                .into_rows_result()?;
            let names: Vec<String> = rows
                .rows::<(String,)>()?
                .filter_map(|r| r.ok().map(|r| r.0))
                .filter(|k| k.starts_with(&prefix))
                .collect();
            for k in &names {
                s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {k}"), ())
                    .await?;
            }
            eprintln!("dropped {} keyspaces", names.len());
            return Ok(());
        }
        other => bail!("unknown benchmark {other:?}"),
    };
    let text = result.render();
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, format!("{text}\n")).with_context(|| format!("writing {out}"))?;
    println!("{text}");
    Ok(())
}
