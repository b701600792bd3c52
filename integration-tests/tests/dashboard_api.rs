//! The dashboard's JSON API (`docs/dashboard.md`) against in-process nodes on the embedded
//! store (no Cassandra needed): credentials as on gRPC (401 / 403, and nothing changed by a
//! refused call), the POST guard (415 / 403 before anything is read), the same messages as
//! gRPC, live counters, the retry lookup's trace link, and the assets' headers.

use std::{path::Path, sync::Arc, time::Duration};

use rebound_integration_tests::{
    credentials_file, enqueue_req,
    http::{https, Http},
    next_delivery,
    pki::{client_tls, tls_channel, Ca},
    with_token,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use rebound_server::{config::Config, node::Node};
use rebound_store::clock::SystemClock;
use serde_json::{json, Value};
use tonic::transport::Channel;

fn embedded_config(dir: &Path) -> Config {
    Config {
        store: rebound_server::config::StoreKind::Embedded,
        data_dir: Some(dir.join("data")),
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: Some("127.0.0.1:0".parse().unwrap()),
        http_listen_set: true,
        node_id: "dash-node".into(),
        window_seconds: 1,
        skew_margin_ms: 250,
        scan_interval_ms: 100,
        settings_refresh_ms: 200,
        lease_ttl_ms: 2_000,
        clock_sync: false,
        shutdown_grace_ms: 1_000,
        ..Config::default()
    }
}

const PAY: &str = "pay-secret";
const OPS: &str = "ops-secret";
const TEMPLATE: &str = "http://127.0.0.1:16686/trace/{trace_id}";
/// Standard Webhooks secrets: `whsec_` and the base64 of 24 and 32 bytes.
const SECRET_1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECRET_2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A node with an admin credential of every service (`ops`) and one for `payments` only
/// (`pay`).
async fn node_with_credentials(test: &str, dir: &Path) -> (Node, Channel) {
    let file = credentials_file(
        test,
        &[
            ("pay", PAY, &["payments"], false),
            ("ops", OPS, &["*"], true),
        ],
    );
    let mut c = embedded_config(dir);
    c.credentials_file = Some(file);
    c.trace_url_template = Some(TEMPLATE.into());
    start(c).await
}

async fn start(c: Config) -> (Node, Channel) {
    let node = Node::start(c, Arc::new(SystemClock)).await.unwrap();
    let ch = Channel::from_shared(format!("http://{}", node.local_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (node, ch)
}

async fn stop(node: Node) {
    tokio::time::timeout(Duration::from_secs(10), node.shutdown())
        .await
        .expect("node stops within 10 s")
        .expect("node stops cleanly");
}

async fn service_info(ch: &Channel, service: &str) -> pb::ServiceInfo {
    AdminServiceClient::new(ch.clone())
        .get_service(with_token(
            pb::GetServiceRequest {
                service: service.into(),
            },
            Some(OPS),
        ))
        .await
        .unwrap()
        .into_inner()
}

async fn retry_status(ch: &Channel, service: &str, txid: &str) -> i32 {
    RetryServiceClient::new(ch.clone())
        .get_retry(with_token(
            pb::GetRetryRequest {
                service: service.into(),
                transaction_id: txid.into(),
            },
            Some(OPS),
        ))
        .await
        .unwrap()
        .into_inner()
        .status
}

async fn enqueue(ch: &Channel, r: pb::EnqueueRetryRequest, token: &str) {
    RetryServiceClient::new(ch.clone())
        .enqueue_retry(with_token(r, Some(token)))
        .await
        .unwrap();
}

/// Enqueues `txid`, takes its delivery and fails it (not retryable): a dead letter.
async fn dead_letter(ch: &Channel, service: &str, txid: &str, token: &str) {
    let mut r = enqueue_req(service, txid, 0);
    r.policy = Some(pb::RetryPolicy {
        max_attempts: Some(2),
        ..Default::default()
    });
    enqueue(ch, r, token).await;
    let mut stream = ExecutorServiceClient::new(ch.clone())
        .subscribe(with_token(
            pb::SubscribeRequest {
                service: service.into(),
                executor_id: "dash-test".into(),
                max_in_flight: 10,
            },
            Some(token),
        ))
        .await
        .unwrap()
        .into_inner();
    let d = next_delivery(&mut stream, Duration::from_secs(15))
        .await
        .expect("delivered");
    assert_eq!(d.transaction_id, txid);
    let ack = pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: pb::AckOutcome::Failed as i32,
        error: "boom".into(),
        ..Default::default()
    };
    let r = ExecutorServiceClient::new(ch.clone())
        .ack(with_token(ack, Some(token)))
        .await
        .unwrap()
        .into_inner();
    assert!(r.dead_lettered, "{r:?}");
}

#[tokio::test]
async fn sessions_with_and_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let (node, _ch) = node_with_credentials("dash-session", dir.path()).await;
    let anon = Http::of(&node, None);
    let e = anon.get("/api/v1/session").await.expect(401);
    assert_eq!(e["code"], "UNAUTHENTICATED");
    let e = Http::of(&node, Some("wrong"))
        .get("/api/v1/session")
        .await
        .expect(401);
    assert_eq!(e["message"], "unknown token");
    let s = Http::of(&node, Some(PAY))
        .get("/api/v1/session")
        .await
        .expect(200);
    assert_eq!(s["auth_required"], true);
    assert_eq!(s["credential"], "pay");
    assert_eq!(s["admin"], false);
    assert_eq!(s["services"], json!(["payments"]));
    assert_eq!(s["node_id"], "dash-node");
    assert_eq!(s["window_seconds"], 1);
    assert_eq!(s["trace_url_template"], TEMPLATE);
    assert!(s["version"].is_string());
    let s = Http::of(&node, Some(OPS))
        .get("/api/v1/session")
        .await
        .expect(200);
    assert_eq!(s["admin"], true);
    assert_eq!(s["services"], Value::Null);
    // The probes and metrics stay open.
    assert_eq!(anon.get("/healthz").await.status, 200);
    assert_eq!(anon.get("/metrics").await.status, 200);
    // Any credential may read the ring and the live counters; nodes' stats for admins only.
    let r = Http::of(&node, Some(PAY))
        .get("/api/v1/ring")
        .await
        .expect(200);
    assert_eq!(r["nodes"][0]["node_id"], "dash-node");
    assert_eq!(r["node_stats"], Value::Null);
    let r = Http::of(&node, Some(OPS))
        .get("/api/v1/ring")
        .await
        .expect(200);
    assert_eq!(r["node_stats"][0]["node_id"], "dash-node");
    assert_eq!(r["node_stats"][0]["reachable"], true);
    anon.get("/api/v1/ring").await.expect(401);
    anon.get("/api/v1/live").await.expect(401);
    stop(node).await;

    // No credentials file: every call allowed, the caller an admin of every service.
    let dir = tempfile::tempdir().unwrap();
    let (node, _ch) = start(embedded_config(dir.path())).await;
    let s = Http::of(&node, None)
        .get("/api/v1/session")
        .await
        .expect(200);
    assert_eq!(s["auth_required"], false);
    assert_eq!(s["credential"], Value::Null);
    assert_eq!(s["admin"], true);
    assert_eq!(s["services"], Value::Null);
    assert_eq!(s["trace_url_template"], Value::Null);
    stop(node).await;
}

#[tokio::test]
async fn admin_endpoints_refuse_others_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (node, ch) = node_with_credentials("dash-refuse", dir.path()).await;
    enqueue(&ch, enqueue_req("payments", "later", 3_600_000), PAY).await;
    dead_letter(&ch, "payments", "dead-1", PAY).await;
    let ops = Http::of(&node, Some(OPS));
    let listed = ops
        .get("/api/v1/services/payments/dead-letters")
        .await
        .expect(200);
    let letter = listed["dead_letters"][0].clone();
    assert_eq!(letter["transaction_id"], "dead-1");
    let before_info = service_info(&ch, "payments").await;

    let s = "/api/v1/services/payments";
    let gets = [
        "/api/v1/services".to_string(),
        "/api/v1/stats".into(),
        s.to_string(),
        format!("{s}/dead-letters"),
        format!("{s}/push-target"),
        "/api/v1/windows/2026-11-30/0".into(),
    ];
    let posts = [
        (format!("{s}/pause"), json!({})),
        (format!("{s}/resume"), json!({})),
        (
            format!("{s}/policy"),
            json!({"policy": {"max_attempts": 9}}),
        ),
        (
            format!("{s}/limits"),
            json!({"limits": {"max_concurrent": 1}}),
        ),
        (
            format!("{s}/purge"),
            json!({"before": null, "max_buckets": 100}),
        ),
        (
            format!("{s}/dead-letters/redrive"),
            json!({"letters": [{"transaction_id": "dead-1", "dead_at": letter["dead_at"]}]}),
        ),
        (
            format!("{s}/dead-letters/redrive"),
            json!({"max_items": 10}),
        ),
        (format!("{s}/dead-letters/purge"), json!({})),
        (
            format!("{s}/push-target"),
            json!({"target": {"url": "https://hooks.example.com/", "signing_secrets": [SECRET_1]}}),
        ),
        (format!("{s}/push-target/clear"), json!({})),
    ];
    for (token, status, code) in [
        (None, 401, "UNAUTHENTICATED"),
        (Some("wrong"), 401, "UNAUTHENTICATED"),
        (Some(PAY), 403, "PERMISSION_DENIED"),
    ] {
        let http = Http::of(&node, token);
        for path in &gets {
            let e = http.get(path).await.expect(status);
            assert_eq!(e["code"], code, "GET {path}");
        }
        for (path, body) in &posts {
            let e = http.post(path, body).await.expect(status);
            assert_eq!(e["code"], code, "POST {path}");
        }
    }
    // Nothing changed: settings, the scheduled retry, the dead letter (not redriven, not
    // purged), the dead retry.
    let after_info = service_info(&ch, "payments").await;
    assert_eq!(before_info, after_info);
    assert!(!after_info.paused);
    assert_eq!(
        retry_status(&ch, "payments", "later").await,
        pb::RetryStatus::Scheduled as i32
    );
    assert_eq!(
        retry_status(&ch, "payments", "dead-1").await,
        pb::RetryStatus::Dead as i32
    );
    let again = ops
        .get("/api/v1/services/payments/dead-letters?include_redriven=true")
        .await
        .expect(200);
    assert_eq!(again["dead_letters"], listed["dead_letters"]);
    assert_eq!(again["dead_letters"][0]["redriven_at"], Value::Null);

    // The admin may: the selected letter is redriven, and a second time skipped.
    let path = format!("{s}/dead-letters/redrive");
    let body = json!({"letters": [{"transaction_id": "dead-1", "dead_at": letter["dead_at"]}], "delay": 3600});
    let r = ops.post(&path, &body).await.expect(200);
    assert_eq!(r, json!({"redriven": 1, "skipped": 0, "done": true}));
    assert_eq!(
        retry_status(&ch, "payments", "dead-1").await,
        pb::RetryStatus::Scheduled as i32
    );
    let r = ops.post(&path, &body).await.expect(200);
    assert_eq!(r, json!({"redriven": 0, "skipped": 1, "done": true}));
    let e = ops
        .post(&path, &json!({"letters": [], "max_per_second": 5}))
        .await
        .expect(400);
    assert!(
        e["message"].as_str().unwrap().starts_with("letters:"),
        "{e}"
    );
    stop(node).await;
}

