//! Dependency holds against a real Cassandra (docs/architecture.md, "Dependency holds"): 30
//! retries in 3 services name one dependency; an operator holds it, then the executors' probes
//! answer RETRY with a hold of their own while the dependency is down, then it recovers. No
//! attempt is used while it is held, nothing is delivered during a hold but the probes, none
//! ends in the dead letters, and all are delivered once it is back. The second test does the
//! same with 2,000 retries on two nodes for 30 s, one probe at a time in the whole cluster.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack, ack_req, enqueue_req, eventually, get_retry, next_delivery, secs, subscribe, test_config,
    TestNode,
};
use rebound_proto::v1::{self as pb, admin_service_client::AdminServiceClient};

const SERVICES: [&str; 3] = ["orders", "billing", "shipping"];
const PER_SERVICE: usize = 10;
const DEPENDENCY: &str = "payments-gateway";

/// No dead letter in any of `services`.
async fn assert_no_dead_letters(
    admin: &mut AdminServiceClient<tonic::transport::Channel>,
    services: &[&str],
) {
    for service in services {
        let dead = admin
            .list_dead_letters(pb::ListDeadLettersRequest {
                service: service.to_string(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(dead.dead_letters.is_empty(), "{service}: {dead:?}");
    }
}

#[tokio::test]
async fn a_held_dependency_defers_without_using_attempts_then_drains() {
    let n = TestNode::with_system_clock(test_config("holds")).await;
    let mut admin = AdminServiceClient::new(n.channel.clone());
    let start = Instant::now();
    // The operator holds it for 4 s; the dependency itself is back after 9 s.
    let up_after = Duration::from_secs(9);
    admin
        .hold_dependency(pb::HoldDependencyRequest {
            dependency: DEPENDENCY.into(),
            duration: Some(secs(4)),
            reason: "gateway maintenance".into(),
        })
        .await
        .unwrap();
    let mut c = n.client.clone();
    for service in SERVICES {
        for i in 0..PER_SERVICE {
            c.enqueue_retry(pb::EnqueueRetryRequest {
                dependency: DEPENDENCY.into(),
                ..enqueue_req(service, &format!("{service}-{i}"), 0)
            })
            .await
            .unwrap();
        }
    }
    // Every delivery: when, which, and its attempt.
    let seen: Arc<Mutex<Vec<(Duration, String, u32)>>> = Arc::default();
    let mut executors = Vec::new();
    for service in SERVICES {
        let ch = n.channel.clone();
        let seen = seen.clone();
        let mut sub = subscribe(&ch, service, 50).await;
        executors.push(tokio::spawn(async move {
            while let Some(d) = next_delivery(&mut sub, Duration::from_secs(60)).await {
                let at = start.elapsed();
                seen.lock()
                    .unwrap()
                    .push((at, d.transaction_id.clone(), d.attempt));
                assert_eq!(d.dependency, DEPENDENCY);
                let r = if at < up_after {
                    // Down: 503 with Retry-After 2, which the executor turns into a hold.
                    pb::AckRequest {
                        error: "503 from the gateway".into(),
                        hold: Some(pb::DependencyHold {
                            duration: Some(secs(2)),
                            reason: "Retry-After: 2".into(),
                        }),
                        ..ack_req(&d, pb::AckOutcome::Retry)
                    }
                } else {
                    ack_req(&d, pb::AckOutcome::Succeeded)
                };
                let resp = ack(&ch, r).await.expect("ack");
                if at < up_after {
                    assert!(resp.snoozed, "a held retry uses no attempt");
                }
            }
        }));
    }
    eventually(Duration::from_secs(60), "every retry SUCCEEDED", || {
        let ch = n.channel.clone();
        async move {
            for service in SERVICES {
                for i in 0..PER_SERVICE {
                    let r = get_retry(&ch, service, &format!("{service}-{i}")).await;
                    if r.status != pb::RetryStatus::Succeeded as i32 {
                        return false;
                    }
                }
            }
            true
        }
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let while_down: Vec<_> = seen.iter().filter(|(at, ..)| *at < up_after).collect();
    // Held 0-4 s by the operator, then each probe's RETRY holds it 2 s more: a probe at
    // about 4, 6 and 8 s (each within a window and the margin of the hold's end).
    assert!(
        while_down.len() <= 4,
        "only the probes are delivered while held: {while_down:?}"
    );
    assert!(
        while_down
            .iter()
            .all(|(at, ..)| *at >= Duration::from_secs(4)),
        "nothing before the operator's hold ended: {while_down:?}"
    );
    // Every delivery is the retry's first attempt by Rebound: the holds used none.
    assert!(seen.iter().all(|(.., attempt)| *attempt == 2), "{seen:?}");
    assert_no_dead_letters(&mut admin, &["orders"]).await;
    for e in executors {
        e.abort();
    }
    n.finish().await;
}

/// The scale, on two nodes that share the probe: 2,000 retries in 3 services name one
/// dependency that answers 503 with `Retry-After: 2` for 30 s, then recovers. While it is
/// down only the probes are delivered, one at a time in the whole cluster; no attempt is
/// used, nothing ends in the dead letters, and all 2,000 are delivered once it is back.
/// REBOUND_HOLD_RETRIES and REBOUND_HOLD_DOWN_SECONDS scale it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_retries_on_two_nodes_wait_out_an_outage_with_one_probe_at_a_time() {
    use std::{
        collections::HashSet,
        sync::atomic::{AtomicUsize, Ordering},
    };

    use rebound_integration_tests::{dispatch_config, subscribe_all, unique_keyspace};
    use rebound_store::clock::SystemClock;

    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let total = env("REBOUND_HOLD_RETRIES", 2_000) as usize;
    let down_for = Duration::from_secs(env("REBOUND_HOLD_DOWN_SECONDS", 30));
    let keyspace = unique_keyspace("holds2k");
    let mut nodes = Vec::new();
    for id in ["hold-a", "hold-b"] {
        let mut c = dispatch_config("holds2k");
        c.keyspace = keyspace.clone();
        c.node_id = id.into();
        nodes.push(TestNode::start(c, Arc::new(SystemClock)).await);
    }
    let chans: Vec<_> = nodes.iter().map(|n| n.channel.clone()).collect();
    let mut admin = AdminServiceClient::new(chans[0].clone());
    let start = Instant::now();
    // The first 503 came with Retry-After: 2.
    admin
        .hold_dependency(pb::HoldDependencyRequest {
            dependency: DEPENDENCY.into(),
            duration: Some(secs(2)),
            reason: "503, Retry-After: 2".into(),
        })
        .await
        .unwrap();
    let txids: Vec<(usize, String)> = (0..total).map(|i| (i % 3, format!("r-{i}"))).collect();
    for (k, chunk) in txids.chunks(100).enumerate() {
        let requests = chunk
            .iter()
            .map(|(s, t)| pb::EnqueueRetryRequest {
                dependency: DEPENDENCY.into(),
                ..enqueue_req(SERVICES[*s], t, 0)
            })
            .collect();
        let r =
            rebound_proto::v1::retry_service_client::RetryServiceClient::new(chans[k % 2].clone())
                .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                .await
                .unwrap()
                .into_inner();
        assert!(rebound_integration_tests::batch_accepted(&r), "{r:?}");
    }
    let enqueued_in = start.elapsed();

    // Every delivery while down: when, and how many were out at once (a probe is out until
    // its ack, 300 ms after it came: the gateway's timeout).
    let down: Arc<Mutex<Vec<(Duration, String)>>> = Arc::default();
    let out = Arc::new(AtomicUsize::new(0));
    let most_out = Arc::new(AtomicUsize::new(0));
    let attempts: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let done: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut executors = Vec::new();
    for service in SERVICES {
        let mut rx = subscribe_all(&chans, service, 500).await;
        let chans = chans.clone();
        let (down, out, most_out, attempts, done) = (
            down.clone(),
            out.clone(),
            most_out.clone(),
            attempts.clone(),
            done.clone(),
        );
        executors.push(tokio::spawn(async move {
            while let Some((i, d)) = rx.recv().await {
                let ch = chans[i].clone();
                let (down, out, most_out, attempts, done) = (
                    down.clone(),
                    out.clone(),
                    most_out.clone(),
                    attempts.clone(),
                    done.clone(),
                );
                tokio::spawn(async move {
                    attempts.lock().unwrap().insert(d.attempt);
                    let at = start.elapsed();
                    if at < down_for {
                        let now_out = out.fetch_add(1, Ordering::SeqCst) + 1;
                        most_out.fetch_max(now_out, Ordering::SeqCst);
                        down.lock().unwrap().push((at, d.transaction_id.clone()));
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let r = pb::AckRequest {
                            error: "503 from the gateway".into(),
                            hold: Some(pb::DependencyHold {
                                duration: Some(secs(2)),
                                reason: "Retry-After: 2".into(),
                            }),
                            ..ack_req(&d, pb::AckOutcome::Retry)
                        };
                        let resp = ack(&ch, r).await.expect("ack");
                        out.fetch_sub(1, Ordering::SeqCst);
                        assert!(resp.snoozed, "a held retry uses no attempt");
                    } else {
                        ack(&ch, ack_req(&d, pb::AckOutcome::Succeeded))
                            .await
                            .expect("ack");
                        done.lock().unwrap().insert(d.transaction_id.clone());
                    }
                });
            }
        }));
    }
    let within = down_for + Duration::from_secs(120);
    eventually(within, "every retry delivered after the outage", || {
        let done = done.clone();
        async move { done.lock().unwrap().len() >= total }
    })
    .await;
    let drained_in = start.elapsed();
    let down = down.lock().unwrap().clone();
    println!(
        "{total} retries enqueued in {enqueued_in:?}; {} deliveries while down for {down_for:?} \
         ({down:?}); all delivered {:?} after the outage",
        down.len(),
        drained_in.saturating_sub(down_for)
    );
    assert!(
        most_out.load(Ordering::SeqCst) <= 1,
        "one probe at a time in the cluster: {down:?}"
    );
    // Holds of 2 s, each followed by one probe: at most one delivery per 2 s while down.
    let bound = (down_for.as_secs() / 2 + 1) as usize;
    assert!(
        !down.is_empty() && down.len() <= bound,
        "only the probes while held (at most {bound}): {down:?}"
    );
    assert_eq!(
        attempts.lock().unwrap().clone(),
        HashSet::from([2]),
        "every delivery is the retry's first attempt by Rebound: the holds used none"
    );
    assert_no_dead_letters(&mut admin, &SERVICES).await;
    for e in executors {
        e.abort();
    }
    for n in nodes {
        n.finish().await;
    }
}
