//! Push delivery against a real node, Cassandra and a real HTTP receiver (docs/architecture.md,
//! "Push delivery"): each retry of a service with a push target is POSTed, signed per Standard
//! Webhooks, and the response decides the outcome; Subscribe streams of the service get
//! nothing while the target is set; the address guard keeps requests off loopback unless
//! REBOUND_PUSH_ALLOW permits it; bad targets are refused naming the field. Retries are
//! enqueued as after a first attempt, so their first delivery is attempt 2.

use std::{collections::BTreeMap, time::Duration};

use rebound_engine::{push::sign, services::push_target::secret_key};
use rebound_integration_tests::{
    assert_invalid as invalid, dispatch_config, enqueue_req, eventually, get_retry, next_delivery,
    receiver::{Answer, Receiver},
    secs, subscribe, TestNode,
};
use rebound_proto::v1::{self as pb, admin_service_client::AdminServiceClient};
use tonic::{transport::Channel, Code};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OLD_SECRET: &str = "whsec_dGhpcyBpcyB0aGUgb2xkIHNlY3JldCBrZXkgMTIz";

/// `config` without REBOUND_PUSH_ALLOW, as a second node on the same keyspace.
fn without_allow(config: rebound_server::config::Config) -> rebound_server::config::Config {
    rebound_server::config::Config {
        push_allow: String::new(),
        node_id: "node-b".into(),
        ..config
    }
}

fn admin(n: &TestNode) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(n.channel.clone())
}

fn target(url: String, timeout_s: i64) -> pb::PushTarget {
    pb::PushTarget {
        url,
        timeout: Some(secs(timeout_s)),
        headers: [("x-team".to_string(), "payments".to_string())].into(),
        signing_secrets: vec![SECRET.into(), OLD_SECRET.into()],
        ..Default::default()
    }
}

async fn status_of(ch: &Channel, service: &str, txid: &str) -> (i32, u32, String) {
    let r = get_retry(ch, service, txid).await;
    (r.status, r.attempt, r.last_error)
}