#[tokio::test]
async fn writes_need_a_json_body_from_the_same_origin() {
    let dir = tempfile::tempdir().unwrap();
    let (node, ch) = start(embedded_config(dir.path())).await;
    enqueue(&ch, enqueue_req("orders", "o-1", 3_600_000), OPS).await;
    let http = Http::of(&node, None);
    let path = "/api/v1/services/orders/pause";
    let host = node.http_addr().unwrap().to_string();
    let own = format!("http://{host}");
    for (headers, status) in [
        (vec![], 415),
        (vec![("Content-Type", "text/plain")], 415),
        (
            vec![("Content-Type", "application/x-www-form-urlencoded")],
            415,
        ),
        (
            vec![
                ("Content-Type", "application/json"),
                ("Origin", "http://evil.example"),
            ],
            403,
        ),
        (
            vec![("Content-Type", "application/json"), ("Origin", "null")],
            403,
        ),
    ] {
        let a = http.send("POST", path, &headers, Some(b"{}")).await;
        a.expect(status);
        assert!(!service_info(&ch, "orders").await.paused, "{headers:?}");
    }
    // Unknown fields and bodies that are no JSON object: 400 naming them.
    let e = http.post(path, &json!({"paused": true})).await.expect(400);
    assert!(e["message"].as_str().unwrap().starts_with("paused:"), "{e}");
    let e = http
        .send(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(b"[]"),
        )
        .await
        .expect(400);
    assert!(e["message"].as_str().unwrap().starts_with("body:"), "{e}");
    let big = vec![b' '; 66_000];
    let e = http
        .send(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(&big),
        )
        .await
        .expect(400);
    assert!(e["message"].as_str().unwrap().contains("65536"), "{e}");
    assert!(!service_info(&ch, "orders").await.paused);
    // The page's own origin, with a charset: accepted.
    let a = http
        .send(
            "POST",
            path,
            &[
                ("Content-Type", "application/json; charset=utf-8"),
                ("Origin", &own),
            ],
            Some(b"{}"),
        )
        .await;
    assert_eq!(a.expect(200)["paused"], true);
    // DNS rebinding: another site's name resolved to this node is same-origin with it, so
    // a node without credentials answers its API on IP addresses and localhost only.
    let rebound_name = format!("evil.example:{}", node.http_addr().unwrap().port());
    let evil = Http {
        host: Some(rebound_name.clone()),
        ..Http::of(&node, None)
    };
    let e = evil.get("/api/v1/session").await.expect(403);
    assert!(
        e["message"].as_str().unwrap().contains("evil.example"),
        "{e}"
    );
    let resume = "/api/v1/services/orders/resume";
    let origin = format!("http://{rebound_name}");
    evil.send(
        "POST",
        resume,
        &[("Content-Type", "application/json"), ("Origin", &origin)],
        Some(b"{}"),
    )
    .await
    .expect(403);
    assert!(
        service_info(&ch, "orders").await.paused,
        "the rebound page resumed it"
    );
    let local = Http {
        host: Some(format!("localhost:{}", node.http_addr().unwrap().port())),
        ..Http::of(&node, None)
    };
    local.get("/api/v1/session").await.expect(200);
    // A read another site's page makes (the browser says so) is refused as well.
    let e = http
        .send(
            "GET",
            "/api/v1/stats",
            &[("Sec-Fetch-Site", "cross-site")],
            None,
        )
        .await
        .expect(403);
    assert!(e["message"].as_str().unwrap().contains("cross-site"), "{e}");
    http.send(
        "GET",
        "/api/v1/stats",
        &[("Sec-Fetch-Site", "same-origin")],
        None,
    )
    .await
    .expect(200);
    stop(node).await;
}

