//! Dependency holds against a real Cassandra (docs/architecture.md, "Dependency holds"): 30
//! retries in 3 services name one dependency; an operator holds it, then the executors' probes
//! answer RETRY with a hold of their own while the dependency is down, then it recovers. No
//! attempt is used while it is held, nothing is delivered during a hold but the probes, none
//! ends in the dead letters, and all are delivered once it is back.

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
    let dead = admin
        .list_dead_letters(pb::ListDeadLettersRequest {
            service: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(dead.dead_letters.is_empty(), "{dead:?}");
    for e in executors {
        e.abort();
    }
    n.finish().await;
}
