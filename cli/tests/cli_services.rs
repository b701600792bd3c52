//! The `rebound` CLI against a live node: a service's settings and state (pause and resume,
//! dependency holds, policy, limits, stats, purge). The retry commands, exit codes and the
//! rest are in cli.rs.

mod common;

use common::*;

use std::time::Duration;

use chrono::Utc;
use rebound_integration_tests::{test_config, TestNode};
use serde_json::Value;

#[tokio::test]
async fn services_pause_and_resume() {
    let n = TestNode::with_system_clock(test_config("cli_pause")).await;
    let a = addr(&n);
    rebound(&a, &["enqueue", "orders", "o-1", "--delay", "1h"])
        .await
        .ok();

    let doc = rebound(&a, &["services", "--json"]).await.ok().json();
    assert_eq!(service_entry(&doc, "orders")["paused"], false);

    let r = rebound(&a, &["pause", "orders"]).await.ok();
    assert!(r.stdout.starts_with("orders paused at "), "{r:#?}");
    let doc = rebound(&a, &["services", "--json"]).await.ok().json();
    let orders = service_entry(&doc, "orders");
    assert_eq!(orders["paused"], true, "{doc:#}");
    assert!(time(&orders["paused_at"]) <= Utc::now());
    let table = rebound(&a, &["services"]).await.ok().stdout;
    let row = table
        .lines()
        .find(|l| l.starts_with("orders "))
        .unwrap_or_else(|| panic!("no orders row: {table}"));
    assert_eq!(row.split_whitespace().nth(1), Some("yes"), "{table}");

    // Pausing a service that was never seen makes it known.
    rebound(&a, &["pause", "billing"]).await.ok();
    let stats = rebound(&a, &["--json", "stats", "orders"])
        .await
        .ok()
        .json();
    assert_eq!(stats["services"][0]["paused"], true, "{stats:#}");

    let doc = rebound(&a, &["resume", "orders", "--json"])
        .await
        .ok()
        .json();
    assert_eq!(doc["service"], "orders");
    assert_eq!(doc["paused"], false);
    let doc = rebound(&a, &["services", "--json"]).await.ok().json();
    assert_eq!(service_entry(&doc, "orders")["paused"], false);
    assert_eq!(service_entry(&doc, "billing")["paused"], true);
    n.finish().await;
}

