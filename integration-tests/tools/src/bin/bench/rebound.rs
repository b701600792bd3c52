//! `bench rebound`: Rebound through its gRPC API (single and batch enqueue, the drain of
//! retries all due at one instant, the steady phase); `bench rebound-steady`: the steady phase
//! alone (the suite runs it on a node at the default window size).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use rebound_engine::window::WindowGrid;
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use tonic::transport::Channel;

use super::*;

pub(crate) async fn rebound(a: &Args) -> anyhow::Result<J> {
    let addr = a.text("addr", "http://127.0.0.1:50090");
    let n: usize = a.get("n", 100_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    // The single-enqueue phase: at most 20,000 unless `--singles` asks for more (a comparison
    // of two builds wants a phase long enough to average Cassandra's background work).
    let singles: usize = a.get("singles", n.min(20_000))?;
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
    // Every retry of (a) and (b) falls due at one instant T, a few seconds after the inserts
    // are expected to end (as the peers' drains do: bench/README.md, phase (c)); the drain's
    // clock starts at T.
    let lead_ms: i64 = a.get("lead-ms", 3_000)?;
    let estimate_s = singles as f64 / 3_000.0 + n as f64 / 15_000.0;
    let t_ms = now_ms() + (1.5 * estimate_s * 1000.0) as i64 + lead_ms;
    eprintln!("rebound: {singles} single enqueues at concurrency {conc}");
    let before = meter.read().await;
    let (single_ops, single_lat) = closed_loop(singles, conc, |i| {
        let mut c = client.clone();
        async move {
            let mut r = enqueue_req("bench-single", format!("s-{i}"), Some(t_ms));
            r.payload = t_ms.to_string().into_bytes();
            c.enqueue_retry(r).await?;
            Ok(())
        }
    })
    .await?;
    let single_cost = meter.per_item(before, singles).await;
    eprintln!("rebound: {n} enqueues in batches of 500");
    let before = meter.read().await;
    let started = Instant::now();
    let failed = enqueue_batches(&client, "bench", "b", n, Some(t_ms)).await;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();
    let batch_cost = meter.per_item(before, n).await;
    if failed > 0 {
        bail!("{failed} batch enqueues failed");
    }
    let hold_rss = if pid > 0 { vm_hwm_mb(pid) } else { None };
    // The operator's first look at the backlog (ListRetries): the first page of 100, and a
    // page whose filter matches nothing, which reads the most one call may (5,000 pointers).
    let listing = first_pages(&client, "bench", n + singles).await?;
    let inserts_end_ms = now_ms();
    if inserts_end_ms > t_ms - 1_000 {
        eprintln!(
            "rebound: the inserts ended {} ms before T (wanted at least 1,000)",
            t_ms - inserts_end_ms
        );
    }
    // The window of T is read by the scan once it has ended plus the skew margin
    // (docs/architecture.md, invariant 1); before then, only the timer delivers (from memory,
    // at most its entries).
    let window_seconds: u32 = a.get("window-seconds", 1)?;
    if window_seconds == 0 || 86_400 % window_seconds != 0 {
        bail!("--window-seconds must divide 86400");
    }
    let grid = WindowGrid::new(window_seconds);
    let margin_ms: i64 = a.get("skew-margin-ms", 500)?;
    let readable_ms = grid.end_ms(grid.target(t_ms, inserts_end_ms)) + margin_ms;

    let acked = Arc::new(AtomicUsize::new(0));
    let drain_late = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = executors(
        &ch,
        "bench",
        4,
        500,
        acked.clone(),
        Some(drain_late.clone()),
    );
    tokio::time::sleep(Duration::from_millis((t_ms - now_ms()).max(0) as u64)).await;
    eprintln!("rebound: draining {n}, all due at T (now), with 4 no-op streams x 500");
    let before = meter.read().await;
    let ack_calls_before = ACK_CALLS.load(Ordering::Relaxed);
    let w1_floor_s = (readable_ms - t_ms).max(0) as f64 / 1000.0;
    // How many were acked by the time the window of T became readable.
    let at_floor = {
        let acked = acked.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(w1_floor_s)).await;
            acked.load(Ordering::Relaxed)
        })
    };
    let drain_secs = wait_for(&acked, n, Duration::from_secs(3600), "acked").await;
    let acked_at_floor = at_floor.await.unwrap_or(0);
    let drained = acked.load(Ordering::Relaxed);
    let drain_ops = drained as f64 / drain_secs;
    let drain_cost = meter.per_item(before, drained).await;
    let ack_calls = ACK_CALLS.load(Ordering::Relaxed) - ack_calls_before;
    let late = percentiles(drain_late.lock().expect("lateness").clone());

    eprintln!("rebound: the drain is done; the single enqueues' retries are acked untimed");
    let singles_acked = Arc::new(AtomicUsize::new(0));
    tasks.extend(executors(
        &ch,
        "bench-single",
        2,
        500,
        singles_acked.clone(),
        None,
    ));
    wait_for(
        &singles_acked,
        singles,
        Duration::from_secs(600),
        "single enqueues acked",
    )
    .await;

    let steady = steady_phase(a, &client, &ch, &meter, "bench-steady", &mut tasks).await?;
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
                ("seconds", J::N(drain_secs)),
                (
                    "acks_per_call",
                    J::N(drained as f64 / ack_calls.max(1) as f64),
                ),
                // From T to when T's window became readable by the scan (the field keeps its
                // name from the W+1 days); what was acked by then came from the timer.
                ("w1_floor_s", J::N(w1_floor_s)),
                ("acked_at_w1_floor", J::N(acked_at_floor as f64)),
                (
                    "inserts_end_before_t_s",
                    J::N((t_ms - inserts_end_ms) as f64 / 1000.0),
                ),
            ]),
        ),
        (
            "cost_per_item",
            J::O(vec![
                ("enqueue_single", single_cost),
                ("enqueue_batch", batch_cost),
                ("delivery_cycle", drain_cost),
                ("steady", steady.cost.clone()),
            ]),
        ),
        ("lateness_ms", lateness_json(late)),
        ("list_first_page", listing),
        ("steady", steady.json()),
        ("retry_ok", J::B(drained >= n && singles_acked.load(Ordering::Relaxed) >= singles)),
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