#[tokio::test]
async fn pause_policy_and_lookups_answer_as_grpc_does() {
    let dir = tempfile::tempdir().unwrap();
    let (node, ch) = node_with_credentials("dash-admin", dir.path()).await;
    enqueue(&ch, enqueue_req("payments", "p-1", 3_600_000), PAY).await;
    let ops = Http::of(&node, Some(OPS));
    let s = "/api/v1/services/payments";

    let v = ops
        .post(&format!("{s}/pause"), &json!({}))
        .await
        .expect(200);
    assert_eq!(v["paused"], true);
    assert!(v["paused_at"].is_string(), "{v}");
    assert!(service_info(&ch, "payments").await.paused);
    let v = ops
        .post(&format!("{s}/resume"), &json!({}))
        .await
        .expect(200);
    assert_eq!(v["paused"], false);
    assert!(!service_info(&ch, "payments").await.paused);

    // A policy the node refuses: 400 with the message gRPC gives, and nothing stored.
    let bad = pb::RetryPolicy {
        multiplier: Some(0.5),
        ..Default::default()
    };
    let grpc = AdminServiceClient::new(ch.clone())
        .set_service_policy(with_token(
            pb::SetServicePolicyRequest {
                service: "payments".into(),
                policy: Some(bad),
            },
            Some(OPS),
        ))
        .await
        .unwrap_err();
    let e = ops
        .post(
            &format!("{s}/policy"),
            &json!({"policy": {"multiplier": 0.5}}),
        )
        .await
        .expect(400);
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert_eq!(e["message"], grpc.message());
    let e = ops
        .post(
            &format!("{s}/policy"),
            &json!({"policy": {"multiplier": "2"}}),
        )
        .await
        .expect(400);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("policy.multiplier:"),
        "{e}"
    );
    let e = ops
        .post(&format!("{s}/policy"), &json!({"policy": {"retries": 2}}))
        .await
        .expect(400);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("policy.retries:"),
        "{e}"
    );
    assert_eq!(
        service_info(&ch, "payments")
            .await
            .policy
            .unwrap()
            .multiplier,
        None
    );
    // A good one and limits: stored, answered as ServiceInfo.
    let v = ops
        .post(
            &format!("{s}/policy"),
            &json!({"policy": {"max_attempts": 4, "initial_backoff": 1.5}}),
        )
        .await
        .expect(200);
    assert_eq!(v["policy"]["max_attempts"], 4);
    assert_eq!(v["policy"]["initial_backoff"], 1.5);
    assert_eq!(v["effective_policy"]["max_attempts"], 4);
    let v = ops
        .post(
            &format!("{s}/limits"),
            &json!({"limits": {"max_concurrent": 3}}),
        )
        .await
        .expect(200);
    assert_eq!(v["limits"]["max_concurrent"], 3);
    assert_eq!(
        service_info(&ch, "payments")
            .await
            .limits
            .unwrap()
            .max_concurrent,
        Some(3)
    );

    // Lookups: unknown service and retry 404, a bad name 400, unknown query parameter 400.
    let e = ops.get("/api/v1/services/nope").await.expect(404);
    assert_eq!(e["code"], "NOT_FOUND");
    ops.get("/api/v1/services/nope/retries/x").await.expect(404);
    ops.get("/api/v1/services/payments/retries/missing")
        .await
        .expect(404);
    ops.get("/api/v1/services/nope/dead-letters")
        .await
        .expect(404);
    ops.get("/api/v1/stats?service=nope").await.expect(404);
    ops.get("/api/v1/services/Bad%20Name").await.expect(400);
    let e = ops
        .get("/api/v1/services/payments/dead-letters?page=2")
        .await
        .expect(400);
    assert!(e["message"].as_str().unwrap().starts_with("page:"), "{e}");
    ops.get("/api/v1/services/payments/dead-letters?page_token=junk")
        .await
        .expect(400);
    // The scheduled retries of a service, filtered; bad filters are refused by name.
    let v = ops
        .get("/api/v1/services/payments/retries?page_size=10")
        .await
        .expect(200);
    assert_eq!(v["retries"][0]["transaction_id"], "p-1", "{v}");
    assert_eq!(v["retries"][0]["status"], "SCHEDULED", "{v}");
    assert_eq!(v["next_page_token"], Value::Null, "{v}");
    let v = ops
        .get("/api/v1/services/payments/retries?error_contains=no%20such%20error")
        .await
        .expect(200);
    assert_eq!(v["retries"], json!([]), "{v}");
    // Every status a listing knows, the finished ones included.
    for status in ["SCHEDULED", "IN_FLIGHT", "DEAD", "SUCCEEDED", "CANCELLED"] {
        let v = ops
            .get(&format!(
                "/api/v1/services/payments/retries?status={status}"
            ))
            .await
            .expect(200);
        assert!(v["retries"].is_array(), "{status}: {v}");
        let rows = v["retries"].as_array().unwrap();
        assert!(rows.iter().all(|r| r["status"] == status), "{status}: {v}");
    }
    for (q, field) in [
        ("page_token=junk", "page_token:"),
        ("attributes=notjson", "attributes:"),
        ("attributes=%7B%22a%22%3A1%7D", "attributes:"),
        ("page_size=501", "page_size:"),
        (
            "due_after=2026-12-02T00:00:00Z&due_before=2026-12-01T00:00:00Z",
            "due_after:",
        ),
        ("statuses=DEAD", "statuses:"),
        ("status=FINISHED", "status:"),
    ] {
        let e = ops
            .get(&format!("/api/v1/services/payments/retries?{q}"))
            .await
            .expect(400);
        assert!(message(&e).starts_with(field), "{q}: {e}");
    }
    ops.get("/api/v1/nothing-here").await.expect(404);
    let e = ops.get("/api/v1/windows/2026-11-30/x").await.expect(400);
    assert!(e["message"].as_str().unwrap().starts_with("window:"), "{e}");

    // The rest of the admin endpoints answer their shapes.
    let v = ops.get("/api/v1/services").await.expect(200);
    assert_eq!(v["services"][0]["service"], "payments");
    let v = ops.get("/api/v1/stats").await.expect(200);
    assert_eq!(v["services"][0]["service"], "payments");
    assert_eq!(v["services"][0]["pending"], 1);
    assert_eq!(v["nodes"][0]["node_id"], "dash-node");
    assert!(v["nodes"][0].get("clock_offset_ms").is_some(), "{v}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let v = ops
        .get(&format!("/api/v1/windows/{today}/0"))
        .await
        .expect(200);
    assert_eq!(v["day"], today.as_str());
    assert_eq!(v["window_seconds"], 1);
    let v = ops
        .post(
            &format!("{s}/purge"),
            &json!({"before": null, "max_buckets": 100}),
        )
        .await
        .expect(200);
    assert_eq!(v["cancelled"], 1, "{v}");
    assert!(v["before"].is_string() && v["done"].is_boolean(), "{v}");
    assert_eq!(
        retry_status(&ch, "payments", "p-1").await,
        pb::RetryStatus::Cancelled as i32
    );
    let v = ops
        .post(&format!("{s}/dead-letters/purge"), &json!({}))
        .await
        .expect(200);
    assert_eq!(v, json!({"purged": 0}));
    // Actions on the retries selected: bad bodies are refused by name and change nothing.
    let acts = "/api/v1/services/payments/retry-actions";
    for (body, field) in [
        (json!({"action": "EXPLODE"}), "action:"),
        (json!({}), "action:"),
        (json!({"action": "RESCHEDULE"}), "due_time:"),
        (
            json!({"action": "RUN_NOW", "attributes": {"a": 1}}),
            "attributes[\"a\"]:",
        ),
        (
            json!({"action": "RUN_NOW", "transaction_ids": [""]}),
            "transaction_ids[0]:",
        ),
        (
            json!({"action": "RUN_NOW", "page_token": "junk"}),
            "selection.page_token:",
        ),
        (json!({"action": "RUN_NOW", "whatever": 1}), "whatever:"),
    ] {
        let e = ops.post(acts, &body).await.expect(400);
        assert!(message(&e).starts_with(field), "{body}: {e}");
    }
    // A good one changes the retries named, and says so in their history.
    enqueue(&ch, enqueue_req("payments", "p-2", 3_600_000), PAY).await;
    let later = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let body = json!({"action": "reschedule", "due_time": later, "transaction_ids": ["p-2"], "reason": "test"});
    let v = ops.post(acts, &body).await.expect(200);
    assert_eq!(
        v,
        json!({"changed": 1, "skipped": 0, "next_page_token": null})
    );
    let v = ops
        .get("/api/v1/services/payments/retries/p-2")
        .await
        .expect(200);
    let last = v["attempts"].as_array().and_then(|a| a.last()).cloned();
    let last = last.unwrap_or_default();
    assert_eq!(last["outcome"], "RESCHEDULED", "{v}");
    assert_eq!(last["error"], "test", "{v}");
    stop(node).await;
}

