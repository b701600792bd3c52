//! Drain benchmark: enqueue a backlog into a running node, then drain it with no-op
//! executors and report enqueue and drain rates. `scripts/bench-drain` starts a release node
//! and samples its RSS while this runs.
//!
//! usage: drain_bench [addr] [items] [streams] [max_in_flight]

use std::time::{Duration, Instant};

use futures::StreamExt;
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::transport::Channel;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let items: usize = args.get(2).map_or(Ok(100_000), |s| s.parse())?;
    let streams: usize = args.get(3).map_or(Ok(4), |s| s.parse())?;
    let max_in_flight: u32 = args.get(4).map_or(Ok(500), |s| s.parse())?;
    let service = format!("bench{}", std::process::id());
    let ch = Channel::from_shared(addr.clone())?.connect().await?;

    // Enqueue in batches of 500, 4 batches in flight.
    let started = Instant::now();
    let batches: Vec<Vec<pb::EnqueueRetryRequest>> = (0..items)
        .collect::<Vec<_>>()
        .chunks(500)
        .map(|c| {
            c.iter()
                .map(|i| pb::EnqueueRetryRequest {
                    service: service.clone(),
                    transaction_id: format!("tx-{i}"),
                    payload: vec![b'x'; 64],
                    attempt: 1,
                    schedule: Some(pb::enqueue_retry_request::Schedule::Delay(
                        prost_types::Duration::default(),
                    )),
                    ..Default::default()
                })
                .collect()
        })
        .collect();
    let errors: usize = futures::stream::iter(batches)
        .map(|requests| {
            let mut c = RetryServiceClient::new(ch.clone());
            async move {
                let r = c
                    .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                    .await
                    .expect("batch")
                    .into_inner();
                r.results
                    .iter()
                    .filter(|r| {
                        !matches!(
                            r.result,
                            Some(pb::enqueue_retry_result::Result::Response(_))
                        )
                    })
                    .count()
            }
        })
        .buffer_unordered(4)
        .fold(0, |a, b| async move { a + b })
        .await;
    let enqueue_secs = started.elapsed().as_secs_f64();
    println!(
        "enqueued {items} in {enqueue_secs:.1}s: {:.0}/s ({errors} errors)",
        items as f64 / enqueue_secs
    );

    // Drain with no-op executors: ack SUCCEEDED at once.
    let started = Instant::now();
    let mut tasks = Vec::new();
    let per_stream_target = items;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let first_at: std::sync::Arc<std::sync::OnceLock<Instant>> = Default::default();
    for s in 0..streams {
        let first_at = first_at.clone();
        let ch = ch.clone();
        let service = service.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut ex = ExecutorServiceClient::new(ch.clone());
            let mut sub = ex
                .subscribe(pb::SubscribeRequest {
                    service,
                    executor_id: format!("bench-{s}"),
                    max_in_flight,
                })
                .await
                .expect("subscribe")
                .into_inner();
            while done.load(std::sync::atomic::Ordering::Relaxed) < per_stream_target {
                let d = match tokio::time::timeout(Duration::from_secs(30), sub.message()).await {
                    Ok(Ok(Some(d))) => d,
                    _ => break,
                };
                first_at.get_or_init(Instant::now);
                let mut ex = ex.clone();
                let done = done.clone();
                tokio::spawn(async move {
                    if ex
                        .ack(pb::AckRequest {
                            delivery_id: d.delivery_id,
                            outcome: pb::AckOutcome::Succeeded as i32,
                            retry_after: None,
                            error: String::new(),
                            ..Default::default()
                        })
                        .await
                        .is_ok()
                    {
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        }));
    }
    let mut last_report = Instant::now();
    while done.load(std::sync::atomic::Ordering::Relaxed) < items {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if last_report.elapsed() > Duration::from_secs(5) {
            println!(
                "  acked {}",
                done.load(std::sync::atomic::Ordering::Relaxed)
            );
            last_report = Instant::now();
        }
        if started.elapsed() > Duration::from_secs(1800) {
            break;
        }
    }
    for t in tasks {
        t.abort();
    }
    let acked = done.load(std::sync::atomic::Ordering::Relaxed);
    let from_first = first_at.get().map_or(0.0, |f| f.elapsed().as_secs_f64());
    println!(
        "drained {acked} in {:.1}s after subscribing ({:.1}s after the first delivery): {:.0} acked/s",
        started.elapsed().as_secs_f64(),
        from_first,
        acked as f64 / from_first.max(0.001)
    );
    Ok(())
}