/// How long the first page of `service`'s scheduled retries takes to list with a backlog of
/// `backlog` (`ListRetries`, page size 100), unfiltered and with a filter that matches nothing;
/// the median of 5 calls each.
async fn first_pages(
    client: &RetryServiceClient<Channel>,
    service: &str,
    backlog: usize,
) -> anyhow::Result<J> {
    let mut out = vec![("backlog", J::N(backlog as f64))];
    for (name, error_contains) in [("page_ms", ""), ("nothing_matches_ms", "no such error")] {
        let mut times = Vec::new();
        let mut rows = 0;
        for _ in 0..5 {
            let started = Instant::now();
            let r = client
                .clone()
                .list_retries(pb::ListRetriesRequest {
                    service: service.to_string(),
                    error_contains: error_contains.to_string(),
                    page_size: 100,
                    ..Default::default()
                })
                .await?
                .into_inner();
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            rows = r.retries.len();
        }
        times.sort_by(f64::total_cmp);
        eprintln!(
            "rebound: ListRetries first page ({name}) {:.1} ms median, {rows} rows",
            times[2]
        );
        out.push((name, J::N(times[2])));
    }
    Ok(J::O(out))
}

/// The steady phase's result: `steady` of the JSON, with its cost per item.
pub(crate) struct Steady {
    rate: f64,
    seconds: f64,
    sent: usize,
    delivered: usize,
    lateness: Vec<f64>,
    cost: J,
}

impl Steady {
    fn json(&self) -> J {
        let early = self.lateness.iter().filter(|l| **l < 0.0).count();
        let min = self.lateness.iter().copied().fold(f64::INFINITY, f64::min);
        let p = percentiles(self.lateness.clone());
        J::O(vec![
            ("rate_offered", J::N(self.rate)),
            ("seconds", J::N(self.seconds)),
            ("n", J::N(self.sent as f64)),
            ("delivered", J::N(self.delivered as f64)),
            ("delay_s", J::A(vec![J::N(1.0), J::N(5.0)])),
            (
                "lateness_ms",
                J::O(vec![
                    ("p50", J::N(p.p50)),
                    ("p99", J::N(p.p99)),
                    ("max", J::N(p.max)),
                    ("min", J::N(min)),
                ]),
            ),
            ("early", J::N(early as f64)),
            ("cost_per_item", self.cost.clone()),
        ])
    }
}