/// What the message of a 400 answer says, after its field.
fn message(e: &Value) -> &str {
    e["message"].as_str().unwrap()
}

#[tokio::test]
async fn push_targets_are_set_shown_masked_and_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let (node, ch) = node_with_credentials("dash-push", dir.path()).await;
    // Due in an hour: nothing is pushed while the test runs.
    enqueue(&ch, enqueue_req("payments", "p-1", 3_600_000), PAY).await;
    let ops = Http::of(&node, Some(OPS));
    let s = "/api/v1/services/payments";
    let set = format!("{s}/push-target");
    let clear = format!("{s}/push-target/clear");

    // None yet: the service says so, the target's own path is 404 as GetPushTarget.
    assert_eq!(ops.get(s).await.expect(200)["push_target"], Value::Null);
    let e = ops.get(&set).await.expect(404);
    assert_eq!(e["code"], "NOT_FOUND");
    assert!(message(&e).contains("has no push target"), "{e}");

    // A bad URL: 400 with the message gRPC gives (the field named), and nothing stored.
    let grpc = AdminServiceClient::new(ch.clone())
        .set_push_target(with_token(
            pb::SetPushTargetRequest {
                service: "payments".into(),
                target: Some(pb::PushTarget {
                    url: "hooks.example.com/rebound".into(),
                    signing_secrets: vec![SECRET_1.into()],
                    ..Default::default()
                }),
            },
            Some(OPS),
        ))
        .await
        .unwrap_err();
    let e = ops
        .post(
            &set,
            &json!({"target": {"url": "hooks.example.com/rebound", "signing_secrets": [SECRET_1]}}),
        )
        .await
        .expect(400);
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert_eq!(e["message"], grpc.message());
    assert!(message(&e).starts_with("target.url:"), "{e}");
    // The node's other checks, and the API's own, each name the field; no secret repeated.
    for (body, field) in [
        (json!({}), "target:"),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": ["whsec_SECRETx"]}}),
            "target.signing_secrets[0]:",
        ),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": "whsec_SECRETx"}}),
            "target.signing_secrets:",
        ),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": [SECRET_1], "timeout": 0.5}}),
            "target.timeout:",
        ),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": [SECRET_1], "max_concurrent": 0}}),
            "target.max_concurrent:",
        ),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": [SECRET_1], "headers": "Content-Type: text/plain"}}),
            "target.headers[\"Content-Type\"]:",
        ),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": [SECRET_1], "headers": "X-A: 1\nBearer SECRETx"}}),
            "target.headers: line 2 has no colon",
        ),
        (
            json!({"target": {"url": "https://h.example/", "signing_secrets": [SECRET_1], "secret": "x"}}),
            "target.secret:",
        ),
    ] {
        let e = ops.post(&set, &body).await.expect(400);
        assert!(message(&e).starts_with(field), "{body}: {e}");
        assert!(!message(&e).contains("SECRETx"), "{e}");
    }
    assert_eq!(service_info(&ch, "payments").await.push_target, None);

    // A good one, headers as lines: answered as stored, secrets and header values masked.
    let v = ops
        .post(
            &set,
            &json!({"target": {
                "url": "HTTPS://Hooks.Example.com/rebound?tenant=7",
                "timeout": 2.5,
                "headers": "X-Team: payments\r\nAuthorization: Bearer abc123xyz\n",
                "signing_secrets": [SECRET_1, SECRET_2],
            }}),
        )
        .await
        .expect(200);
    assert_eq!(v["service"], "payments");
    let t = &v["push_target"];
    assert_eq!(t["url"], "https://hooks.example.com/rebound?tenant=7");
    assert_eq!(t["timeout"], 2.5);
    assert_eq!(
        t["headers"],
        json!({"Authorization": "…3xyz", "X-Team": "…"})
    );
    assert!(
        !v["push_target"].to_string().contains("abc123")
            && !v["push_target"].to_string().contains("payments"),
        "no header value in clear: {v}"
    );
    assert_eq!(t["signing_secrets"], json!(["whsec_…LaSw", "whsec_…Hh8="]));
    assert_eq!(t["max_concurrent"], 64);
    assert!(t["updated_at"].is_string(), "{t}");
    assert!(!v.to_string().contains(&SECRET_1[6..]), "{v}");
    // The same everywhere the dashboard reads it, and as gRPC's GetPushTarget has it.
    assert_eq!(ops.get(&set).await.expect(200), v);
    assert_eq!(&ops.get(s).await.expect(200)["push_target"], t);
    let listed = ops.get("/api/v1/services").await.expect(200);
    assert_eq!(&listed["services"][0]["push_target"], t);
    let grpc = AdminServiceClient::new(ch.clone())
        .get_push_target(with_token(
            pb::GetPushTargetRequest {
                service: "payments".into(),
            },
            Some(OPS),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grpc.signing_secrets, ["whsec_…LaSw", "whsec_…Hh8="]);
    assert_eq!(grpc.timeout.unwrap().nanos, 500_000_000);
    // The other settings' answers carry it too.
    let p = ops
        .post(&format!("{s}/pause"), &json!({}))
        .await
        .expect(200);
    assert_eq!(&p["push_target"], t);
    // The page's form sends the headers back as it shows them (masked) unless they are given
    // again: refused, naming the header, and the stored target stays.
    let e = ops
        .post(
            &set,
            &json!({"target": {
                "url": "https://hooks.example.com/rebound?tenant=7",
                "headers": "Authorization: …3xyz\nX-Team: …",
                "signing_secrets": [SECRET_1],
            }}),
        )
        .await
        .expect(400);
    assert!(
        message(&e).starts_with("target.headers[\"Authorization\"]:")
            && message(&e).contains("masked value"),
        "{e}"
    );
    assert_eq!(&ops.get(s).await.expect(200)["push_target"], t);

    // Replaced as a whole: headers as an object, one secret, a concurrency.
    let v = ops
        .post(
            &set,
            &json!({"target": {
                "url": "https://hooks.example.com/v2",
                "headers": {"X-A": "1"},
                "signing_secrets": [SECRET_2],
                "max_concurrent": 4,
            }}),
        )
        .await
        .expect(200);
    let t = &v["push_target"];
    assert_eq!(t["headers"], json!({"X-A": "…"}));
    assert_eq!(t["signing_secrets"], json!(["whsec_…Hh8="]));
    assert_eq!(
        (t["max_concurrent"].clone(), t["timeout"].clone()),
        (json!(4), json!(30.0))
    );

    // Clear: once cleared, twice not; the service has none again.
    let e = ops.post(&clear, &json!({"x": 1})).await.expect(400);
    assert!(message(&e).starts_with("x:"), "{e}");
    assert_eq!(
        ops.post(&clear, &json!({})).await.expect(200),
        json!({"service": "payments", "cleared": true})
    );
    assert_eq!(
        ops.post(&clear, &json!({})).await.expect(200),
        json!({"service": "payments", "cleared": false})
    );
    assert_eq!(ops.get(s).await.expect(200)["push_target"], Value::Null);
    ops.get(&set).await.expect(404);
    assert_eq!(service_info(&ch, "payments").await.push_target, None);
    // A bad service name is refused before anything is read.
    let e = ops
        .post(
            "/api/v1/services/Bad%20Name/push-target",
            &json!({"target": {"url": "https://h.example/", "signing_secrets": [SECRET_1]}}),
        )
        .await
        .expect(400);
    assert!(message(&e).starts_with("service:"), "{e}");
    stop(node).await;
}