#[tokio::test]
async fn dependency_holds_set_list_and_release() {
    let n = TestNode::with_system_clock(test_config("cli_holds")).await;
    let a = addr(&n);
    let r = rebound(&a, &["holds", "list"]).await.ok();
    assert_eq!(r.stdout, "no dependency is held\n");
    let doc = rebound(
        &a,
        &[
            "holds",
            "set",
            "payments-gateway",
            "--duration",
            "5m",
            "--reason",
            "gateway maintenance",
            "--json",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(doc["dependency"], "payments-gateway");
    assert_eq!(doc["source"], "admin");
    let until = time(&doc["until"]);
    assert!(until > Utc::now() + chrono::Duration::minutes(4), "{doc:#}");
    let table = rebound(&a, &["holds", "list"]).await.ok().stdout;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("payments-gateway ") && l.ends_with("gateway maintenance")),
        "{table}"
    );
    // An enqueue may name it; a bad name or duration is refused with the field named.
    rebound(
        &a,
        &[
            "enqueue",
            "orders",
            "o-1",
            "--dependency",
            "payments-gateway",
            "--compensation",
            "payments=o-1/void",
            "--compensation",
            "stock=o-1/release",
        ],
    )
    .await
    .ok();
    let r = rebound(&a, &["get", "orders", "o-1", "--json"]).await.ok();
    assert_eq!(r.json()["dependency"], "payments-gateway", "{r:#?}");
    // Its compensations, none enqueued while it lives.
    let chain = &r.json()["chain"];
    assert_eq!(chain["position"], 0, "{r:#?}");
    assert_eq!(chain["compensations"][1]["transaction_id"], "o-1/release");
    assert_eq!(chain["compensations"][1]["status"], "PENDING");
    let r = rebound(&a, &["get", "orders", "o-1"]).await.ok();
    assert!(
        r.stdout
            .contains("1. payments o-1/void PENDING; 2. stock o-1/release PENDING"),
        "{r:#?}"
    );
    let r = rebound(
        &a,
        &["enqueue", "orders", "o-2", "--compensation", "no-equals"],
    )
    .await
    .exits(2);
    assert!(r.stderr.contains("SERVICE=TRANSACTION_ID"), "{r:#?}");
    // Stats list the holds in force with their reason.
    let stats = rebound(&a, &["stats"]).await.ok().stdout;
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("payments-gateway ") && l.ends_with("gateway maintenance")),
        "{stats}"
    );
    let doc = rebound(&a, &["stats", "--json"]).await.ok().json();
    assert_eq!(doc["holds"][0]["dependency"], "payments-gateway", "{doc:#}");
    let r = rebound(&a, &["holds", "set", "bad/name", "--duration", "5m"])
        .await
        .exits(4);
    assert!(r.stderr.contains("dependency"), "{r:#?}");
    let r = rebound(&a, &["holds", "set", "db", "--duration", "25h"])
        .await
        .exits(4);
    assert!(r.stderr.contains("duration"), "{r:#?}");

    let doc = rebound(&a, &["holds", "release", "payments-gateway", "--json"])
        .await
        .ok()
        .json();
    assert_eq!(doc["released"], true);
    let r = rebound(&a, &["holds", "release", "payments-gateway"])
        .await
        .ok();
    assert!(r.stdout.ends_with("released: no\n"), "{r:#?}");
    let doc = rebound(&a, &["holds", "list", "--json"]).await.ok().json();
    assert_eq!(doc["holds"], serde_json::json!([]));
    n.finish().await;
}