#[tokio::test]
async fn pushed_deliveries_are_signed_and_the_response_decides_the_outcome() {
    let rx = Receiver::start(|r| match (r.transaction_id(), r.attempt()) {
        ("later", 2) => Answer::Full(429, vec![("retry-after", "2".into())], String::new()),
        ("flaky", 2) => Answer::Status(503),
        ("conflict", 2) => Answer::Status(409),
        ("gone", _) => Answer::Full(410, vec![], "gone for good".into()),
        ("slow", 2) => Answer::Stall(Duration::from_secs(4)),
        ("classy", _) => Answer::Full(
            500,
            vec![("rebound-error-class", "card.declined".into())],
            "declined".into(),
        ),
        (_, _) => Answer::Status(200),
    })
    .await;
    let mut config = dispatch_config("push_outcomes");
    config.push_allow = "127.0.0.1".into();
    let n = TestNode::with_system_clock(config).await;
    let mut a = admin(&n);
    let service = "pushed";
    a.set_service_policy(pb::SetServicePolicyRequest {
        service: service.into(),
        policy: Some(pb::RetryPolicy {
            initial_backoff: Some(secs(1)),
            max_backoff: Some(secs(1)),
            non_retryable_error_classes: vec!["card.declined".into()],
            ..Default::default()
        }),
    })
    .await
    .expect("policy");
    let set = a
        .set_push_target(pb::SetPushTargetRequest {
            service: service.into(),
            target: Some(target(rx.url("/hooks/rebound"), 1)),
        })
        .await
        .expect("set push target")
        .into_inner();
    let stored = set.target.expect("target");
    assert!(
        stored
            .signing_secrets
            .iter()
            .all(|s| !s.contains("MfKQ9r8G")),
        "secrets come back masked: {:?}",
        stored.signing_secrets
    );
    // A Subscribe stream of the service, opened before: it gets nothing while the target is set.
    let mut stream = subscribe(&n.channel, service, 10).await;

    let ids = ["ok", "later", "flaky", "conflict", "gone", "slow", "classy"];
    for id in ids {
        let mut r = enqueue_req(service, id, 0);
        if id == "ok" {
            r.attributes = BTreeMap::from([("content-type".into(), "application/json".into())])
                .into_iter()
                .collect();
            r.payload = br#"{"order":42}"#.to_vec();
        }
        n.client.clone().enqueue_retry(r).await.expect("enqueue");
    }
    let succeeded = pb::RetryStatus::Succeeded as i32;
    let dead = pb::RetryStatus::Dead as i32;
    eventually(
        Duration::from_secs(30),
        "every pushed retry settled",
        || {
            let ch = n.channel.clone();
            async move {
                for id in ids {
                    let (status, _, _) = status_of(&ch, service, id).await;
                    if status != succeeded && status != dead {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    for (id, want) in [
        ("ok", succeeded),
        ("later", succeeded),
        ("flaky", succeeded),
        ("conflict", succeeded),
        ("slow", succeeded),
        ("gone", dead),
        ("classy", dead),
    ] {
        let (status, _, last_error) = status_of(&n.channel, service, id).await;
        assert_eq!(status, want, "{id}: {last_error}");
    }
    let (_, _, gone_error) = status_of(&n.channel, service, "gone").await;
    assert!(
        gone_error.contains("410") && gone_error.contains("gone for good"),
        "{gone_error}"
    );
    // One request each for a 2xx at once; two for the others that succeeded.
    assert_eq!(rx.of("ok").len(), 1);
    for id in ["later", "flaky", "conflict", "slow"] {
        assert_eq!(rx.of(id).len(), 2, "{id}: {:?}", rx.of(id));
    }
    assert_eq!(rx.of("gone").len(), 1, "a 410 is not tried again");
    assert_eq!(
        rx.of("classy").len(),
        1,
        "a non-retryable class named by the response ends it"
    );
    let later = rx.of("later");
    assert!(
        later[1].at_ms - later[0].at_ms >= 1_900,
        "Retry-After: 2 is honoured ({} ms)",
        later[1].at_ms - later[0].at_ms
    );

    // Every request: signed with both secrets, the delivery's headers, the target's headers.
    let keys = [
        secret_key(SECRET).expect("secret"),
        secret_key(OLD_SECRET).expect("secret"),
    ];
    for r in rx.received() {
        assert_eq!(r.path, "/hooks/rebound");
        let id = r.header("webhook-id");
        assert_eq!(id, r.header("rebound-delivery-id"));
        let ts: i64 = r.header("webhook-timestamp").parse().expect("timestamp");
        assert!((ts - chrono::Utc::now().timestamp()).abs() < 60);
        let want = sign::signature(&keys, id, ts, &r.body);
        assert_eq!(r.header("webhook-signature"), want);
        assert_eq!(r.header("webhook-signature").split(' ').count(), 2);
        assert_eq!(r.header("x-team"), "payments");
        assert_eq!(r.header("rebound-service"), service);
        assert!(!r.header("rebound-due-time").is_empty());
        assert_eq!(
            r.body.as_ref(),
            if r.transaction_id() == "ok" {
                &br#"{"order":42}"#[..]
            } else {
                r.transaction_id().as_bytes()
            }
        );
    }
    let ok = &rx.of("ok")[0];
    assert_eq!(ok.header("content-type"), "application/json");
    assert_eq!(
        rx.of("flaky")[0].header("content-type"),
        "application/octet-stream"
    );
    assert_eq!(rx.of("flaky")[1].header("rebound-attempt"), "3");
    assert!(
        rx.of("flaky")[1]
            .header("rebound-last-error")
            .contains("503"),
        "{:?}",
        rx.of("flaky")[1].headers
    );
    assert!(
        next_delivery(&mut stream, Duration::from_millis(200))
            .await
            .is_none(),
        "a stream gets nothing while the service has a push target"
    );

    // Cleared: the stream gets the service's deliveries again.
    let cleared = a
        .clear_push_target(pb::ClearPushTargetRequest {
            service: service.into(),
        })
        .await
        .expect("clear")
        .into_inner();
    assert!(cleared.cleared);
    let err = a
        .get_push_target(pb::GetPushTargetRequest {
            service: service.into(),
        })
        .await
        .expect_err("no target");
    assert_eq!(err.code(), Code::NotFound);
    tokio::time::sleep(Duration::from_secs(1)).await;
    n.client
        .clone()
        .enqueue_retry(enqueue_req(service, "streamed", 0))
        .await
        .expect("enqueue");
    let d = next_delivery(&mut stream, Duration::from_secs(15))
        .await
        .expect("the stream gets the delivery once the target is cleared");
    assert_eq!(d.transaction_id, "streamed");
    assert!(rx.of("streamed").is_empty());
}

/// SetPushTarget refuses a target whose address the guard refuses (a cloud metadata address,
/// loopback without REBOUND_PUSH_ALLOW) before anything is written; a target stored while
/// REBOUND_PUSH_ALLOW permitted it (or before its name's DNS changed) is still checked at each
/// request.
#[tokio::test]
async fn the_address_guard_keeps_pushes_off_loopback_and_bad_targets_are_refused() {
    let rx = Receiver::start(|_| Answer::Status(200)).await;
    // A first node permits 127.0.0.1 and stores a target there; the node that then runs on
    // the same keyspace does not permit it (as if the name's DNS had changed since).
    let mut first = dispatch_config("push_guard");
    first.push_allow = "127.0.0.1".into();
    let setter = TestNode::with_system_clock(first.clone()).await;
    let mut a = admin(&setter);
    let service = "guarded";
    let metadata = || pb::SetPushTargetRequest {
        service: service.into(),
        target: Some(target("http://169.254.169.254/latest/meta-data".into(), 1)),
    };
    let get = || pb::GetPushTargetRequest {
        service: service.into(),
    };
    let refused_address = |e: tonic::Status| {
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().starts_with("target.url:") && e.message().contains("REBOUND_PUSH_ALLOW"),
            "{e:?}"
        );
        e.message().to_string()
    };

    let bad = |t: pb::PushTarget| pb::SetPushTargetRequest {
        service: service.into(),
        target: Some(t),
    };
    let good = target("https://hooks.example.com/rebound".into(), 30);
    for (t, field) in [
        (
            pb::PushTarget {
                url: "https://user:pass@hooks.example.com/x".into(),
                ..good.clone()
            },
            "target.url",
        ),
        (
            pb::PushTarget {
                url: "ftp://hooks.example.com/x".into(),
                ..good.clone()
            },
            "target.url",
        ),
        (
            pb::PushTarget {
                timeout: Some(secs(0)),
                ..good.clone()
            },
            "target.timeout",
        ),
        (
            pb::PushTarget {
                timeout: Some(secs(31 * 60)),
                ..good.clone()
            },
            "target.timeout",
        ),
        (
            pb::PushTarget {
                signing_secrets: vec!["whsec_c2hvcnQ=".into()],
                ..good.clone()
            },
            "target.signing_secrets[0]",
        ),
    ] {
        invalid(a.set_push_target(bad(t)).await, field);
    }
    let m = refused_address(a.set_push_target(metadata()).await.unwrap_err());
    assert!(
        m.contains("169.254.169.254") && m.contains("link-local"),
        "{m}"
    );
    assert!(!m.contains("meta-data"), "the URL is not repeated: {m}");
    assert_eq!(
        a.get_push_target(get())
            .await
            .expect_err("nothing stored")
            .code(),
        Code::NotFound
    );

    let stored = a
        .set_push_target(bad(target(rx.url("/x"), 1)))
        .await
        .expect("REBOUND_PUSH_ALLOW permits 127.0.0.1")
        .into_inner()
        .target
        .expect("target");
    // A metadata address is refused over a stored target too, which stays as it was.
    refused_address(a.set_push_target(metadata()).await.unwrap_err());
    assert_eq!(
        a.get_push_target(get()).await.expect("stored").into_inner(),
        stored
    );
    setter.node.expect("node").shutdown().await.expect("stops");

    // No REBOUND_PUSH_ALLOW: 127.0.0.1 may not be reached, nor set.
    let n = TestNode::with_system_clock(without_allow(first)).await;
    let mut a = admin(&n);
    let m = refused_address(
        a.set_push_target(bad(target(rx.url("/y"), 1)))
            .await
            .unwrap_err(),
    );
    assert!(m.contains("loopback"), "{m}");
    assert_eq!(
        a.get_push_target(get()).await.expect("stored").into_inner(),
        stored,
        "GetPushTarget answers as before"
    );
    let r = enqueue_req(service, "loopback", 0);
    n.client.clone().enqueue_retry(r).await.expect("enqueue");
    eventually(
        Duration::from_secs(20),
        "the refused push is recorded as a failed attempt",
        || {
            let ch = n.channel.clone();
            async move {
                let (_, attempt, last_error) = status_of(&ch, service, "loopback").await;
                attempt >= 2 && last_error.contains("REBOUND_PUSH_ALLOW")
            }
        },
    )
    .await;
    assert!(
        rx.received().is_empty(),
        "no request reached the loopback receiver"
    );
}