#[tokio::test]
async fn live_counters_grow_and_the_retry_lookup_links_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (node, ch) = node_with_credentials("dash-live", dir.path()).await;
    let pay = Http::of(&node, Some(PAY));
    let count = |v: &Value, service: &str| -> u64 {
        v["services"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["service"] == service)
            .map_or(0, |s| s["enqueued"].as_u64().unwrap())
    };
    let before = pay.get("/api/v1/live").await.expect(200);
    assert_eq!(before["node_id"], "dash-node");
    assert!(before["at"].is_string());
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut r = enqueue_req("payments", "traced", 3_600_000);
    r.trace_context = Some(pb::TraceContext {
        traceparent: format!("00-{trace}-00f067aa0ba902b7-01"),
        tracestate: String::new(),
    });
    enqueue(&ch, r, PAY).await;
    enqueue(&ch, enqueue_req("payments", "untraced", 3_600_000), PAY).await;
    enqueue(&ch, enqueue_req("orders", "o-1", 3_600_000), OPS).await;
    let after = pay.get("/api/v1/live").await.expect(200);
    assert!(
        count(&after, "payments") >= count(&before, "payments") + 2,
        "{before} then {after}"
    );
    // Filtered to the caller's services; the admin sees every one.
    for s in after["services"].as_array().unwrap() {
        assert_eq!(s["service"], "payments", "{after}");
    }
    let all = Http::of(&node, Some(OPS))
        .get("/api/v1/live")
        .await
        .expect(200);
    assert!(count(&all, "orders") >= 1, "{all}");
    assert!(
        all["lateness"]["buckets"].as_array().unwrap().len() > 3,
        "{all}"
    );
    assert_eq!(
        all["lateness"]["buckets"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["le"],
        "+Inf"
    );

    let v = pay
        .get("/api/v1/services/payments/retries/traced")
        .await
        .expect(200);
    assert_eq!(v["transaction_id"], "traced");
    assert_eq!(v["status"], "SCHEDULED");
    assert_eq!(v["trace_id"], trace);
    assert_eq!(
        v["trace_url"],
        format!("http://127.0.0.1:16686/trace/{trace}")
    );
    let v = pay
        .get("/api/v1/services/payments/retries/untraced")
        .await
        .expect(200);
    assert_eq!(v["trace_id"], Value::Null);
    assert_eq!(v["trace_url"], Value::Null);
    // Another service's retry: PERMISSION_DENIED, as GetRetry.
    let e = pay
        .get("/api/v1/services/orders/retries/o-1")
        .await
        .expect(403);
    assert_eq!(e["code"], "PERMISSION_DENIED");
    stop(node).await;
}

