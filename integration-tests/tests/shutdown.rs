//! No task outlives `Node::shutdown`: with a Subscribe stream open, deliveries in flight (some
//! being acknowledged as the node stops) and a connection that never speaks gRPC, every task
//! the node owns is gone once `shutdown` returns.

use std::{sync::Arc, time::Duration};

use rebound_integration_tests::{contact_point, drop_keyspace};
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use rebound_server::{config::Config, node::Node};
use rebound_store::clock::SystemClock;
use tonic::transport::Channel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_outlives_shutdown() {
    let keyspace = format!(
        "t_shutdown_{}_{}",
        std::process::id(),
        rand::random::<u16>()
    );
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        cassandra_contact_points: vec![contact_point()],
        keyspace: keyspace.clone(),
        node_id: "owners".into(),
        window_seconds: 1,
        skew_margin_ms: 200,
        scan_interval_ms: 50,
        slots: 8,
        lease_ttl_ms: 2_000,
        shutdown_grace_ms: 1_000,
        ..Config::default()
    };
    let node = Node::start(config, Arc::new(SystemClock))
        .await
        .expect("node starts");
    let tasks = node.tasks();
    let ch = Channel::from_shared(format!("http://{}", node.local_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let requests = (0..200)
        .map(|i| pb::EnqueueRetryRequest {
            service: "owned".into(),
            transaction_id: format!("t{i:03}"),
            attempt: 1,
            schedule: Some(pb::enqueue_retry_request::Schedule::Delay(
                prost_types::Duration::default(),
            )),
            ..Default::default()
        })
        .collect();
    RetryServiceClient::new(ch.clone())
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
        .await
        .unwrap();
    let mut stream = ExecutorServiceClient::new(ch.clone())
        .subscribe(pb::SubscribeRequest {
            service: "owned".into(),
            executor_id: "owners-test".into(),
            max_in_flight: 10,
        })
        .await
        .unwrap()
        .into_inner();
    // Ten deliveries held unacknowledged, then every later one acknowledged as it comes, so
    // that acks (coalesced state writes) are in flight when the node stops.
    let mut held = Vec::new();
    while held.len() < 10 {
        let d = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("a delivery within 20 s")
            .unwrap()
            .expect("the stream is open");
        held.push(d);
    }
    let acker = {
        let ch = ch.clone();
        tokio::spawn(async move {
            let mut client = ExecutorServiceClient::new(ch);
            let mut acked = 0;
            for d in held.drain(5..) {
                let _ = client
                    .ack(pb::AckRequest {
                        delivery_id: d.delivery_id,
                        outcome: pb::AckOutcome::Succeeded as i32,
                        ..Default::default()
                    })
                    .await;
                acked += 1;
            }
            while let Ok(Some(d)) = stream.message().await {
                if client
                    .ack(pb::AckRequest {
                        delivery_id: d.delivery_id,
                        outcome: pb::AckOutcome::Succeeded as i32,
                        ..Default::default()
                    })
                    .await
                    .is_ok()
                {
                    acked += 1;
                }
            }
            acked
        })
    };
    // A connection that never sends a byte: the node cuts it at the end of the grace period.
    let _idle = tokio::net::TcpStream::connect(node.local_addr())
        .await
        .unwrap();
    // The node stops while every owner has a task running. The dispatcher's tasks come and
    // go (the timer's deliveries, redeliveries, the scan's workers), so the test waits for a
    // moment when one runs rather than sampling once.
    let owners = ["server", "connections", "engine", "ring", "dispatcher"];
    let waited = std::time::Instant::now();
    let before: std::collections::HashMap<_, _> = loop {
        let live: std::collections::HashMap<_, _> = tasks.live().into_iter().collect();
        if owners.iter().all(|o| live[o] > 0) || waited.elapsed() > Duration::from_secs(10) {
            break live;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    for owner in owners {
        assert!(
            before[owner] > 0,
            "nothing running under {owner}: {before:?}"
        );
    }

    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(15), node.shutdown())
        .await
        .expect("shutdown within 15 s")
        .expect("clean shutdown");
    let after = tasks.live();
    eprintln!(
        "live before shutdown {before:?}; after {after:?}; shutdown took {:?}",
        started.elapsed()
    );
    // Connections are tonic's tasks: the node cuts them, but whether one is gone by now is up
    // to hyper, so they are only logged above.
    assert!(
        after
            .iter()
            .all(|(owner, n)| *n == 0 || *owner == "connections"),
        "tasks outlived shutdown: {after:?}"
    );

    // The stream was closed, so the acker ends.
    let acked = tokio::time::timeout(Duration::from_secs(5), acker)
        .await
        .expect("the stream ends with the node")
        .unwrap();
    assert!(acked >= 5, "{acked} acks");
    drop_keyspace(&keyspace).await;
}
