//! What every benchmark of `bench` shares: percentiles, the hand-written JSON of the results,
//! the closed loop of single calls, Cassandra's warning counts, memory, requests, executors.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::transport::Channel;

use super::*;

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// p50, p99 and max of a sample, in the sample's unit.
pub(crate) fn percentiles(mut v: Vec<f64>) -> serde_like::Pct {
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
pub(crate) mod serde_like {
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Pct {
        pub p50: f64,
        pub p99: f64,
        pub max: f64,
    }

    #[derive(Clone)]
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
pub(crate) use serde_like::J;

pub(crate) fn single_json(ops: f64, lat: serde_like::Pct, concurrency: usize) -> J {
    J::O(vec![
        ("ops_per_sec", J::N(ops)),
        ("p50_ms", J::N(lat.p50)),
        ("p99_ms", J::N(lat.p99)),
        ("concurrency", J::N(concurrency as f64)),
    ])
}

pub(crate) fn lateness_json(l: serde_like::Pct) -> J {
    J::O(vec![
        ("p50", J::N(l.p50)),
        ("p99", J::N(l.p99)),
        ("max", J::N(l.max)),
    ])
}

/// Runs `total` calls of `f` with `concurrency` at once; returns (ops/s, latency ms).
pub(crate) async fn closed_loop<F, Fut>(
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
pub(crate) fn tombstone_lines(a: &Args) -> (usize, usize) {
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

pub(crate) fn tombstone_json(a: &Args, before: (usize, usize)) -> Vec<(&'static str, J)> {
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

pub(crate) fn vm_hwm_mb(pid: u32) -> Option<f64> {
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

pub(crate) fn enqueue_req(
    service: &str,
    id: String,
    due_ms: Option<i64>,
) -> pb::EnqueueRetryRequest {
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

/// Enqueues `n` retries of `service` (`{prefix}-{i}`), due now or at `due_ms` (which their
/// payload then carries, for the executors' lateness), in batches of 500, 4 batch calls at
/// once; returns how many were not accepted.
pub(crate) async fn enqueue_batches(
    client: &RetryServiceClient<Channel>,
    service: &str,
    prefix: &str,
    n: usize,
    due_ms: Option<i64>,
) -> usize {
    let batches: Vec<usize> = (0..n).step_by(500).collect();
    let failed = AtomicUsize::new(0);
    futures::stream::iter(batches)
        .map(|from| {
            let mut c = client.clone();
            let failed = &failed;
            async move {
                let requests = (from..(from + 500).min(n))
                    .map(|i| {
                        let mut r = enqueue_req(service, format!("{prefix}-{i}"), due_ms);
                        if let Some(due) = due_ms {
                            r.payload = due.to_string().into_bytes();
                        }
                        r
                    })
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
    failed.load(Ordering::Relaxed)
}

/// No-op executors on `streams` streams of `service`: every delivery is acked SUCCEEDED at
/// once. Each delivery's lateness (now - requested due time, carried in the payload when
/// `late` is set) is recorded.
pub(crate) fn executors(
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

/// AckBatch calls made so far by every stream of the harness (acks per call is how well the
/// deliveries came in bursts: each call costs the executor, the node and Cassandra the same).
pub(crate) static ACK_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Sends the queued acks of one stream as AckBatch calls and counts those answered OK.
pub(crate) async fn ack_batches(
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
        ACK_CALLS.fetch_add(1, Ordering::Relaxed);
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

pub(crate) async fn wait_for(
    counter: &AtomicUsize,
    target: usize,
    limit: Duration,
    what: &str,
) -> f64 {
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