#[tokio::test]
async fn assets_are_served_with_csp_and_etags() {
    let dir = tempfile::tempdir().unwrap();
    let (node, _ch) = node_with_credentials("dash-assets", dir.path()).await;
    // The page loads before signing in: the assets need no credential.
    let http = Http::of(&node, None);
    for (path, kind) in [
        ("/", "text/html"),
        ("/app.js", "text/javascript"),
        ("/app.css", "text/css"),
    ] {
        let a = http.get(path).await;
        assert_eq!(a.status, 200, "{path}");
        assert!(
            a.header("content-type").unwrap().starts_with(kind),
            "{a:#?}"
        );
        assert_eq!(
            a.header("content-security-policy"),
            Some(
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                 connect-src 'self'; frame-ancestors 'none'"
            )
        );
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(a.header("referrer-policy"), Some("no-referrer"));
        assert_eq!(a.header("cache-control"), Some("no-cache"));
        assert!(!a.body.is_empty());
        let etag = a.header("etag").expect("an ETag").to_string();
        let same = http
            .send("GET", path, &[("If-None-Match", &etag)], None)
            .await;
        assert_eq!(same.status, 304, "{same:#?}");
        assert!(same.body.is_empty());
        assert_eq!(same.header("etag"), Some(etag.as_str()));
        let other = http
            .send("GET", path, &[("If-None-Match", "\"other\"")], None)
            .await;
        assert_eq!(other.status, 200);
    }
    stop(node).await;
}

