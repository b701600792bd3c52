//! `bench rebound-push`: push delivery's drain (docs/push.md), beside the stream drain of
//! `bench rebound`. A node of its own (started by `scripts/bench` with
//! `REBOUND_PUSH_ALLOW=127.0.0.1`), after the same warm-up and Cassandra settling:
//!
//! 1. A receiver in this process (127.0.0.1, a free port) answers every POST 200 at once and
//!    only counts it: no per-request record, so its cost stays small (it is in
//!    `client_cpu_us`).
//! 2. The service `bench-push` is paused and given a push target at the receiver (one signing
//!    secret; `--max-concurrent` requests in flight, 500 by default as one executor stream of
//!    the stream drain has: a target's own default, 64, coalesces fewer acks); then
//!    `--items` retries (by default as many as the stream drain of `bench rebound --n N`
//!    drains: N in batches and min(N, 20,000) single) are enqueued due now, in batches of 500.
//! 3. The drain is timed from the resume to the node's last SUCCEEDED ack of the service
//!    (`rebound_acks_total{outcome="succeeded"}` on `--metrics`, scraped only once the
//!    receiver has answered as many), as the stream drain is timed from its subscriptions to
//!    the last acknowledged `AckBatch`; its cost per item is measured the same way (`Meter`).
//!    The pause stands for the streams not yet open: the pusher starts within 500 ms of its
//!    target, and is running before the resume.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient, retry_service_client::RetryServiceClient,
};
use tonic::transport::Channel;

use super::*;

const SERVICE: &str = "bench-push";
/// A Standard Webhooks secret (whsec_ and the base64 of 24 bytes); every request is signed.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The receiver's address, its count of requests answered, and its task.
type Receiver = (SocketAddr, Arc<AtomicUsize>, tokio::task::JoinHandle<()>);

/// The receiver: answers 200 to every request once its body is in, and counts them.
async fn receiver() -> anyhow::Result<Receiver> {
    use axum::{body::Bytes, extract::State, http::StatusCode, Router};
    async fn answer(State(count): State<Arc<AtomicUsize>>, _body: Bytes) -> StatusCode {
        count.fetch_add(1, Ordering::Relaxed);
        StatusCode::OK
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the receiver")?;
    let addr = listener.local_addr()?;
    let count = Arc::new(AtomicUsize::new(0));
    let app = Router::new().fallback(answer).with_state(count.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, count, task))
}

/// The node's counters of `service` from its /metrics: SUCCEEDED acks, and push requests by
/// result (`2xx`, `5xx`, `timeout`, `error`, `refused`, ...).
async fn scrape(
    metrics: SocketAddr,
    service: &str,
) -> Option<(usize, BTreeMap<&'static str, f64>)> {
    let (status, body) = rebound_integration_tests::http_get(metrics, "/metrics")
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    let svc = format!("service=\"{service}\"");
    let mut succeeded = 0.0;
    let mut pushes = BTreeMap::new();
    for line in body.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if !series.contains(&svc) {
            continue;
        }
        if series.starts_with("rebound_acks_total{") && series.contains("outcome=\"succeeded\"") {
            succeeded += value;
        } else if let Some(labels) = series.strip_prefix("rebound_push_requests_total{") {
            if let Some(result) = labels
                .split("result=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            {
                let result = ["2xx", "3xx", "4xx", "5xx", "timeout", "error", "refused"]
                    .into_iter()
                    .find(|r| *r == result)
                    .unwrap_or("other");
                *pushes.entry(result).or_insert(0.0) += value;
            }
        }
    }
    Some((succeeded as usize, pushes))
}

