//! `bench ring` (issue 17, cost as the work grows): what the lease ring and the scan cost
//! per node, on `k` running nodes that share one keyspace (started by `scripts/bench --ring`).
//!
//! 1. Waits until the nodes' `rebound_ring_slots_held` add up to `--slots`.
//! 2. **At rest** (`--rest-seconds`, no retries): each node's lease LWTs per second (its
//!    `INSERT`/`UPDATE ring_leases` requests) and its directory reads.
//! 3. **Drain** (`--n` retries due at one moment, enqueued round-robin through every node and
//!    drained by no-op executors subscribed to every node): each node's deliveries and its
//!    scan reads by tier, and the share of the cluster's reads it made.
//!
//! Everything per node comes from that node's own `/metrics` (request counts of
//! `rebound_store_request_duration_seconds` by operation, `rebound_deliveries_total`).

use std::{
    collections::HashMap,
    sync::{atomic::AtomicUsize, Arc},
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use tonic::transport::Channel;

use super::{enqueue_req, executors, now_ms, wait_for, Args, J};

/// One scrape of a node's counters: request counts by store operation, and deliveries.
#[derive(Default, Clone)]
struct Counters {
    requests: HashMap<String, f64>,
    deliveries: f64,
    slots_held: f64,
}

async fn scrape(addr: std::net::SocketAddr) -> anyhow::Result<Counters> {
    let (status, body) = rebound_integration_tests::http_get(addr, "/metrics")
        .await
        .with_context(|| format!("scraping {addr}"))?;
    anyhow::ensure!(status == 200, "{addr}/metrics answered {status}");
    let mut c = Counters::default();
    for line in body.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if let Some(labels) = series.strip_prefix("rebound_store_request_duration_seconds_count{") {
            if let Some(op) = labels
                .split("operation=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
            {
                *c.requests.entry(op.to_string()).or_default() += value;
            }
        } else if series.starts_with("rebound_deliveries_total") {
            c.deliveries += value;
        } else if series == "rebound_ring_slots_held" {
            c.slots_held = value;
        }
    }
    Ok(c)
}

async fn scrape_all(metrics: &[std::net::SocketAddr]) -> anyhow::Result<Vec<Counters>> {
    let mut out = Vec::with_capacity(metrics.len());
    for m in metrics {
        out.push(scrape(*m).await?);
    }
    Ok(out)
}

/// The requests of `ops` (operation names such as `SELECT instances_by_window`) made between
/// two scrapes.
fn delta(before: &Counters, after: &Counters, ops: &[&str]) -> f64 {
    ops.iter()
        .map(|op| {
            after.requests.get(*op).copied().unwrap_or(0.0)
                - before.requests.get(*op).copied().unwrap_or(0.0)
        })
        .sum()
}

const LWT: &[&str] = &["INSERT ring_leases", "UPDATE ring_leases"];
const TIERS_1_2: &[&str] = &[
    "SELECT days_by_year",
    "SELECT windows_by_day",
    "SELECT window_low_water",
];
const TIER_3: &[&str] = &["SELECT instances_by_window"];
const TIERS_4_5: &[&str] = &[
    "SELECT buckets_by_instance",
    "SELECT retry_transactions_by_bucket",
];
const STATE_READS: &[&str] = &["SELECT transactions"];

/// What one node did between two scrapes, over `seconds`.
fn node_json(i: usize, before: &Counters, after: &Counters, seconds: f64, totals: &[f64]) -> J {
    let share = |ops: &[&str], total: f64| {
        if total > 0.0 {
            J::N(delta(before, after, ops) / total)
        } else {
            J::Null
        }
    };
    J::O(vec![
        ("node", J::N(i as f64)),
        ("slots_held", J::N(after.slots_held)),
        ("lwt_per_sec", J::N(delta(before, after, LWT) / seconds)),
        ("tier12_reads", J::N(delta(before, after, TIERS_1_2))),
        ("tier3_reads", J::N(delta(before, after, TIER_3))),
        ("tier45_reads", J::N(delta(before, after, TIERS_4_5))),
        ("state_reads", J::N(delta(before, after, STATE_READS))),
        ("deliveries", J::N(after.deliveries - before.deliveries)),
        ("tier3_share", share(TIER_3, totals[0])),
        ("tier45_share", share(TIERS_4_5, totals[1])),
        (
            "delivery_share",
            if totals[2] > 0.0 {
                J::N((after.deliveries - before.deliveries) / totals[2])
            } else {
                J::Null
            },
        ),
    ])
}

fn phase_json(before: &[Counters], after: &[Counters], seconds: f64) -> J {
    let sum = |f: &dyn Fn(&Counters, &Counters) -> f64| -> f64 {
        before.iter().zip(after).map(|(b, a)| f(b, a)).sum()
    };
    let totals = [
        sum(&|b, a| delta(b, a, TIER_3)),
        sum(&|b, a| delta(b, a, TIERS_4_5)),
        sum(&|b, a| a.deliveries - b.deliveries),
    ];
    let lwt = sum(&|b, a| delta(b, a, LWT));
    J::O(vec![
        ("seconds", J::N(seconds)),
        ("lwt_per_sec", J::N(lwt / seconds)),
        ("tier3_reads", J::N(totals[0])),
        ("tier45_reads", J::N(totals[1])),
        ("deliveries", J::N(totals[2])),
        (
            "nodes",
            J::A(
                before
                    .iter()
                    .zip(after)
                    .enumerate()
                    .map(|(i, (b, a))| node_json(i, b, a, seconds, &totals))
                    .collect(),
            ),
        ),
    ])
}

pub async fn ring(a: &Args) -> anyhow::Result<J> {
    let addrs: Vec<String> = a
        .text("addrs", "http://127.0.0.1:50090")
        .split(',')
        .map(str::to_string)
        .collect();
    let metrics: Vec<std::net::SocketAddr> = a
        .text("metrics", "127.0.0.1:9470")
        .split(',')
        .map(|m| m.parse().with_context(|| format!("--metrics {m:?}")))
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(addrs.len() == metrics.len(), "one --metrics per --addrs");
    let slots: f64 = a.get("slots", 64.0)?;
    let lease_ttl_ms: f64 = a.get("lease-ttl-ms", 10_000.0)?;
    let rest: f64 = a.get("rest-seconds", 20.0)?;
    let n: usize = a.get("n", 20_000)?;

    // 1. The ring covered, and each node at its share (no slot moving any more).
    let started = Instant::now();
    let fair = (slots / addrs.len() as f64).ceil();
    loop {
        let c = scrape_all(&metrics).await?;
        let held: f64 = c.iter().map(|c| c.slots_held).sum();
        if held >= slots && c.iter().all(|c| c.slots_held <= fair) {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the ring did not settle: {held} of {slots} slots held"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settled_s = started.elapsed().as_secs_f64();
    eprintln!(
        "ring of {} nodes settled after {settled_s:.1} s",
        addrs.len()
    );

    // 2. At rest.
    let before = scrape_all(&metrics).await?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(rest)).await;
    let after = scrape_all(&metrics).await?;
    let at_rest = phase_json(&before, &after, t0.elapsed().as_secs_f64());

    // 3. A drain through every node.
    let drain = if n == 0 {
        J::Null
    } else {
        let mut channels = Vec::new();
        for addr in &addrs {
            channels.push(
                Channel::from_shared(addr.clone())?
                    .connect()
                    .await
                    .with_context(|| format!("connecting to {addr}"))?,
            );
        }
        let service = format!("ring{}", now_ms());
        let acked = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = channels
            .iter()
            .flat_map(|ch| executors(ch, &service, 2, 500, acked.clone(), None))
            .collect();
        let before = scrape_all(&metrics).await?;
        let t0 = Instant::now();
        let due = now_ms() + 5_000;
        let batches: Vec<(usize, Vec<pb::EnqueueRetryRequest>)> = (0..n)
            .collect::<Vec<_>>()
            .chunks(500)
            .enumerate()
            .map(|(b, c)| {
                let items = c
                    .iter()
                    .map(|i| enqueue_req(&service, format!("tx-{i}"), Some(due)))
                    .collect();
                (b % channels.len(), items)
            })
            .collect();
        let failed: usize = futures::stream::iter(batches)
            .map(|(node, requests)| {
                let mut c = RetryServiceClient::new(channels[node].clone())
                    .max_encoding_message_size(64 << 20);
                async move {
                    match c
                        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                        .await
                    {
                        Ok(r) => r
                            .into_inner()
                            .results
                            .iter()
                            .filter(|r| {
                                !matches!(
                                    r.result,
                                    Some(pb::enqueue_retry_result::Result::Response(_))
                                )
                            })
                            .count(),
                        Err(_) => 500,
                    }
                }
            })
            .buffer_unordered(4)
            .fold(0, |a, b| async move { a + b })
            .await;
        anyhow::ensure!(failed == 0, "{failed} enqueues failed");
        wait_for(&acked, n, Duration::from_secs(300), "ring drain").await;
        // The last acks' bucket deletes and reads settle before the second scrape.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = scrape_all(&metrics).await?;
        let seconds = t0.elapsed().as_secs_f64();
        for t in tasks {
            t.abort();
        }
        let done = acked.load(std::sync::atomic::Ordering::Relaxed);
        anyhow::ensure!(done >= n, "only {done} of {n} acked");
        phase_json(&before, &after, seconds)
    };

    Ok(J::O(vec![
        ("system", J::S("rebound-ring".into())),
        ("nodes", J::N(addrs.len() as f64)),
        ("slots", J::N(slots)),
        ("lease_ttl_ms", J::N(lease_ttl_ms)),
        (
            "lwt_per_sec_expected",
            J::N((slots + 1.0) / (lease_ttl_ms / 3_000.0)),
        ),
        ("settled_seconds", J::N(settled_s)),
        ("n", J::N(n as f64)),
        ("at_rest", at_rest),
        ("drain", drain),
    ]))
}