/// Arbitrary query strings and bodies: an answer (never a 5xx), and the node goes on.
#[tokio::test]
async fn arbitrary_queries_and_bodies_are_answered() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let (node, ch) = start(embedded_config(dir.path())).await;
    enqueue(&ch, enqueue_req("orders", "o-1", 3_600_000), OPS).await;
    let http = Http::of(&node, None);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let pieces = [
        "{",
        "}",
        "[",
        "]",
        "\"",
        ":",
        ",",
        "null",
        "true",
        "1e999",
        "-1",
        "0.5",
        "\"policy\"",
        "\"letters\"",
        "\"dead_at\"",
        "\"before\"",
        "\"max_buckets\"",
        "\"limits\"",
        "\"target\"",
        "\"url\"",
        "\"headers\"",
        "\"signing_secrets\"",
        "\"X-A: 1\\nX-A: 2\"",
        "%",
        "%ff",
        "&",
        "=",
        "from",
        "to",
        "page_size",
        "é",
        "\\u0000",
        " ",
    ];
    let posts = [
        "policy",
        "limits",
        "purge",
        "dead-letters/redrive",
        "dead-letters/purge",
        "push-target",
        "push-target/clear",
    ];
    for i in 0..120 {
        let text: String = (0..rng.random_range(0..12))
            .map(|_| pieces[rng.random_range(0..pieces.len())])
            .collect();
        let a = if i % 2 == 0 {
            let q: String = text
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'0'..=b'9' | b'&' | b'=' | b'%' | b'+' | b'-' | b'_' | b'.' => {
                        (b as char).to_string()
                    }
                    b => format!("%{b:02X}"),
                })
                .collect();
            http.get(&format!("/api/v1/services/orders/dead-letters?{q}"))
                .await
        } else {
            let p = posts[rng.random_range(0..posts.len())];
            http.send(
                "POST",
                &format!("/api/v1/services/orders/{p}"),
                &[("Content-Type", "application/json")],
                Some(text.as_bytes()),
            )
            .await
        };
        assert!(
            (200..500).contains(&a.status) && a.json()["code"] != "INTERNAL",
            "{text:?}: {a:#?}"
        );
    }
    http.get("/api/v1/session").await.expect(200);
    stop(node).await;
}

