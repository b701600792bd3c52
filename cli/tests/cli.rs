//! The `rebound` binary against a real node: an in-process Rebound node (its own keyspace on
//! the Cassandra of `scripts/cassandra`) on a free port, driven through the command line as an
//! operator or a script would, checking exit codes, tables and `--json` documents.

mod common;

use common::*;

use std::{process::Stdio, time::Duration};

use chrono::Utc;
use rebound_integration_tests::{credentials_file, test_config, TestNode};
use serde_json::Value;

#[tokio::test]
async fn enqueue_get_and_cancel() {
    let n = TestNode::with_system_clock(test_config("cli_enqueue")).await;
    let a = addr(&n);

    let first = rebound(
        &a,
        &[
            "enqueue",
            "orders",
            "order-42/charge",
            "--payload",
            r#"{"order":42}"#,
            "--delay",
            "1h",
            "--attempt",
            "1",
            "--last-error",
            "payment gateway: 503",
            "--attr",
            "step=charge",
            "--attr",
            "region=eu",
            "--max-attempts",
            "4",
            "--initial-backoff",
            "1500ms",
        ],
    )
    .await
    .ok();
    assert!(
        first.stdout.contains("transaction_id  order-42/charge\n"),
        "{first:#?}"
    );
    assert!(first.stdout.contains("deduplicated    no\n"), "{first:#?}");

    // The same transaction again: confirmed or rescheduled, never doubled.
    let again = rebound(
        &a,
        &[
            "--json",
            "enqueue",
            "orders",
            "order-42/charge",
            "--payload",
            r#"{"order":42}"#,
            "--delay",
            "1h",
            "--attempt",
            "1",
            "--last-error",
            "payment gateway: 503",
            "--attr",
            "step=charge",
            "--attr",
            "region=eu",
            "--max-attempts",
            "4",
            "--initial-backoff",
            "1500ms",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(again["deduplicated"], true, "{again:#}");
    assert_eq!(again["transaction_id"], "order-42/charge");
    let generation: u64 = again["generation"]
        .as_str()
        .expect("generation as a string")
        .parse()
        .expect("a decimal generation");
    let due = time(&again["due_time"]);
    let from_now = due - Utc::now();
    assert!(
        from_now > chrono::Duration::minutes(59) && from_now < chrono::Duration::minutes(61),
        "due {due}"
    );

    let table = rebound(&a, &["get", "orders", "order-42/charge"])
        .await
        .ok();
    for line in [
        "status             SCHEDULED\n",
        "attempt            1\n",
        "last_error         payment gateway: 503\n",
        "payload            {\"order\":42}\n",
        "attributes         region=eu step=charge\n",
        "enqueue_count      2\n",
    ] {
        assert!(table.stdout.contains(line), "{line:?} in {table:#?}");
    }

    let doc = rebound(&a, &["get", "orders", "order-42/charge", "--json"])
        .await
        .ok()
        .json();
    assert_eq!(doc["service"], "orders");
    assert_eq!(doc["status"], "SCHEDULED");
    assert_eq!(doc["attempt"], 1);
    assert_eq!(doc["generation"], generation.to_string());
    assert_eq!(time(&doc["due_time"]), due);
    assert_eq!(doc["last_error"], "payment gateway: 503");
    assert_eq!(doc["payload"], r#"{"order":42}"#);
    assert_eq!(doc["payload_base64"], "eyJvcmRlciI6NDJ9");
    assert_eq!(doc["attributes"]["step"], "charge");
    assert_eq!(doc["attributes"]["region"], "eu");
    assert_eq!(doc["policy"]["max_attempts"], 4);
    assert_eq!(doc["policy"]["initial_backoff"], 1.5);
    assert_eq!(doc["enqueue_count"], 2);
    assert!(
        doc["location"]["day"]
            .as_str()
            .is_some_and(|d| d.len() == 10),
        "{doc:#}"
    );
    assert!(time(&doc["first_enqueued_at"]) <= Utc::now());

    // `list` finds it by an attribute and by its error, and not by another value.
    let listed = rebound(&a, &["--json", "list", "orders", "--attr", "step=charge"])
        .await
        .ok()
        .json();
    assert_eq!(
        listed["retries"][0]["transaction_id"], "order-42/charge",
        "{listed:#}"
    );
    assert_eq!(listed["retries"][0]["status"], "SCHEDULED", "{listed:#}");
    assert_eq!(listed["next_page_token"], Value::Null, "{listed:#}");
    let table = rebound(&a, &["list", "orders", "--error", "gateway: 503"])
        .await
        .ok();
    assert!(table.stdout.contains("order-42/charge"), "{table:#?}");
    let none = rebound(&a, &["list", "orders", "--attr", "step=refund"])
        .await
        .ok();
    assert!(
        none.stdout.contains("no retries of orders match"),
        "{none:#?}"
    );
    let dead = rebound(&a, &["--json", "list", "orders", "--status", "dead"])
        .await
        .ok()
        .json();
    assert_eq!(dead["retries"], serde_json::json!([]), "{dead:#}");
    rebound(&a, &["list", "orders", "--page-token", "junk"])
        .await
        .exits(4);

    // `act` reschedules what the same filters select, records it, and skips it the second
    // time; a cancel without --yes is refused before anything is sent.
    let at = (Utc::now() + chrono::Duration::hours(3)).to_rfc3339();
    let args = [
        "act",
        "orders",
        "reschedule",
        "--attr",
        "step=charge",
        "--at",
        &at,
        "--reason",
        "maintenance",
    ];
    let acted = rebound(&a, &args).await.ok();
    assert_eq!(
        acted.stdout,
        "orders: 1 retry rescheduled, 0 skipped (finished, changed meanwhile, or already so), in 1 call\n",
        "{acted:#?}"
    );
    let twice = rebound(&a, &[&["--json"][..], &args[..]].concat())
        .await
        .ok()
        .json();
    assert_eq!(
        (twice["changed"].as_u64(), twice["skipped"].as_u64()),
        (Some(0), Some(1))
    );
    let history = rebound(&a, &["--json", "history", "orders", "order-42/charge"])
        .await
        .ok()
        .json();
    let last = &history["attempts"][history["attempts"].as_array().unwrap().len() - 1];
    assert_eq!(last["outcome"], "RESCHEDULED", "{history:#}");
    assert_eq!(last["error"], "maintenance", "{history:#}");
    rebound(&a, &["act", "orders", "cancel", "--attr", "step=charge"])
        .await
        .exits(2);
    rebound(&a, &["act", "orders", "reschedule"]).await.exits(2);
    assert_eq!(
        status_of(&a, "orders", "order-42/charge").await,
        "SCHEDULED"
    );

    let cancelled = rebound(&a, &["cancel", "orders", "order-42/charge"])
        .await
        .ok();
    assert_eq!(
        cancelled.stdout,
        "cancelled orders order-42/charge: status CANCELLED\n"
    );
    assert_eq!(
        status_of(&a, "orders", "order-42/charge").await,
        "CANCELLED"
    );
    // Cancelling again is no error, and says nothing was cancelled.
    let twice = rebound(&a, &["--json", "cancel", "orders", "order-42/charge"])
        .await
        .ok()
        .json();
    assert_eq!(twice["cancelled"], false);
    assert_eq!(twice["status"], "CANCELLED");
    // Listed as cancelled now, and no longer as scheduled.
    let finished = rebound(
        &a,
        &[
            "--json",
            "list",
            "orders",
            "--status",
            "cancelled",
            "--attr",
            "step=charge",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(
        finished["retries"][0]["transaction_id"], "order-42/charge",
        "{finished:#}"
    );
    assert_eq!(
        finished["retries"][0]["status"], "CANCELLED",
        "{finished:#}"
    );

    // Binary payload from a file, due at an RFC 3339 time.
    let file = std::env::temp_dir().join(format!("rebound-cli-payload-{}", std::process::id()));
    std::fs::write(&file, [0xff, 0x01]).unwrap();
    let at = (Utc::now() + chrono::Duration::minutes(30)).to_rfc3339();
    let path = file.to_str().unwrap().to_string();
    let doc = rebound(
        &a,
        &[
            "--json",
            "enqueue",
            "orders",
            "order-43",
            "--payload-file",
            &path,
            "--due",
            &at,
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(doc["deduplicated"], false);
    let _ = std::fs::remove_file(&file);
    let doc = rebound(&a, &["--json", "get", "orders", "order-43"])
        .await
        .ok()
        .json();
    assert_eq!(doc["payload"], Value::Null);
    assert_eq!(doc["payload_base64"], "/wE=");
    let late = time(&doc["due_time"]) - Utc::now();
    assert!(
        late > chrono::Duration::minutes(29) && late < chrono::Duration::minutes(31),
        "{doc:#}"
    );
    n.finish().await;
}

#[tokio::test]
async fn exit_codes_scripts_can_rely_on() {
    let n = TestNode::with_system_clock(test_config("cli_exit")).await;
    let a = addr(&n);

    // 3: NOT_FOUND, on stderr and as a JSON error document.
    let r = rebound(&a, &["get", "orders", "nope"]).await.exits(3);
    assert!(r.stderr.starts_with("rebound: NOT_FOUND: "), "{r:#?}");
    assert!(r.stdout.is_empty(), "{r:#?}");
    let r = rebound(&a, &["--json", "cancel", "orders", "nope"])
        .await
        .exits(3);
    assert_eq!(r.json()["error"]["code"], "NOT_FOUND");
    assert!(r.json()["error"]["message"].as_str().is_some());

    // 4: the node refused the input, and the message names the field.
    let r = rebound(&a, &["enqueue", "bad name", "t-1"]).await.exits(4);
    assert!(
        r.stderr.starts_with("rebound: INVALID_ARGUMENT: service"),
        "{r:#?}"
    );
    let r = rebound(&a, &["enqueue", "orders", "t-1", "--delay", "40d"])
        .await
        .exits(4);
    assert!(r.stderr.contains("delay"), "{r:#?}");
    let r = rebound(
        &a,
        &["--json", "enqueue", "orders", "t-1", "--max-attempts", "0"],
    )
    .await
    .exits(4);
    assert_eq!(r.json()["error"]["code"], "INVALID_ARGUMENT");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_attempts"),
        "{r:#?}"
    );

    // 2: clap's usage errors, and refused confirmations, which send nothing.
    let r = rebound(&a, &["enqueue", "orders"]).await.exits(2);
    assert!(r.stderr.contains("TRANSACTION_ID"), "{r:#?}");
    let r = rebound(&a, &["--json", "enqueue", "orders"]).await.exits(2);
    assert_eq!(r.json()["error"]["code"], "USAGE");
    let r = rebound(&a, &["--json"]).await.exits(2);
    assert_eq!(r.json()["error"]["code"], "USAGE");
    rebound(&a, &["enqueue", "orders", "t", "--delay", "soon"])
        .await
        .exits(2);
    rebound(&a, &["enqueue", "orders", "keep", "--delay", "1h"])
        .await
        .ok();
    let r = rebound(&a, &["purge", "orders"]).await.exits(2);
    assert!(r.stderr.contains("--yes"), "{r:#?}");
    let r = rebound(&a, &["dlq", "purge", "orders"]).await.exits(2);
    assert!(r.stderr.contains("--yes"), "{r:#?}");
    assert_eq!(status_of(&a, "orders", "keep").await, "SCHEDULED");

    // 5: nothing listens (safe to retry), with the JSON error too.
    let r = rebound("127.0.0.1:1", &["get", "orders", "x"])
        .await
        .exits(5);
    assert!(
        r.stderr
            .starts_with("rebound: UNAVAILABLE: cannot connect to 127.0.0.1:1"),
        "{r:#?}"
    );
    let r = rebound("127.0.0.1:1", &["--json", "ring"]).await.exits(5);
    assert_eq!(r.json()["error"]["code"], "UNAVAILABLE");

    // 5: something listens but never answers: --timeout bounds the wait.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let started = std::time::Instant::now();
    let r = rebound(&silent_addr, &["--timeout", "1s", "get", "orders", "x"])
        .await
        .exits(5);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        r.stderr.contains("DEADLINE_EXCEEDED") || r.stderr.contains("UNAVAILABLE"),
        "{r:#?}"
    );
    hold.abort();
    n.finish().await;
}

#[tokio::test]
async fn ring_lists_this_node_with_every_token() {
    let n = TestNode::with_system_clock(test_config("cli_ring")).await;
    let a = addr(&n);
    let started = std::time::Instant::now();
    let doc = loop {
        let doc = rebound(&a, &["ring", "--json"]).await.ok().json();
        let node = &doc["nodes"][0];
        let width: i128 = node["ranges"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| {
                        let s: i128 = r["start"].as_str().unwrap().parse().unwrap();
                        let e: i128 = r["end"].as_str().unwrap().parse().unwrap();
                        e - s + 1
                    })
                    .sum()
            })
            .unwrap_or(0);
        if node["compactor"] == true && width == 1i128 << 64 {
            break doc;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the ring did not settle: {doc:#}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(doc["nodes"].as_array().unwrap().len(), 1, "{doc:#}");
    assert_eq!(doc["nodes"][0]["node_id"], "node-a");
    assert_eq!(doc["nodes"][0]["address"], a);
    let text = rebound(&a, &["ring"]).await.ok().stdout;
    let first = text.lines().nth(1).expect("a node row");
    assert!(first.starts_with("node-a"), "{text}");
    assert!(first.contains(&a), "{text}");
    assert!(first.ends_with("100.0%"), "{text}");
    assert!(text.contains("-9223372036854775808"), "{text}");
    n.finish().await;
}

// ---- AdminService ----------------------------------------------------------------------------

#[tokio::test]
async fn inspect_window_shows_the_tiers() {
    let n = TestNode::with_system_clock(test_config("cli_inspect")).await;
    let a = addr(&n);
    rebound(&a, &["enqueue", "insp-a", "i1", "--delay", "1h"])
        .await
        .ok();
    let retry = rebound(&a, &["--json", "get", "insp-a", "i1"])
        .await
        .ok()
        .json();
    let loc = &retry["location"];
    let day = loc["day"].as_str().unwrap().to_string();
    let window = loc["window"].as_u64().unwrap().to_string();

    let doc = rebound(&a, &["--json", "inspect-window", &day, &window])
        .await
        .ok()
        .json();
    assert_eq!(doc["day_listed"], true, "{doc:#}");
    assert_eq!(doc["window_listed"], true);
    assert_eq!(doc["readable"], false, "an hour ahead");
    assert_eq!(doc["window_seconds"], 2);
    assert_eq!(
        (time(&doc["window_end"]) - time(&doc["window_start"])).num_seconds(),
        2
    );
    let instance = doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["service"] == "insp-a" && i["instance"] == loc["instance"])
        .unwrap_or_else(|| panic!("no instance {loc}: {doc:#}"));
    let bucket = instance["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == loc["bucket"])
        .unwrap_or_else(|| panic!("no bucket {loc}: {doc:#}"));
    assert_eq!(bucket["pointers"], 1);

    let text = rebound(&a, &["inspect-window", &day, &window])
        .await
        .ok()
        .stdout;
    assert!(text.contains("tier 2 window listed  yes\n"), "{text}");
    assert!(text.contains("tier 5 pointers       1\n"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("insp-a ")), "{text}");

    let r = rebound(&a, &["inspect-window", "2026-13-45", "0"])
        .await
        .exits(4);
    assert!(r.stderr.contains("day"), "{r:#?}");
    n.finish().await;
}

#[tokio::test]
async fn token_from_the_flag_or_the_environment() {
    let mut cfg = test_config("cli_token");
    cfg.credentials_file = Some(credentials_file(
        "cli_token",
        &[
            ("pay", "pay-secret", &["payments"], false),
            ("ops", "ops-secret", &[], true),
        ],
    ));
    let n = TestNode::with_system_clock(cfg).await;
    let a = addr(&n);
    let r = rebound(&a, &["services"]).await.exits(8);
    assert!(r.stderr.contains("UNAUTHENTICATED"), "{r:#?}");
    rebound(
        &a,
        &[
            "--token",
            "pay-secret",
            "enqueue",
            "payments",
            "p-1",
            "--delay",
            "1h",
        ],
    )
    .await
    .ok();
    let r = rebound(&a, &["--token", "pay-secret", "services"])
        .await
        .exits(8);
    assert!(r.stderr.contains("PERMISSION_DENIED"), "{r:#?}");
    let doc = rebound(&a, &["--token", "ops-secret", "services", "--json"])
        .await
        .ok()
        .json();
    assert_eq!(doc["services"][0]["service"], "payments", "{doc:#}");
    // REBOUND_TOKEN works as the flag does.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_rebound"));
    let out = cmd
        .args(["--addr", &a, "get", "payments", "p-1", "--json"])
        .env_remove("REBOUND_ADDR")
        .env("REBOUND_TOKEN", "pay-secret")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    n.finish().await;
}

#[tokio::test]
async fn subscribe_receives_prints_and_acks() {
    let n = TestNode::with_system_clock(test_config("cli_subscribe")).await;
    let a = addr(&n);
    for (txid, payload) in [("order-1", "one"), ("order-2", "two")] {
        rebound(
            &a,
            &[
                "enqueue",
                "orders",
                txid,
                "--payload",
                payload,
                "--delay",
                "1s",
            ],
        )
        .await
        .ok();
    }

    // The first delivery acked SUCCEEDED, printed as it arrives.
    let first = rebound(
        &a,
        &["subscribe", "orders", "--count", "1", "--wait", "60s"],
    )
    .await
    .ok();
    assert!(first.stdout.contains("-> acked SUCCEEDED\n"), "{first:#?}");
    // The second one asked to retry, in --json: one document listing what arrived.
    let second = rebound(
        &a,
        &[
            "--json",
            "subscribe",
            "orders",
            "--count",
            "1",
            "--wait",
            "60s",
            "--outcome",
            "retry",
            "--retry-after",
            "1h",
            "--error",
            "still down",
        ],
    )
    .await
    .ok()
    .json();
    let got = &second["deliveries"][0];
    assert_eq!(got["acked"], "RETRY", "{second:#}");
    let retried = got["transaction_id"].as_str().expect("transaction_id");
    let done = if retried == "order-1" {
        "order-2"
    } else {
        "order-1"
    };
    assert!(
        first.stdout.contains(&format!("orders {done} ")),
        "{first:#?}"
    );
    assert_eq!(status_of(&a, "orders", done).await, "SUCCEEDED");
    assert_eq!(status_of(&a, "orders", retried).await, "SCHEDULED");
    let retry = rebound(&a, &["--json", "get", "orders", retried])
        .await
        .ok()
        .json();
    assert_eq!(retry["last_error"], "still down", "{retry:#}");
    // Enqueued without --attempt: the failed call was attempt 1, so each was delivered as
    // attempt 2, and `get` shows the attempt that ran last, 2, whether it succeeded or is
    // waiting for attempt 3.
    assert!(
        first.stdout.contains(&format!("orders {done} attempt 2 ")),
        "{first:#?}"
    );
    assert_eq!(got["attempt"], 2, "{second:#}");
    assert_eq!(retry["attempt"], 2, "{retry:#}");
    let succeeded = rebound(&a, &["--json", "get", "orders", done])
        .await
        .ok()
        .json();
    assert_eq!(succeeded["attempt"], 2, "{succeeded:#}");

    // `history` shows each attempt as its ack ended it, and `get` ends with the same table.
    let history = rebound(&a, &["history", "orders", retried]).await.ok();
    for cell in ["ATTEMPT", "RETRY", "still down", "1h", "rebound-cli-"] {
        assert!(history.stdout.contains(cell), "{cell:?} in {history:#?}");
    }
    let table = rebound(&a, &["get", "orders", retried]).await.ok();
    assert!(table.stdout.contains("still down"), "{table:#?}");
    let doc = rebound(&a, &["--json", "history", "orders", done])
        .await
        .ok()
        .json();
    assert_eq!(doc["status"], "SUCCEEDED", "{doc:#}");
    assert_eq!(doc["attempts_dropped"], 0, "{doc:#}");
    let only = &doc["attempts"][0];
    assert_eq!(only["outcome"], "SUCCEEDED", "{doc:#}");
    assert_eq!(only["attempt"], 2, "{doc:#}");
    assert_eq!(only["retry_after"], Value::Null, "{doc:#}");
    assert!(
        only["executor_id"]
            .as_str()
            .is_some_and(|e| e.starts_with("rebound-cli-")),
        "{doc:#}"
    );
    assert!(
        only["duration"].as_f64().is_some_and(|d| d >= 0.0),
        "{doc:#}"
    );
    assert_eq!(doc["attempts"].as_array().map(Vec::len), Some(1), "{doc:#}");
    rebound(&a, &["history", "orders", "no-such-retry"])
        .await
        .exits(3);

    // Nothing more is due: --wait ends it, as an error when --count was not reached.
    rebound(&a, &["subscribe", "orders", "--count", "1", "--wait", "1s"])
        .await
        .exits(5);
    let idle = rebound(&a, &["subscribe", "orders", "--wait", "1s"])
        .await
        .ok();
    assert!(idle.stdout.contains("no delivery"), "{idle:#?}");
    // --retry-after belongs to --outcome retry: refused before anything is received.
    rebound(&a, &["subscribe", "orders", "--retry-after", "1s"])
        .await
        .exits(2);
}