/// The steady phase (bench/README.md): `--steady-rate` single enqueues a second (500) for
/// `--steady-seconds` (30), each due at the moment it is sent plus a delay drawn evenly from
/// 1-5 s, delivered to two no-op streams; lateness from each retry's requested due time.
pub(crate) async fn steady_phase(
    a: &Args,
    client: &RetryServiceClient<Channel>,
    ch: &Channel,
    meter: &Meter,
    service: &str,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> anyhow::Result<Steady> {
    let rate: f64 = a.get("steady-rate", 500.0)?;
    let seconds: f64 = a.get("steady-seconds", 30.0)?;
    let wait_s: u64 = a.get("steady-wait-seconds", 180)?;
    if !(rate > 0.0 && seconds > 0.0) {
        bail!("--steady-rate and --steady-seconds must be above 0");
    }
    let total = (rate * seconds).round() as usize;
    eprintln!("rebound: steady phase, {total} single enqueues at {rate}/s due 1-5 s later");
    let acked = Arc::new(AtomicUsize::new(0));
    let lateness = Arc::new(Mutex::new(Vec::new()));
    tasks.extend(executors(
        ch,
        service,
        2,
        500,
        acked.clone(),
        Some(lateness.clone()),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = meter.read().await;
    let started = Instant::now();
    // xorshift64*, seed 1: the same delays in every run.
    let mut x: u64 = 1;
    let mut sent = tokio::task::JoinSet::new();
    for i in 0..total {
        let at = started + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(at.into()).await;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let delay_ms = 1_000 + (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % 4_001;
        let due = now_ms() + delay_ms as i64;
        let mut r = enqueue_req(service, format!("st-{i}"), Some(due));
        r.payload = due.to_string().into_bytes();
        let mut c = client.clone();
        sent.spawn(async move { c.enqueue_retry(r).await.is_ok() });
    }
    let mut accepted = 0;
    while let Some(ok) = sent.join_next().await {
        accepted += usize::from(ok.unwrap_or(false));
    }
    if accepted < total {
        eprintln!("rebound: {} steady enqueues failed", total - accepted);
    }
    wait_for(
        &acked,
        accepted,
        Duration::from_secs(wait_s),
        "steady acked",
    )
    .await;
    let delivered = acked.load(Ordering::Relaxed);
    let cost = meter.per_item(before, total).await;
    let lateness = lateness.lock().expect("lateness").clone();
    Ok(Steady {
        rate,
        seconds,
        sent: total,
        delivered,
        lateness,
        cost,
    })
}

/// `bench rebound-steady`: the steady phase alone, on a node of its own.
pub(crate) async fn rebound_steady(a: &Args) -> anyhow::Result<J> {
    let addr = a.text("addr", "http://127.0.0.1:50090");
    let pid: u32 = a.get("pid", 0)?;
    let window_seconds: u32 = a.get("window-seconds", 60)?;
    let margin_ms: i64 = a.get("skew-margin-ms", 2_000)?;
    let ch = Channel::from_shared(addr.clone())?
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let client = RetryServiceClient::new(ch.clone());
    let meter = Meter::from_args(a, pid)?;
    quiesce(a, "rebound").await?;
    let mut tasks = Vec::new();
    let steady = steady_phase(a, &client, &ch, &meter, "bench-steady", &mut tasks).await?;
    for t in &tasks {
        t.abort();
    }
    Ok(J::O(vec![
        ("system", J::S(format!("rebound-{window_seconds}s"))),
        ("version", J::S(env!("CARGO_PKG_VERSION").into())),
        (
            "config",
            J::O(vec![
                ("window_seconds", J::N(window_seconds as f64)),
                ("skew_margin_ms", J::N(margin_ms as f64)),
            ]),
        ),
        ("cost_per_item", J::O(vec![("steady", steady.cost.clone())])),
        ("steady", steady.json()),
    ]))
}