/// Under mutual TLS on the HTTP listener, the client certificate's CN is the credential when
/// no token is sent.
#[tokio::test]
async fn a_client_certificate_names_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let node_cert = ca.node("node");
    let creds = dir.path().join("credentials.toml");
    std::fs::write(
        &creds,
        "[[credential]]\nname = \"operator\"\nadmin = true\nservices = [\"*\"]\n",
    )
    .unwrap();
    let mut c = embedded_config(dir.path());
    c.tls_cert_file = Some(node_cert.cert.clone());
    c.tls_key_file = Some(node_cert.key.clone());
    c.tls_client_ca_file = Some(ca.cert());
    c.credentials_file = Some(creds);
    let node = Node::start(c, Arc::new(SystemClock)).await.unwrap();
    let http = node.http_addr().unwrap();
    let client = ca.client("operator", "operator");
    let s = https(http, &ca, Some(&client), "/api/v1/session")
        .await
        .expect(200);
    assert_eq!(s["credential"], "operator");
    assert_eq!(s["admin"], true);
    https(http, &ca, None, "/api/v1/session").await.expect(401);
    // The gRPC side under the same certificate, for comparison.
    let ch = tls_channel(node.local_addr(), client_tls(&ca.cert_pem(), Some(&client)));
    RetryServiceClient::new(ch)
        .enqueue_retry(enqueue_req("orders", "o-1", 3_600_000))
        .await
        .unwrap();
    stop(node).await;
}
