//! A node frozen with SIGSTOP past its leases and then resumed: the other node takes its
//! slots and redelivers what was in flight on it; once resumed, the frozen node delivers no
//! retry that already succeeded, and its late acks of deliveries made before the freeze are
//! refused as stale and change nothing.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack, ack_req, drop_keyspace, enqueue_req, get_retry,
    process::{connect, free_port, signal, spawn_node, wait_for_shared_ring},
    unique_keyspace,
};
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_resumes_without_acting_on_lost_leases() {
    let keyspace = unique_keyspace("freeze");
    let (p1, p2) = (free_port(), free_port());
    let n1 = spawn_node(&keyspace, p1, "f1");
    let c1 = connect(p1).await;
    let n2 = spawn_node(&keyspace, p2, "f2");
    let c2 = connect(p2).await;
    wait_for_shared_ring(&c1, 2).await;
    // Half through each node: a node's writer places its items in its own 8 lanes, whose
    // tokens fall anywhere on the ring, so 8 lanes miss f2's half of it 1 time in 256 (f2 then
    // has nothing to deliver); 16 miss it 1 time in 65,536.
    for (c, ids) in [(&c1, 0..200), (&c2, 200..400)] {
        let requests = ids
            .map(|i| enqueue_req("frz", &format!("f{i:03}"), 0))
            .collect();
        RetryServiceClient::new(c.clone())
            .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
            .await
            .unwrap();
    }

    // f2's executor takes deliveries and holds them unacknowledged.
    let mut held_on_f2 = Vec::new();
    let mut s2 = ExecutorServiceClient::new(c2.clone())
        .subscribe(pb::SubscribeRequest {
            service: "frz".into(),
            executor_id: "x2".into(),
            max_in_flight: 20,
        })
        .await
        .unwrap()
        .into_inner();
    while held_on_f2.len() < 20 {
        let d = tokio::time::timeout(Duration::from_secs(20), s2.message())
            .await
            .expect("f2 delivers")
            .unwrap()
            .unwrap();
        held_on_f2.push(d);
    }
    // Freeze f2 well past its 2 s leases.
    let pid = n2.0.id();
    assert!(signal(pid, "STOP"));
    let frozen_at = Instant::now();

    // f1 takes over and drains everything, f2's in-flight items included.
    let mut acked: HashMap<String, Instant> = HashMap::new();
    let mut s1 = ExecutorServiceClient::new(c1.clone())
        .subscribe(pb::SubscribeRequest {
            service: "frz".into(),
            executor_id: "x1".into(),
            max_in_flight: 100,
        })
        .await
        .unwrap()
        .into_inner();
    while acked.len() < 400 {
        assert!(
            frozen_at.elapsed() < Duration::from_secs(60),
            "f1 acked only {}",
            acked.len()
        );
        let Ok(Ok(Some(d))) = tokio::time::timeout(Duration::from_secs(5), s1.message()).await
        else {
            continue;
        };
        assert!(
            !acked.contains_key(&d.transaction_id),
            "{} delivered again after success",
            d.transaction_id
        );
        ack(&c1, ack_req(&d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
        acked.insert(d.transaction_id, Instant::now());
    }
    let frozen_for = frozen_at.elapsed();
    assert!(
        frozen_for > Duration::from_secs(2),
        "f1 cannot have taken f2's leases that fast"
    );

    // Resume f2: its old leases are gone; it delivers nothing that already succeeded, and its
    // late acks of pre-freeze deliveries are refused and change nothing.
    assert!(signal(pid, "CONT"));
    for d in &held_on_f2 {
        let late = pb::AckRequest {
            error: "late".into(),
            ..ack_req(d, pb::AckOutcome::Retry)
        };
        let err = ack(&c2, late).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    }
    let mut after: HashSet<String> = HashSet::new();
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        if let Ok(Ok(Some(d))) =
            tokio::time::timeout(Duration::from_millis(300), s2.message()).await
        {
            after.insert(d.transaction_id);
        }
    }
    assert!(
        after.is_empty(),
        "resumed f2 delivered succeeded retries: {after:?}"
    );
    for d in &held_on_f2 {
        let r = get_retry(&c1, "frz", &d.transaction_id).await;
        assert_eq!(
            r.status,
            pb::RetryStatus::Succeeded as i32,
            "a late ack changed {}",
            d.transaction_id
        );
    }
    eprintln!("f2 frozen for {frozen_for:?}; f1 drained all 400, {} of them redeliveries of f2's in-flight items", held_on_f2.len());
    drop((n1, n2));
    drop_keyspace(&keyspace).await;
}