#[tokio::test]
async fn policy_set_and_get() {
    let n = TestNode::with_system_clock(test_config("cli_policy")).await;
    let a = addr(&n);

    let set = rebound(
        &a,
        &[
            "--json",
            "policy",
            "set",
            "orders",
            "--max-attempts",
            "3",
            "--initial-backoff",
            "1500ms",
            "--jitter",
            "0.1",
            "--non-retryable",
            "http.400",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(set["policy"]["max_attempts"], 3, "{set:#}");

    let doc = rebound(&a, &["policy", "get", "orders", "--json"])
        .await
        .ok()
        .json();
    let stored = &doc["policy"];
    assert_eq!(stored["max_attempts"], 3, "{doc:#}");
    assert_eq!(stored["initial_backoff"], 1.5);
    assert_eq!(stored["jitter"], 0.1);
    assert_eq!(stored["multiplier"], Value::Null);
    assert_eq!(stored["non_retryable_error_classes"][0], "http.400");
    let effective = &doc["effective_policy"];
    assert_eq!(effective["max_attempts"], 3);
    assert_eq!(effective["multiplier"], 2.0, "the node default");
    assert_eq!(effective["ack_timeout"], 30.0, "the node default");

    let table = rebound(&a, &["policy", "get", "orders"]).await.ok().stdout;
    let row = |field: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(field))
            .unwrap_or_else(|| panic!("no {field} row: {table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("max_attempts"), ["max_attempts", "3", "3"]);
    assert_eq!(row("multiplier"), ["multiplier", "-", "2"]);

    // The service's policy applies to enqueues without their own.
    rebound(&a, &["enqueue", "orders", "o-1", "--delay", "1h"])
        .await
        .ok();
    let retry = rebound(&a, &["--json", "get", "orders", "o-1"])
        .await
        .ok()
        .json();
    assert_eq!(retry["policy"]["max_attempts"], 3, "{retry:#}");

    // A set replaces the stored policy as a whole.
    rebound(&a, &["policy", "set", "orders", "--multiplier", "3"])
        .await
        .ok();
    let doc = rebound(&a, &["--json", "policy", "get", "orders"])
        .await
        .ok()
        .json();
    assert_eq!(doc["policy"]["max_attempts"], Value::Null, "{doc:#}");
    assert_eq!(doc["policy"]["multiplier"], 3.0);
    assert_eq!(
        doc["effective_policy"]["max_attempts"], 5,
        "the node default"
    );

    // Refused input names the field; nothing changes.
    let r = rebound(&a, &["policy", "set", "orders", "--jitter", "2"])
        .await
        .exits(4);
    assert!(r.stderr.contains("jitter"), "{r:#?}");
    let doc = rebound(&a, &["--json", "policy", "get", "orders"])
        .await
        .ok()
        .json();
    assert_eq!(doc["policy"]["multiplier"], 3.0);
    let r = rebound(&a, &["policy", "set", "bad name", "--max-attempts", "3"])
        .await
        .exits(4);
    assert!(r.stderr.contains("service"), "{r:#?}");
    rebound(&a, &["policy", "get", "never-seen"]).await.exits(3);
    n.finish().await;
}

#[tokio::test]
async fn limits_set_and_get() {
    let n = TestNode::with_system_clock(test_config("cli_limits")).await;
    let a = addr(&n);
    rebound(&a, &["enqueue", "orders", "o-1", "--delay", "1h"])
        .await
        .ok();
    let doc = rebound(&a, &["--json", "limits", "get", "orders"])
        .await
        .ok()
        .json();
    assert_eq!(doc["limits"]["max_dispatch_per_second"], Value::Null);
    assert_eq!(doc["limits"]["max_concurrent"], Value::Null);

    let set = rebound(
        &a,
        &[
            "--json",
            "limits",
            "set",
            "orders",
            "--rate",
            "100",
            "--burst",
            "20",
            "--max-concurrent",
            "50",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(set["limits"]["max_dispatch_per_second"], 100.0, "{set:#}");
    let doc = rebound(&a, &["--json", "limits", "get", "orders"])
        .await
        .ok()
        .json();
    assert_eq!(doc["limits"]["max_dispatch_per_second"], 100.0, "{doc:#}");
    assert_eq!(doc["limits"]["dispatch_burst"], 20);
    assert_eq!(doc["limits"]["max_concurrent"], 50);
    let text = rebound(&a, &["limits", "get", "orders"]).await.ok().stdout;
    assert!(text.contains("rate            100/s\n"), "{text}");
    assert!(text.contains("max_concurrent  50\n"), "{text}");
    let services = rebound(&a, &["services"]).await.ok().stdout;
    assert!(
        services.contains("rate=100/s burst=20 concurrent=50"),
        "{services}"
    );

    // Limits are replaced as a whole.
    rebound(&a, &["limits", "set", "orders", "--max-concurrent", "5"])
        .await
        .ok();
    let doc = rebound(&a, &["--json", "limits", "get", "orders"])
        .await
        .ok()
        .json();
    assert_eq!(doc["limits"]["max_dispatch_per_second"], Value::Null);
    assert_eq!(doc["limits"]["max_concurrent"], 5);
    let r = rebound(&a, &["limits", "set", "orders", "--rate", "-1"])
        .await
        .exits(4);
    assert!(r.stderr.contains("max_dispatch_per_second"), "{r:#?}");
    n.finish().await;
}

#[tokio::test]
async fn stats_by_band_and_node() {
    let n = TestNode::with_system_clock(test_config("cli_stats")).await;
    let a = addr(&n);
    for (txid, delay) in [
        ("m1", "10s"),
        ("h1", "30m"),
        ("h2", "45m"),
        ("d1", "5h"),
        ("l1", "3d"),
    ] {
        rebound(&a, &["enqueue", "stats-a", txid, "--delay", delay])
            .await
            .ok();
    }
    rebound(&a, &["enqueue", "stats-b", "x", "--delay", "1h"])
        .await
        .ok();

    let doc = rebound(&a, &["--json", "stats", "stats-a"])
        .await
        .ok()
        .json();
    let services = doc["services"].as_array().unwrap();
    assert_eq!(services.len(), 1, "{doc:#}");
    let s = &services[0];
    assert_eq!(s["service"], "stats-a");
    assert_eq!(s["pending"], 5);
    assert_eq!(s["bands"]["overdue"], 0);
    assert_eq!(s["bands"]["within_minute"], 1);
    assert_eq!(s["bands"]["within_hour"], 2);
    assert_eq!(s["bands"]["within_day"], 1);
    assert_eq!(s["bands"]["later"], 1);
    assert_eq!(s["in_flight"], 0);
    assert_eq!(s["dead_lettered"], 0);
    assert_eq!(s["oldest_due_age"], Value::Null);
    assert_eq!(s["paused"], false);
    let per_window: u64 = s["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["pending"].as_u64().unwrap())
        .sum();
    assert_eq!(per_window, 5);
    let node = &doc["nodes"][0];
    assert_eq!(node["node_id"], "node-a");
    assert_eq!(node["reachable"], true);

    let text = rebound(&a, &["stats"]).await.ok().stdout;
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with("SERVICE  PENDING  OVERDUE  ≤1m  ≤1h  ≤1d  LATER"),
        "{text}"
    );
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("stats-a "))
        .unwrap_or_else(|| panic!("no stats-a row: {text}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        ["stats-a", "5", "0", "1", "2", "1", "1", "0", "0", "-", "no"],
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("stats-b ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("node-a ")), "{text}");
    n.finish().await;
}

#[tokio::test]
async fn purge_cancels_what_was_scheduled_before_the_cut_off() {
    let n = TestNode::with_system_clock(test_config("cli_purge")).await;
    let a = addr(&n);
    for i in 0..6 {
        rebound(
            &a,
            &["enqueue", "purge-a", &format!("p{i}"), "--delay", "1h"],
        )
        .await
        .ok();
    }
    rebound(&a, &["enqueue", "other", "o1", "--delay", "1h"])
        .await
        .ok();

    let doc = rebound(&a, &["--json", "purge", "purge-a", "--yes", "--batch", "1"])
        .await
        .ok()
        .json();
    assert_eq!(doc["service"], "purge-a");
    assert_eq!(doc["cancelled"], 6, "{doc:#}");
    // Four pointers a bucket in the test configuration: at least two buckets, one a call.
    assert!(doc["buckets_deleted"].as_u64().unwrap() >= 2, "{doc:#}");
    assert!(doc["calls"].as_u64().unwrap() >= 2, "{doc:#}");
    assert!(time(&doc["before"]) <= Utc::now());
    for i in 0..6 {
        assert_eq!(
            status_of(&a, "purge-a", &format!("p{i}")).await,
            "CANCELLED"
        );
    }
    assert_eq!(status_of(&a, "other", "o1").await, "SCHEDULED");

    // Retries scheduled after an explicit cut-off are kept.
    rebound(&a, &["enqueue", "purge-a", "old", "--delay", "1h"])
        .await
        .ok();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let cut = Utc::now().to_rfc3339();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    rebound(&a, &["enqueue", "purge-a", "new", "--delay", "1h"])
        .await
        .ok();
    let text = rebound(&a, &["purge", "purge-a", "--yes", "--before", &cut])
        .await
        .ok()
        .stdout;
    assert!(
        text.starts_with("purged purge-a: 1 retry cancelled, "),
        "{text}"
    );
    assert_eq!(status_of(&a, "purge-a", "old").await, "CANCELLED");
    assert_eq!(status_of(&a, "purge-a", "new").await, "SCHEDULED");
    n.finish().await;
}
