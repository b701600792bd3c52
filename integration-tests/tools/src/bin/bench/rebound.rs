//! `bench rebound`: Rebound through its gRPC API (single and batch enqueue, the drain, lateness).

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
    let started = Instant::now();
    let failed = enqueue_batches(&client, "bench", "b", n).await;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();
    let batch_cost = meter.per_item(before, n).await;
    if failed > 0 {
        bail!("{failed} batch enqueues failed");
    }
    let hold_rss = if pid > 0 { vm_hwm_mb(pid) } else { None };
    // The W+1 rule (docs/architecture.md, invariant 1): a retry due now goes into the window
    // after the current one, which is read once it has ended plus the skew margin. So the
    // last retry enqueued above cannot be delivered before then, however fast the node is.
    let window_seconds: u32 = a.get("window-seconds", 1)?;
    if window_seconds == 0 || 86_400 % window_seconds != 0 {
        bail!("--window-seconds must divide 86400");
    }
    let grid = WindowGrid::new(window_seconds);
    let margin_ms: i64 = a.get("skew-margin-ms", 500)?;
    let now = now_ms();
    let last_readable_ms = grid.end_ms(grid.target(now, now)) + margin_ms;

    eprintln!(
        "rebound: draining {} with 4 no-op streams x 500",
        n + singles
    );
    let acked = Arc::new(AtomicUsize::new(0));
    let before = meter.read().await;
    let w1_floor_s = (last_readable_ms - now_ms()).max(0) as f64 / 1000.0;
    let mut tasks = executors(&ch, "bench", 4, 500, acked.clone(), None);
    tasks.extend(executors(&ch, "bench-single", 2, 500, acked.clone(), None));
    // How many were acked by the time the last window became readable.
    let at_floor = {
        let acked = acked.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(w1_floor_s)).await;
            acked.load(Ordering::Relaxed)
        })
    };
    let drain_secs = wait_for(&acked, n + singles, Duration::from_secs(3600), "acked").await;
    let acked_at_floor = at_floor.await.unwrap_or(0);
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
                ("seconds", J::N(drain_secs)),
                // From the drain's start to when the window of the last retry enqueued became
                // readable: no drain of this backlog could take less.
                ("w1_floor_s", J::N(w1_floor_s)),
                ("acked_at_w1_floor", J::N(acked_at_floor as f64)),
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
