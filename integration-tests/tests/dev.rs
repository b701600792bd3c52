//! `rebound-server dev`: a node on the embedded store, no Cassandra. It serves, delivers
//! on its 1 s windows, keeps what it acknowledged across a SIGKILL, and refuses a second
//! node on the same directory.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use rebound_integration_tests::process::{connect, free_port, Proc};
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::transport::Channel;

fn dev(dir: &std::path::Path, port: u16) -> Command {
    let bin = rebound_integration_tests::process::server_bin().expect("the rebound-server binary");
    let mut c = Command::new(bin);
    c.args(["dev", "--data-dir"])
        .arg(dir)
        .env("REBOUND_LISTEN", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn")
        // Nothing of the Cassandra settings may matter: point them nowhere.
        .env("REBOUND_CASSANDRA_CONTACT_POINTS", "127.0.0.1:1");
    c
}

async fn enqueue(ch: &Channel, id: &str, delay_ms: i32) {
    RetryServiceClient::new(ch.clone())
        .enqueue_retry(pb::EnqueueRetryRequest {
            service: "orders".into(),
            transaction_id: id.into(),
            payload: b"{}".to_vec(),
            schedule: Some(pb::enqueue_retry_request::Schedule::Delay(
                prost_types::Duration {
                    seconds: 0,
                    nanos: delay_ms * 1_000_000,
                },
            )),
            attempt: 1,
            ..Default::default()
        })
        .await
        .unwrap();
}

async fn status(ch: &Channel, id: &str) -> i32 {
    RetryServiceClient::new(ch.clone())
        .get_retry(pb::GetRetryRequest {
            service: "orders".into(),
            transaction_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// Subscribes, and acks SUCCEEDED the first delivery of `id`, within `within`.
async fn deliver_and_ack(ch: &Channel, id: &str, within: Duration) {
    let mut ex = ExecutorServiceClient::new(ch.clone());
    let mut stream = ex
        .subscribe(pb::SubscribeRequest {
            service: "orders".into(),
            executor_id: "dev-test".into(),
            max_in_flight: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let d = tokio::time::timeout(within, async {
        loop {
            let d = stream.message().await.unwrap().expect("stream open");
            if d.transaction_id == id {
                return d;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{id} was not delivered within {within:?}"));
    ex.ack(pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: pb::AckOutcome::Succeeded as i32,
        ..Default::default()
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn dev_serves_without_cassandra_and_keeps_its_data_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // With RUST_LOG unset, as a newcomer runs it: the banner and the line to try come first,
    // with no start-up or per-slot lease lines before them.
    let mut first = Proc(
        dev(dir.path(), port)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let ch = connect(port).await;

    // A second node on the same directory is refused with a clear error.
    let out = dev(dir.path(), free_port()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another process"), "{err}");

    // Delivered on its 1 s windows, and acknowledged.
    enqueue(&ch, "o-1", 200).await;
    deliver_and_ack(&ch, "o-1", Duration::from_secs(10)).await;
    let succeeded = pb::RetryStatus::Succeeded as i32;
    let started = Instant::now();
    while status(&ch, "o-1").await != succeeded {
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // One more, not yet due when the node is killed: found again after the restart.
    enqueue(&ch, "o-2", 900).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let stdout = std::io::read_to_string(first.0.stdout.take().unwrap()).unwrap();
    assert!(stdout.starts_with("rebound dev: serving on"), "{stdout}");
    assert!(stdout.contains("\ntry: "), "{stdout}");
    assert!(stdout.contains("subscribe orders --count 1"), "{stdout}");
    assert!(stdout.contains("grpcurl -plaintext"), "{stdout}");
    let stderr = std::io::read_to_string(first.0.stderr.take().unwrap()).unwrap();
    assert!(!stderr.contains("lease"), "{stderr}");
    assert!(!stderr.contains("schema migrated"), "{stderr}");
    drop(first);

    let port = free_port();
    let _second = Proc(dev(dir.path(), port).spawn().unwrap());
    let ch = connect(port).await;
    assert_eq!(
        status(&ch, "o-1").await,
        succeeded,
        "an acknowledged outcome is kept"
    );
    deliver_and_ack(&ch, "o-2", Duration::from_secs(15)).await;
}
