//! A node's health and reflection services, and a shutdown with subscription streams still
//! open, against a real Cassandra.

use std::time::Duration;

use rebound_integration_tests::{test_config, TestNode};

#[tokio::test]
async fn health_reflection_and_shutdown_with_open_streams() {
    let cfg = test_config("health");
    let n = TestNode::with_system_clock(cfg).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(n.channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "rebound.v1.RetryService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // Both reflection versions list the API.
    use futures::StreamExt;
    let mut v1 = tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
        n.channel.clone(),
    );
    let mut resp = v1
        .server_reflection_info(futures::stream::iter(vec![tonic_reflection::pb::v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(String::new())),
        }]))
        .await
        .unwrap()
        .into_inner();
    let first = format!("{:?}", resp.next().await.unwrap().unwrap());
    assert!(first.contains("rebound.v1.RetryService"), "{first}");
    let mut v1alpha =
        tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient::new(
            n.channel.clone(),
        );
    let mut resp = v1alpha
        .server_reflection_info(futures::stream::iter(vec![tonic_reflection::pb::v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest::ListServices(String::new())),
        }]))
        .await
        .unwrap()
        .into_inner();
    let first = format!("{:?}", resp.next().await.unwrap().unwrap());
    assert!(first.contains("rebound.v1.ExecutorService"), "{first}");

    // An open Watch stream does not hold shutdown past the grace period (1 s here).
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    watch.next().await.unwrap().unwrap();
    let started = std::time::Instant::now();
    let mut n = n;
    let node = n.node.take().unwrap();
    tokio::time::timeout(Duration::from_secs(8), node.shutdown())
        .await
        .expect("shutdown does not hang on an open stream")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(8));
    n.finish().await;
}
