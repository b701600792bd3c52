//! Push delivery with the node process killed (SIGKILL) while its pushes are in flight
//! (docs/architecture.md, "Push delivery"): the restarted node pushes them again, none is
//! lost, the duplicates stay within the pushes in flight at the kill, and no retry is pushed
//! again after the receiver answered 2xx. Needs the Cassandra of `scripts/cassandra start`.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};

use rebound_integration_tests::{
    batch_accepted, enqueue_req, eventually, get_retry,
    process::{connect, free_port, spawn_node_with},
    receiver::{Answer, Receiver},
    secs, unique_keyspace,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient, retry_service_client::RetryServiceClient,
};

const ITEMS: usize = 40;
const MAX_CONCURRENT: u32 = 10;

#[tokio::test]
async fn sigkill_with_pushes_in_flight_loses_none_and_pushes_nothing_after_a_2xx() {
    let healthy = Arc::new(AtomicBool::new(false));
    let healthy_since = Arc::new(AtomicI64::new(i64::MAX));
    let h = healthy.clone();
    // Until the kill every request hangs (in flight at the kill); after it, 200 at once.
    let rx = Receiver::start(move |_| {
        if h.load(Ordering::SeqCst) {
            Answer::Status(200)
        } else {
            Answer::Stall(Duration::from_secs(60))
        }
    })
    .await;
    let keyspace = unique_keyspace("push_kill");
    let port = free_port();
    let env = [("REBOUND_PUSH_ALLOW", "127.0.0.1".to_string())];
    let first = spawn_node_with(&keyspace, port, "push-kill", &env);
    let ch = connect(port).await;
    AdminServiceClient::new(ch.clone())
        .set_push_target(pb::SetPushTargetRequest {
            service: "hooks".into(),
            target: Some(pb::PushTarget {
                url: rx.url("/in"),
                timeout: Some(secs(20)),
                signing_secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
                max_concurrent: Some(MAX_CONCURRENT),
                ..Default::default()
            }),
        })
        .await
        .expect("set push target");
    let resp = RetryServiceClient::new(ch.clone())
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..ITEMS)
                .map(|i| enqueue_req("hooks", &format!("hook-{i:02}"), 0))
                .collect(),
        })
        .await
        .expect("enqueue")
        .into_inner();
    assert!(batch_accepted(&resp));
    eventually(
        Duration::from_secs(20),
        "pushes in flight before the kill",
        || {
            let n = rx.received().len();
            async move { n >= MAX_CONCURRENT as usize }
        },
    )
    .await;
    let in_flight_at_kill = rx.received().len();
    assert_eq!(
        in_flight_at_kill, MAX_CONCURRENT as usize,
        "at most max_concurrent pushes at once"
    );
    first.kill();
    healthy_since.store(chrono::Utc::now().timestamp_millis(), Ordering::SeqCst);
    healthy.store(true, Ordering::SeqCst);

    let _second = spawn_node_with(&keyspace, port, "push-kill", &env);
    let ch2 = connect(port).await;
    eventually(
        Duration::from_secs(60),
        "every retry acknowledged SUCCEEDED",
        || {
            let ch = ch2.clone();
            async move {
                for i in 0..ITEMS {
                    let r = get_retry(&ch, "hooks", &format!("hook-{i:02}")).await;
                    if r.status != pb::RetryStatus::Succeeded as i32 {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    // A little longer: nothing more may arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let since = healthy_since.load(Ordering::SeqCst);
    let mut answered_2xx: BTreeMap<String, usize> = BTreeMap::new();
    let mut all: BTreeMap<String, usize> = BTreeMap::new();
    for r in rx.received() {
        *all.entry(r.transaction_id().to_string()).or_default() += 1;
        if r.at_ms >= since {
            *answered_2xx
                .entry(r.transaction_id().to_string())
                .or_default() += 1;
        }
    }
    assert_eq!(all.len(), ITEMS, "every retry was pushed");
    assert!(
        answered_2xx.values().all(|n| *n == 1),
        "one 2xx per retry, none pushed after it: {answered_2xx:?}"
    );
    let duplicates: usize = all.values().map(|n| n - 1).sum();
    assert!(
        duplicates <= in_flight_at_kill,
        "duplicates {duplicates} within the pushes in flight at the kill ({in_flight_at_kill})"
    );
}

/// SIGTERM while pushes are in flight: the node takes no new deliveries, and the answers
/// that arrive within its shutdown grace are settled, so the restarted node pushes none of
/// them again (before, stopping the pusher dropped its deliveries from flight first, and
/// every answered push was pushed again after its ack deadline).
#[tokio::test]
async fn sigterm_settles_the_pushes_answered_within_the_grace() {
    const N: usize = 8;
    // Every request is answered 200 after 1.5 s: in flight when the SIGTERM comes, answered
    // well within the 10 s grace.
    let rx = Receiver::start(|_| Answer::Stall(Duration::from_millis(1500))).await;
    let keyspace = unique_keyspace("push_term");
    let port = free_port();
    let env = [
        ("REBOUND_PUSH_ALLOW", "127.0.0.1".to_string()),
        ("REBOUND_SHUTDOWN_GRACE_MS", "10000".to_string()),
    ];
    let first = spawn_node_with(&keyspace, port, "push-term", &env);
    let ch = connect(port).await;
    AdminServiceClient::new(ch.clone())
        .set_push_target(pb::SetPushTargetRequest {
            service: "hooks".into(),
            target: Some(pb::PushTarget {
                url: rx.url("/in"),
                timeout: Some(secs(5)),
                signing_secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
                max_concurrent: Some(N as u32),
                ..Default::default()
            }),
        })
        .await
        .expect("set push target");
    let resp = RetryServiceClient::new(ch.clone())
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..N)
                .map(|i| enqueue_req("hooks", &format!("term-{i}"), 0))
                .collect(),
        })
        .await
        .expect("enqueue")
        .into_inner();
    assert!(batch_accepted(&resp));
    eventually(Duration::from_secs(20), "every push in flight", || {
        let n = rx.received().len();
        async move { n >= N }
    })
    .await;
    assert!(
        first.terminate(Duration::from_secs(20)).await,
        "the node stops within its grace"
    );
    assert_eq!(
        rx.received().len(),
        N,
        "nothing pushed twice before the stop"
    );

    // Settled before the node exited: a fresh node reads SUCCEEDED at once, and pushes
    // nothing again, past the ack deadline (timeout + 5 s) of the deliveries it inherited.
    let _second = spawn_node_with(&keyspace, port, "push-term", &env);
    let ch2 = connect(port).await;
    for i in 0..N {
        let r = get_retry(&ch2, "hooks", &format!("term-{i}")).await;
        assert_eq!(
            r.status,
            pb::RetryStatus::Succeeded as i32,
            "term-{i} settled by the stopping node: {r:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(rx.received().len(), N, "no push again after the restart");
}
