//! ListRetries of IN_FLIGHT retries across nodes: only the node that delivered a retry knows
//! it is in flight, so the node answering asks every other live member (docs/architecture.md,
//! "Listing retries"). Two `rebound-server` processes share a keyspace; 30 retries are
//! delivered by both and left unacknowledged; a listing through one node shows all 30, each
//! once, with the node and executor that have it; once acked, none. Needs the Cassandra of
//! `scripts/cassandra start`.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack, ack_req, batch_accepted, drop_keyspace, enqueue_req, process::shared_ring, subscribe_all,
    unique_keyspace,
};
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use tonic::transport::Channel;

const N: usize = 30;

async fn in_flight(ch: &Channel) -> (Vec<pb::RetrySummary>, BTreeSet<String>) {
    let mut rows = Vec::new();
    let mut unreachable = BTreeSet::new();
    let mut token = String::new();
    loop {
        let r = RetryServiceClient::new(ch.clone())
            .list_retries(pb::ListRetriesRequest {
                service: "payments".into(),
                statuses: vec![pb::RetryStatus::InFlight as i32],
                page_size: 7,
                page_token: std::mem::take(&mut token),
                ..Default::default()
            })
            .await
            .expect("a page")
            .into_inner();
        rows.extend(r.retries);
        unreachable.extend(r.unreachable_nodes);
        if r.next_page_token.is_empty() {
            return (rows, unreachable);
        }
        token = r.next_page_token;
    }
}

#[tokio::test]
async fn a_listing_on_one_node_shows_the_retries_in_flight_on_every_node() {
    let keyspace = unique_keyspace("inflight");
    let (nodes, chans) = shared_ring(&keyspace, 2).await;
    let mut rx = subscribe_all(&chans, "payments", 100).await;
    let resp = RetryServiceClient::new(chans[0].clone())
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..N)
                .map(|i| enqueue_req("payments", &format!("f-{i:02}"), 0))
                .collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(batch_accepted(&resp));
    // Every retry delivered once, none acked.
    let mut delivered: BTreeMap<String, (usize, pb::Delivery)> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered.len() < N {
        assert!(Instant::now() < deadline, "{} delivered", delivered.len());
        if let Ok(Some((node, d))) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            delivered.insert(d.transaction_id.clone(), (node, d));
        }
    }
    for ch in &chans {
        let (rows, unreachable) = in_flight(ch).await;
        assert!(unreachable.is_empty(), "{unreachable:?}");
        let ids: BTreeSet<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
        assert_eq!(ids.len(), rows.len(), "listed twice");
        assert_eq!(ids, delivered.keys().map(String::as_str).collect());
        for r in &rows {
            assert_eq!(r.status, pb::RetryStatus::InFlight as i32);
            let d = r.delivery.as_ref().expect("its delivery");
            let (node, _) = &delivered[&r.transaction_id];
            assert_eq!(d.node_id, format!("n{node}"), "{r:?}");
            assert_eq!(d.executor_id, format!("test-{node}"), "{r:?}");
        }
    }
    for (node, d) in delivered.values() {
        ack(&chans[*node], ack_req(d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
    }
    let (rows, _) = in_flight(&chans[1]).await;
    assert!(rows.is_empty(), "{rows:?}");
    drop(nodes);
    drop_keyspace(&keyspace).await;
}
