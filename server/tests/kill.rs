//! The node process killed with SIGKILL in the middle of a bucket: a restarted process
//! delivers the rest, never delivers a SUCCEEDED item again, and then deletes the bucket.
//! Needs the Cassandra of `scripts/cassandra start`.

mod common;

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use common::{ack, connect, contact_point, free_port, next, spawn, subscribe};
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use tonic::transport::Channel;

#[tokio::test]
async fn sigkill_mid_bucket_then_restart_delivers_the_rest_once() {
    let keyspace = format!("t_kill_{}_{}", std::process::id(), rand::random::<u16>());
    let port = free_port();
    let first = spawn(&keyspace, port);
    let ch = connect(port).await;
    let mut retries = RetryServiceClient::new(ch.clone());
    let resp = retries
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..40)
                .map(|i| pb::EnqueueRetryRequest {
                    service: "payments".into(),
                    transaction_id: format!("pay-{i:02}"),
                    payload: b"charge".to_vec(),
                    attempt: 1,
                    schedule: Some(pb::enqueue_retry_request::Schedule::Delay(
                        prost_types::Duration::default(),
                    )),
                    ..Default::default()
                })
                .collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.results.iter().all(|r| matches!(
        r.result,
        Some(pb::enqueue_retry_result::Result::Response(_))
    )));
    let mut sub = subscribe(&ch).await;
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
    let mut first = first;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    drop(first);

    let second = spawn(&keyspace, port);
    let ch2 = connect(port).await;
    let mut sub2 = subscribe(&ch2).await;
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

    let cql = scylla::client::session_builder::SessionBuilder::new()
        .known_node(contact_point())
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let (count,): (i64,) = cql
            .query_unpaged(
                format!("SELECT COUNT(*) FROM {keyspace}.retry_transactions_by_bucket"),
                (),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row()
            .unwrap();
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
        let r = retries_status(&ch2, &format!("pay-{i:02}")).await;
        assert_eq!(r, pb::RetryStatus::Succeeded as i32);
    }
    drop(second);
    let _ = cql
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await;
}

async fn retries_status(ch: &Channel, txid: &str) -> i32 {
    RetryServiceClient::new(ch.clone())
        .get_retry(pb::GetRetryRequest {
            service: "payments".into(),
            transaction_id: txid.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}
