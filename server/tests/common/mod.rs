//! Helpers for tests that run real `rebound-server` processes against the Cassandra of
//! `scripts/cassandra start`.
#![allow(dead_code)]

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use tonic::transport::Channel;

pub fn contact_point() -> String {
    std::env::var("REBOUND_TEST_CASSANDRA").unwrap_or_else(|_| "127.0.0.1:9042".into())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(keyspace: &str, port: u16) -> Proc {
    spawn_node(keyspace, port, "kill-test")
}

pub fn spawn_node(keyspace: &str, port: u16, node_id: &str) -> Proc {
    spawn_node_with(keyspace, port, node_id, &[])
}

/// A node with extra environment (later entries override the defaults below).
pub fn spawn_node_with(keyspace: &str, port: u16, node_id: &str, extra: &[(&str, String)]) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_rebound-server"))
            .envs([
                ("REBOUND_LISTEN", format!("127.0.0.1:{port}")),
                ("REBOUND_CASSANDRA_CONTACT_POINTS", contact_point()),
                ("REBOUND_KEYSPACE", keyspace.to_string()),
                ("REBOUND_NODE_ID", node_id.to_string()),
                ("REBOUND_WINDOW_SECONDS", "1".to_string()),
                ("REBOUND_SKEW_MARGIN_MS", "200".to_string()),
                ("REBOUND_BUCKET_SIZE", "100".to_string()),
                ("REBOUND_SCAN_INTERVAL_MS", "50".to_string()),
                ("REBOUND_SLOTS", "8".to_string()),
                ("REBOUND_LEASE_TTL_MS", "2000".to_string()),
                (
                    "RUST_LOG",
                    std::env::var("CHILD_LOG").unwrap_or_else(|_| "warn".into()),
                ),
            ])
            .envs(extra.iter().map(|(k, v)| (*k, v.clone())))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rebound-server"),
    )
}

pub async fn connect(port: u16) -> Channel {
    let started = Instant::now();
    loop {
        if let Ok(ch) = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
        {
            return ch;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "node did not start"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn subscribe(ch: &Channel) -> tonic::Streaming<pb::Delivery> {
    ExecutorServiceClient::new(ch.clone())
        .subscribe(pb::SubscribeRequest {
            service: "payments".into(),
            executor_id: "kill-test".into(),
            max_in_flight: 50,
        })
        .await
        .unwrap()
        .into_inner()
}

pub async fn ack(ch: &Channel, d: &pb::Delivery) {
    ExecutorServiceClient::new(ch.clone())
        .ack(pb::AckRequest {
            delivery_id: d.delivery_id.clone(),
            outcome: pb::AckOutcome::Succeeded as i32,
            retry_after: None,
            error: String::new(),
            ..Default::default()
        })
        .await
        .unwrap();
}

pub async fn next(
    s: &mut tonic::Streaming<pb::Delivery>,
    within: Duration,
) -> Option<pb::Delivery> {
    match tokio::time::timeout(within, s.message()).await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => panic!("subscription failed: {e:?}"),
        Err(_) => None,
    }
}

/// One `Subscribe` stream to `service` on every channel, merged: each delivery comes with the
/// index of the node that sent it (acks go back to that node).
pub async fn subscribe_all(
    chans: &[Channel],
    service: &str,
    max_in_flight: u32,
) -> tokio::sync::mpsc::UnboundedReceiver<(usize, pb::Delivery)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, ch) in chans.iter().enumerate() {
        let mut stream = ExecutorServiceClient::new(ch.clone())
            .subscribe(pb::SubscribeRequest {
                service: service.into(),
                executor_id: format!("test-{i}"),
                max_in_flight,
            })
            .await
            .unwrap()
            .into_inner();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(d)) = stream.message().await {
                if tx.send((i, d)).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// A CQL session to the test Cassandra.
pub async fn cql() -> scylla::client::session::Session {
    scylla::client::session_builder::SessionBuilder::new()
        .known_node(contact_point())
        .build()
        .await
        .unwrap()
}

/// Drops a test keyspace (stop its nodes first: a node scanning a dropped keyspace makes
/// Cassandra log errors).
pub async fn drop_keyspace(keyspace: &str) {
    let _ = cql()
        .await
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await;
}