pub(crate) async fn rebound_push(a: &Args) -> anyhow::Result<J> {
    let addr = a.text("addr", "http://127.0.0.1:50090");
    let n: usize = a.get("n", 100_000)?;
    let items: usize = a.get("items", n + n.min(20_000))?;
    let max_concurrent: u32 = a.get("max-concurrent", 500)?;
    let pid: u32 = a.get("pid", 0)?;
    let keyspace = a.text("keyspace", "");
    let metrics: Option<SocketAddr> = match a.map.get("metrics") {
        Some(m) => Some(m.parse().with_context(|| format!("--metrics {m:?}"))?),
        None => None,
    };
    let tombstones_before = tombstone_lines(a);
    let ch = Channel::from_shared(addr.clone())?
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let client = RetryServiceClient::new(ch.clone())
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let mut admin = AdminServiceClient::new(ch.clone());

    let meter = Meter::from_args(a, pid)?;
    let quiet_s = quiesce(a, "rebound-push").await?;
    let (rx_addr, received, rx_task) = receiver().await?;
    admin
        .pause_service(pb::PauseServiceRequest {
            service: SERVICE.into(),
        })
        .await
        .context("pausing bench-push")?;
    admin
        .set_push_target(pb::SetPushTargetRequest {
            service: SERVICE.into(),
            target: Some(pb::PushTarget {
                url: format!("http://{rx_addr}/hooks/bench"),
                signing_secrets: vec![SECRET.into()],
                max_concurrent: Some(max_concurrent),
                ..Default::default()
            }),
        })
        .await
        .context("setting the push target (does the node have REBOUND_PUSH_ALLOW=127.0.0.1?)")?;
    let target_set = Instant::now();

    eprintln!("rebound-push: {items} enqueues in batches of 500 (paused)");
    let failed = enqueue_batches(&client, SERVICE, "p", items, None).await;
    if failed > 0 {
        bail!("{failed} batch enqueues failed");
    }
    // The pusher looks for new targets every 500 ms: it is subscribed before the resume.
    tokio::time::sleep(Duration::from_millis(1500).saturating_sub(target_set.elapsed())).await;
    let hold_rss = if pid > 0 { vm_hwm_mb(pid) } else { None };

    eprintln!("rebound-push: pushing {items} to {rx_addr}, at most {max_concurrent} at once");
    let before = meter.read().await;
    let started = Instant::now();
    admin
        .resume_service(pb::ResumeServiceRequest {
            service: SERVICE.into(),
        })
        .await
        .context("resuming bench-push")?;
    // Received 2xx answers are counted here (cheap, polled as `wait_for` polls); the node's
    // SUCCEEDED acks, which end the drain, are scraped only once the receiver has them all.
    let limit = Duration::from_secs(3600);
    let mut report = Instant::now();
    let mut acked = 0;
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let got = received.load(Ordering::Relaxed);
        if got >= items {
            match metrics {
                None => {
                    acked = got.min(items);
                    break;
                }
                Some(m) => {
                    if let Some((succeeded, _)) = scrape(m, SERVICE).await {
                        acked = succeeded;
                        if succeeded >= items {
                            break;
                        }
                    }
                }
            }
        }
        if report.elapsed() > Duration::from_secs(10) {
            eprintln!("  pushed: {got} of {items} answered 200");
            report = Instant::now();
        }
    }
    let drain_secs = started.elapsed().as_secs_f64();
    let drain_ops = acked as f64 / drain_secs;
    let drain_cost = meter.per_item(before, acked).await;
    let received = received.load(Ordering::Relaxed);
    rx_task.abort();
    let pushes = match metrics {
        Some(m) => scrape(m, SERVICE).await.map(|(_, p)| p),
        None => None,
    };
    let peak = if pid > 0 { vm_hwm_mb(pid) } else { None };
    eprintln!(
        "rebound-push: {acked} acked in {drain_secs:.1} s ({drain_ops:.0}/s), {received} requests received"
    );

    if a.map.contains_key("drop-keyspace") && !keyspace.is_empty() {
        let s = session(a).await?;
        s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await?;
    }
    let mut fields = vec![
        ("system", J::S("rebound-push".into())),
        ("version", J::S(env!("CARGO_PKG_VERSION").into())),
        (
            "guarantees",
            J::S(format!("as rebound; each delivery POSTed (signed, HTTP/1.1, a connection per request, {max_concurrent} at once) to a local receiver answering 200 at once, recorded SUCCEEDED")),
        ),
        ("n", J::N(n as f64)),
        ("cassandra_quiet_after_s", J::N(quiet_s)),
        (
            "drain",
            J::O(vec![
                ("acked_per_sec", J::N(drain_ops)),
                ("n", J::N(acked as f64)),
                ("max_concurrent", J::N(max_concurrent as f64)),
                (
                    "counted",
                    J::S(
                        if metrics.is_some() {
                            "the node's SUCCEEDED acks (rebound_acks_total)"
                        } else {
                            "the receiver's 200 answers (no --metrics)"
                        }
                        .into(),
                    ),
                ),
            ]),
        ),
        (
            "push_requests",
            J::O(vec![
                ("received", J::N(received as f64)),
                (
                    "by_result",
                    match pushes {
                        Some(p) => J::O(p.into_iter().map(|(k, v)| (k, J::N(v))).collect()),
                        None => J::Null,
                    },
                ),
            ]),
        ),
        (
            "cost_per_item",
            J::O(vec![("delivery_cycle", drain_cost)]),
        ),
        ("retry_ok", J::B(acked >= items)),
        ("hold_rss_mb", hold_rss.map_or(J::Null, J::N)),
        ("peak_rss_mb", peak.map_or(J::Null, J::N)),
        (
            "peak_rss_method",
            J::S("VmHWM of the node process (the node has no children)".into()),
        ),
    ];
    fields.extend(tombstone_json(a, tombstones_before));
    Ok(J::O(fields))
}
