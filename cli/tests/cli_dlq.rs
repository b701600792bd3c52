//! `rebound dead-letters` against a real node (see `cli.rs`): list, redrive and purge.

mod common;

use common::*;

use std::time::Duration;

use chrono::Utc;
use rebound_integration_tests::{dispatch_config, next_delivery, TestNode};
use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use serde_json::Value;

#[tokio::test]
async fn dead_letters_list_redrive_and_purge() {
    let n = TestNode::with_system_clock(dispatch_config("cli_dlq")).await;
    let a = addr(&n);
    let errors = [
        ("t1", "payment gateway: 503"),
        ("t2", "payment gateway: 503 again"),
        ("t3", "card declined"),
    ];
    for (txid, _) in errors {
        rebound(&a, &["enqueue", "dlq-a", txid, "--delay", "1s"])
            .await
            .ok();
    }
    // An executor fails each delivery for good.
    let mut exec = ExecutorServiceClient::new(n.channel.clone());
    let mut sub = exec
        .subscribe(pb::SubscribeRequest {
            service: "dlq-a".into(),
            executor_id: "cli-test".into(),
            max_in_flight: 10,
        })
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        let d = next_delivery(&mut sub, Duration::from_secs(15))
            .await
            .expect("a delivery");
        let error = errors
            .iter()
            .find(|(t, _)| *t == d.transaction_id)
            .unwrap()
            .1;
        let r = exec
            .ack(pb::AckRequest {
                delivery_id: d.delivery_id,
                outcome: pb::AckOutcome::Failed as i32,
                error: error.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.dead_lettered);
    }
    assert_eq!(status_of(&a, "dlq-a", "t1").await, "DEAD");

    let doc = rebound(&a, &["--json", "dlq", "list", "dlq-a"])
        .await
        .ok()
        .json();
    let mut listed: Vec<(String, String)> = doc["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert!(time(&d["dead_at"]) <= Utc::now());
            assert_eq!(d["redriven_at"], Value::Null);
            (
                d["transaction_id"].as_str().unwrap().to_string(),
                d["last_error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    listed.sort();
    let expected: Vec<(String, String)> = errors
        .iter()
        .map(|(t, e)| (t.to_string(), e.to_string()))
        .collect();
    assert_eq!(listed, expected, "{doc:#}");
    assert_eq!(doc["next_page_token"], Value::Null);

    let table = rebound(&a, &["dlq", "list", "dlq-a"]).await.ok().stdout;
    assert!(
        table.starts_with("TRANSACTION_ID  ATTEMPT  DEAD_AT"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("t3 ") && l.ends_with("card declined")),
        "{table}"
    );

    // Paging: one letter, then the rest from the token.
    let page = rebound(&a, &["--json", "dlq", "list", "dlq-a", "--limit", "1"])
        .await
        .ok()
        .json();
    assert_eq!(
        page["dead_letters"].as_array().unwrap().len(),
        1,
        "{page:#}"
    );
    let token = page["next_page_token"]
        .as_str()
        .expect("a token for the rest")
        .to_string();
    let rest = rebound(
        &a,
        &[
            "--json",
            "dlq",
            "list",
            "dlq-a",
            "--limit",
            "0",
            "--page-token",
            &token,
        ],
    )
    .await
    .ok()
    .json();
    let rest_ids: Vec<&str> = rest["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["transaction_id"].as_str().unwrap())
        .collect();
    assert_eq!(rest_ids.len(), 2, "{rest:#}");
    assert!(!rest_ids.contains(&page["dead_letters"][0]["transaction_id"].as_str().unwrap()));

    let filtered = rebound(
        &a,
        &[
            "--json",
            "dlq",
            "list",
            "dlq-a",
            "--error-contains",
            "gateway",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(filtered["dead_letters"].as_array().unwrap().len(), 2);
    let stats = rebound(&a, &["--json", "stats", "dlq-a"]).await.ok().json();
    assert_eq!(stats["services"][0]["dead_lettered"], 3, "{stats:#}");

    // Redrive the gateway failures an hour out.
    let doc = rebound(
        &a,
        &[
            "--json",
            "dlq",
            "redrive",
            "dlq-a",
            "--error-contains",
            "gateway",
            "--delay",
            "1h",
            "--batch",
            "1",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(doc["matched"], 2, "{doc:#}");
    assert_eq!(doc["redriven"], 2, "{doc:#}");
    assert_eq!(doc["skipped"], 0);
    for t in ["t1", "t2"] {
        let retry = rebound(&a, &["--json", "get", "dlq-a", t])
            .await
            .ok()
            .json();
        assert_eq!(retry["status"], "SCHEDULED", "{retry:#}");
        assert!(
            time(&retry["due_time"]) > Utc::now() + chrono::Duration::minutes(55),
            "{retry:#}"
        );
    }
    assert_eq!(status_of(&a, "dlq-a", "t3").await, "DEAD");
    let left = rebound(&a, &["--json", "dlq", "list", "dlq-a"])
        .await
        .ok()
        .json();
    assert_eq!(
        left["dead_letters"].as_array().unwrap().len(),
        1,
        "{left:#}"
    );
    assert_eq!(left["dead_letters"][0]["transaction_id"], "t3");
    let all = rebound(
        &a,
        &["--json", "dlq", "list", "dlq-a", "--include-redriven"],
    )
    .await
    .ok()
    .json();
    let redriven = all["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| !d["redriven_at"].is_null())
        .count();
    assert_eq!(redriven, 2, "{all:#}");
    let text = rebound(
        &a,
        &["dlq", "redrive", "dlq-a", "--error-contains", "gateway"],
    )
    .await
    .ok()
    .stdout;
    assert!(
        text.starts_with("redrove 0 dead letters of dlq-a"),
        "{text}"
    );

    // Purge what is left.
    let doc = rebound(&a, &["--json", "dlq", "purge", "dlq-a", "--yes"])
        .await
        .ok()
        .json();
    assert!(doc["purged"].as_u64().unwrap() >= 1, "{doc:#}");
    let none = rebound(&a, &["--json", "dlq", "list", "dlq-a"])
        .await
        .ok()
        .json();
    assert_eq!(none["dead_letters"], serde_json::json!([]), "{none:#}");
    let text = rebound(&a, &["dlq", "list", "dlq-a"]).await.ok().stdout;
    assert_eq!(text, "no dead letters of dlq-a match\n");
    n.finish().await;
}
