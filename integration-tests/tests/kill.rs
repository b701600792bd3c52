//! The node process killed with SIGKILL in the middle of a bucket: a restarted process
//! delivers the rest, never delivers a SUCCEEDED item again, and then deletes the bucket; and
//! a retry's attempt history keeps what its acks recorded across the kill.
//! Needs the Cassandra of `scripts/cassandra start`.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack as ack_with, ack_req, ack_succeeded as ack, batch_accepted, count_rows, cql, drop_keyspace,
    enqueue_req, get_retry, next_delivery as next,
    process::{connect, free_port, spawn_node},
    subscribe, unique_keyspace,
};
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};

#[tokio::test]
async fn sigkill_mid_bucket_then_restart_delivers_the_rest_once() {
    let keyspace = unique_keyspace("kill");
    let port = free_port();
    let first = spawn_node(&keyspace, port, "kill-test");
    let ch = connect(port).await;
    let mut retries = RetryServiceClient::new(ch.clone());
    let resp = retries
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..40)
                .map(|i| enqueue_req("payments", &format!("pay-{i:02}"), 0))
                .collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(batch_accepted(&resp));
    let mut sub = subscribe(&ch, "payments", 50).await;
    let mut succeeded = BTreeSet::new();
    let mut unacked = BTreeSet::new();
    for k in 0..40 {
        let d = next(&mut sub, Duration::from_secs(15))
            .await
            .unwrap_or_else(|| panic!("delivery {k} before the kill"));
        if k % 2 == 0 {
            ack(&ch, &d).await;
            succeeded.insert(d.transaction_id);
        } else {
            unacked.insert(d.transaction_id);
        }
    }
    // SIGKILL: no shutdown hook, no chance to clean up.
    first.kill();

    let second = spawn_node(&keyspace, port, "kill-test");
    let ch2 = connect(port).await;
    let mut sub2 = subscribe(&ch2, "payments", 50).await;
    let mut replayed = BTreeSet::new();
    while replayed.len() < unacked.len() {
        let d = next(&mut sub2, Duration::from_secs(20))
            .await
            .expect("replayed delivery");
        assert!(
            !succeeded.contains(&d.transaction_id),
            "{} SUCCEEDED and came back",
            d.transaction_id
        );
        ack(&ch2, &d).await;
        replayed.insert(d.transaction_id);
    }
    assert_eq!(replayed, unacked);
    assert!(
        next(&mut sub2, Duration::from_secs(1)).await.is_none(),
        "nothing more to deliver"
    );

    let cql = cql().await;
    let started = Instant::now();
    loop {
        let count = count_rows(&cql, &keyspace, "retry_transactions_by_bucket").await;
        if count == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "bucket not deleted: {count} pointers left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..40 {
        let r = get_retry(&ch2, "payments", &format!("pay-{i:02}")).await;
        assert_eq!(r.status, pb::RetryStatus::Succeeded as i32);
    }
    drop(second);
    drop_keyspace(&keyspace).await;
}

#[tokio::test]
async fn an_attempt_history_survives_a_sigkill_mid_attempt() {
    let keyspace = unique_keyspace("kill_history");
    let port = free_port();
    let first = spawn_node(&keyspace, port, "kill-history");
    let ch = connect(port).await;
    let mut retries = RetryServiceClient::new(ch.clone());
    retries
        .enqueue_retry(enqueue_req("payments", "pay-h", 0))
        .await
        .unwrap();
    let mut sub = subscribe(&ch, "payments", 10).await;
    let d = next(&mut sub, Duration::from_secs(15))
        .await
        .expect("the first delivery");
    let mut retry = ack_req(&d, pb::AckOutcome::Retry);
    retry.error = "gateway: 503".into();
    retry.error_class = "http.503".into();
    retry.retry_after = Some(prost_types::Duration {
        seconds: 1,
        nanos: 0,
    });
    ack_with(&ch, retry).await.expect("the RETRY ack");
    // The next attempt is delivered, then the node dies before its ack.
    let d = next(&mut sub, Duration::from_secs(15))
        .await
        .expect("the second delivery");
    assert_eq!(d.attempt, 3);
    first.kill();

    let second = spawn_node(&keyspace, port, "kill-history");
    let ch2 = connect(port).await;
    let mut sub2 = subscribe(&ch2, "payments", 10).await;
    let d = next(&mut sub2, Duration::from_secs(30))
        .await
        .expect("the attempt cut short, delivered again");
    assert_eq!(d.attempt, 3, "an attempt that never ended uses none");
    ack(&ch2, &d).await;
    let r = get_retry(&ch2, "payments", "pay-h").await;
    assert_eq!(r.status, pb::RetryStatus::Succeeded as i32);
    let got: Vec<(u32, i32)> = r.attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        got,
        vec![
            (2, pb::AttemptOutcome::Retry as i32),
            (3, pb::AttemptOutcome::Succeeded as i32)
        ],
        "the RETRY recorded before the kill, then the attempt that ended after it"
    );
    let a = &r.attempts[0];
    assert_eq!(
        (
            a.error.as_str(),
            a.error_class.as_str(),
            a.node_id.as_str(),
            a.executor_id.as_str()
        ),
        ("gateway: 503", "http.503", "kill-history", "test")
    );
    assert_eq!(a.retry_after.map(|d| d.seconds), Some(1));
    assert_eq!(r.attempts_dropped, 0);
    drop(second);
    drop_keyspace(&keyspace).await;
}
