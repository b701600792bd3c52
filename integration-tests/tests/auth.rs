//! Per-service credentials against a real node (server/node/src/auth.rs: a caller can enqueue to and
//! subscribe on only its own services; admin calls need admin credentials). Every refused call is
//! refused before anything is written.

use std::time::Duration;

use rebound_integration_tests::{
    credentials_file, dispatch_config, enqueue_req, next_delivery, utc_ms, with_token as with,
    TestNode,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use tonic::{Code, Request};

fn req(service: &str, txid: &str) -> pb::EnqueueRetryRequest {
    enqueue_req(service, txid, 0)
}

fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, what: &str) -> String {
    let e = r.expect_err(what);
    assert_eq!(e.code(), code, "{what}: {e:?}");
    e.message().to_string()
}

const PAY: Option<&str> = Some("pay-secret");
const ORD: Option<&str> = Some("ord-secret");
const OPS: Option<&str> = Some("ops-secret");
const ALL: Option<&str> = Some("all-secret");

#[tokio::test]
async fn credentials_limit_callers_to_their_services_and_admin_calls_to_admins() {
    let file = credentials_file(
        "auth",
        &[
            ("pay", "pay-secret", &["payments"], false),
            ("ord", "ord-secret", &["orders"], false),
            ("ops", "ops-secret", &[], true),
            ("all", "all-secret", &["*"], false),
        ],
    );
    let mut cfg = dispatch_config("auth");
    cfg.credentials_file = Some(file);
    let start = utc_ms("2026-11-30 12:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut retry = RetryServiceClient::new(n.channel.clone());
    let mut exec = ExecutorServiceClient::new(n.channel.clone());
    let mut admin = AdminServiceClient::new(n.channel.clone());

    // No token, an unknown token, or another scheme: UNAUTHENTICATED on every service.
    for token in [None, Some("wrong")] {
        refused(
            retry
                .enqueue_retry(with(req("payments", "t0"), token))
                .await,
            Code::Unauthenticated,
            "enqueue without a known token",
        );
        refused(
            exec.get_ring(with(pb::GetRingRequest {}, token)).await,
            Code::Unauthenticated,
            "GetRing without a known token",
        );
        refused(
            admin
                .list_services(with(pb::ListServicesRequest {}, token))
                .await,
            Code::Unauthenticated,
            "ListServices without a known token",
        );
    }
    let mut basic = Request::new(req("payments", "t0"));
    basic
        .metadata_mut()
        .insert("authorization", "Basic pay-secret".parse().unwrap());
    refused(
        retry.enqueue_retry(basic).await,
        Code::Unauthenticated,
        "Basic scheme",
    );
    // Health stays open for probes.
    let health = tonic_health::pb::health_client::HealthClient::new(n.channel.clone())
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");

    // A service credential: its own services only.
    retry
        .enqueue_retry(with(req("payments", "t1"), PAY))
        .await
        .unwrap();
    let m = refused(
        retry.enqueue_retry(with(req("orders", "o1"), PAY)).await,
        Code::PermissionDenied,
        "enqueue to another service",
    );
    assert!(m.starts_with("service:") && m.contains("\"pay\""), "{m}");
    let batch = retry
        .enqueue_retry_batch(with(
            pb::EnqueueRetryBatchRequest {
                requests: vec![req("payments", "t2"), req("orders", "o2")],
            },
            PAY,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        batch.results[0].result,
        Some(pb::enqueue_retry_result::Result::Response(_))
    ));
    match &batch.results[1].result {
        Some(pb::enqueue_retry_result::Result::Error(e)) => {
            assert_eq!(e.code, Code::PermissionDenied as i32, "{e:?}");
            assert!(e.message.starts_with("requests[1].service"), "{e:?}");
        }
        other => panic!("the orders item of a pay batch: {other:?}"),
    }
    let get = |service: &str, txid: &str| pb::GetRetryRequest {
        service: service.into(),
        transaction_id: txid.into(),
    };
    retry
        .get_retry(with(get("payments", "t1"), PAY))
        .await
        .unwrap();
    refused(
        retry.get_retry(with(get("orders", "o1"), PAY)).await,
        Code::PermissionDenied,
        "GetRetry of another service",
    );
    let list = |service: &str| pb::ListRetriesRequest {
        service: service.into(),
        ..Default::default()
    };
    let own = retry
        .list_retries(with(list("payments"), PAY))
        .await
        .unwrap()
        .into_inner();
    assert!(
        own.retries.iter().any(|r| r.transaction_id == "t1"),
        "{own:?}"
    );
    refused(
        retry.list_retries(with(list("orders"), PAY)).await,
        Code::PermissionDenied,
        "ListRetries of another service",
    );
    refused(
        retry
            .cancel_retry(with(
                pb::CancelRetryRequest {
                    service: "orders".into(),
                    transaction_id: "o1".into(),
                },
                PAY,
            ))
            .await,
        Code::PermissionDenied,
        "CancelRetry of another service",
    );
    let sub = |service: &str| pb::SubscribeRequest {
        service: service.into(),
        executor_id: "t".into(),
        max_in_flight: 10,
    };
    refused(
        exec.subscribe(with(sub("orders"), PAY)).await,
        Code::PermissionDenied,
        "Subscribe to another service",
    );
    refused(
        admin
            .list_services(with(pb::ListServicesRequest {}, PAY))
            .await,
        Code::PermissionDenied,
        "ListServices with a service credential",
    );
    exec.get_ring(with(pb::GetRingRequest {}, PAY))
        .await
        .unwrap();

    // An admin credential: every admin call, but no service of its own.
    let services = admin
        .list_services(with(pb::ListServicesRequest {}, OPS))
        .await
        .unwrap()
        .into_inner()
        .services;
    assert_eq!(
        services
            .iter()
            .map(|s| s.service.as_str())
            .collect::<Vec<_>>(),
        ["payments"]
    );
    admin
        .get_stats(with(pb::GetStatsRequest::default(), OPS))
        .await
        .unwrap();
    refused(
        retry.enqueue_retry(with(req("payments", "t9"), OPS)).await,
        Code::PermissionDenied,
        "enqueue with an admin-only credential",
    );
    // "*" covers every service.
    retry
        .enqueue_retry(with(req("orders", "o3"), ALL))
        .await
        .unwrap();

    // Deliveries: only a credential of the delivery's service may ack or extend it.
    let mut stream = exec
        .subscribe(with(sub("payments"), PAY))
        .await
        .unwrap()
        .into_inner();
    clock.set(start + 2_500);
    let d = next_delivery(&mut stream, Duration::from_secs(10))
        .await
        .expect("a payments delivery");
    let ack = |token| {
        with(
            pb::AckRequest {
                delivery_id: d.delivery_id.clone(),
                outcome: pb::AckOutcome::Succeeded as i32,
                ..Default::default()
            },
            token,
        )
    };
    let m = refused(
        exec.ack(ack(ORD)).await,
        Code::PermissionDenied,
        "ack with another service's credential",
    );
    assert!(m.starts_with("delivery_id:"), "{m}");
    refused(
        exec.extend_deadline(with(
            pb::ExtendDeadlineRequest {
                delivery_id: d.delivery_id.clone(),
                extension: Some(prost_types::Duration {
                    seconds: 10,
                    nanos: 0,
                }),
            },
            ORD,
        ))
        .await,
        Code::PermissionDenied,
        "extend with another service's credential",
    );
    refused(
        exec.ack(ack(None)).await,
        Code::Unauthenticated,
        "ack without a token",
    );
    // The refused acks changed nothing: the delivery is still in flight and acks once.
    exec.ack(ack(PAY)).await.unwrap();
    let t = retry
        .get_retry(with(get("payments", &d.transaction_id), PAY))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.status, pb::RetryStatus::Succeeded as i32);

    // Only the allowed enqueues were written.
    let ids = n.rows("transactions", "service, transaction_id").await;
    assert_eq!(ids.len(), 3, "{ids:?}");
    for (s, t) in [("payments", "t1"), ("payments", "t2"), ("orders", "o3")] {
        assert!(
            ids.iter()
                .any(|r| r.contains(&format!("\"{s}\"")) && r.contains(&format!("\"{t}\""))),
            "{s}/{t} missing from {ids:?}"
        );
    }
    drop(stream);
    n.finish().await;
}
