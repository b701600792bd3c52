//! Cassandra frozen (SIGSTOP) and stopped mid-test: enqueues fail promptly with
//! DEADLINE_EXCEEDED or UNAVAILABLE, never hang or panic, leave nothing that could be delivered
//! twice, and the node recovers on its own when Cassandra returns.
//!
//! This binary stops the shared Cassandra, so it holds a single test; cargo runs test binaries
//! one after another, so no other test sees the outage.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use rebound_integration_tests::{enqueue_req, eventually, http_get, test_config, TestNode};
use rebound_proto::v1 as pb;
use tonic::Code;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cassandra")
}

fn cassandra(args: &[&str]) -> std::process::Output {
    Command::new(script())
        .args(args)
        .output()
        .expect("run scripts/cassandra")
}

fn cassandra_pid() -> String {
    let out = cassandra(&["pid"]);
    assert!(
        out.status.success(),
        "Cassandra is not running under scripts/cassandra"
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Resumes or restarts Cassandra even when an assertion fails half-way.
struct Restore {
    pid: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.pid]).status();
        if !cassandra(&["status"]).status.success() {
            let out = cassandra(&["start"]);
            eprintln!(
                "restarted cassandra: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The status code of `/readyz` (0 when the listener does not answer).
async fn readyz(addr: std::net::SocketAddr) -> u16 {
    match tokio::time::timeout(Duration::from_secs(5), http_get(addr, "/readyz")).await {
        Ok(Ok((code, _))) => code,
        _ => 0,
    }
}

fn req(txid: &str) -> pb::EnqueueRetryRequest {
    enqueue_req("outage", txid, 5_000)
}

/// Enqueues `txid`, returning the code and how long the call took.
async fn try_enqueue(n: &TestNode, txid: &str) -> (Code, Duration) {
    let mut c = n.client.clone();
    let started = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(20), c.enqueue_retry(req(txid)))
        .await
        .unwrap_or_else(|_| panic!("enqueue of {txid} hung for 20 s"));
    (
        res.map(|_| Code::Ok).unwrap_or_else(|s| s.code()),
        started.elapsed(),
    )
}

async fn until_ok(n: &TestNode, txid: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (code, _) = try_enqueue(n, txid).await;
        if code == Code::Ok {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "node did not recover within {within:?}: last {code:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn cassandra_outage_gives_prompt_errors_and_the_node_recovers() {
    let mut cfg = test_config("outage");
    cfg.cassandra_request_timeout_ms = 1_000;
    cfg.cassandra_connect_timeout_ms = 1_000;
    cfg.http_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.http_listen_set = true;
    let n = TestNode::with_system_clock(cfg).await;
    let probes = n
        .node
        .as_ref()
        .unwrap()
        .http_addr()
        .expect("the probes listener");
    eventually(
        Duration::from_secs(10),
        "/readyz to answer 200",
        || async move { readyz(probes).await == 200 },
    )
    .await;
    let mut outcomes: BTreeMap<String, Code> = BTreeMap::new();
    let (code, _) = try_enqueue(&n, "before").await;
    assert_eq!(code, Code::Ok);
    outcomes.insert("before".into(), code);

    // Frozen: requests time out.
    let pid = cassandra_pid();
    let guard = Restore { pid: pid.clone() };
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    for i in 0..3 {
        let txid = format!("frozen-{i}");
        let (code, took) = try_enqueue(&n, &txid).await;
        eprintln!("frozen enqueue: {code:?} in {took:?}");
        assert!(
            matches!(code, Code::DeadlineExceeded | Code::Unavailable),
            "frozen Cassandra gave {code:?}"
        );
        assert!(took < Duration::from_secs(10), "took {took:?}");
        outcomes.insert(txid, code);
    }
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let took = until_ok(&n, "thawed", Duration::from_secs(30)).await;
    eprintln!("recovered from the freeze in {took:?}");
    outcomes.insert("thawed".into(), Code::Ok);

    // Stopped: requests are refused as unavailable (or time out while connections die).
    let out = cassandra(&["stop"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not ready while Cassandra is down.
    eventually(
        Duration::from_secs(20),
        "/readyz to answer 503",
        || async move { readyz(probes).await == 503 },
    )
    .await;
    for i in 0..3 {
        let txid = format!("down-{i}");
        let (code, took) = try_enqueue(&n, &txid).await;
        eprintln!("down enqueue: {code:?} in {took:?}");
        assert!(
            matches!(code, Code::Unavailable | Code::DeadlineExceeded),
            "stopped Cassandra gave {code:?}"
        );
        assert!(took < Duration::from_secs(10), "took {took:?}");
        outcomes.insert(txid, code);
    }
    let out = cassandra(&["start"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let took = until_ok(&n, "after", Duration::from_secs(90)).await;
    eprintln!("recovered from the restart in {took:?}");
    // Ready again, without a restart of the node.
    eventually(
        Duration::from_secs(30),
        "/readyz to answer 200 again",
        || async move { readyz(probes).await == 200 },
    )
    .await;
    outcomes.insert("after".into(), Code::Ok);
    drop(guard);

    // Nothing half-written that could be delivered: every state row has exactly one pointer
    // with its generation, and every successful enqueue has its state row.
    let res = n
        .cql
        .query_unpaged(
            format!(
                "SELECT transaction_id, generation FROM {}.transactions",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let states: BTreeMap<String, i64> = res
        .rows::<(String, i64)>()
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let res = n
        .cql
        .query_unpaged(
            format!(
                "SELECT transaction_id, generation FROM {}.retry_transactions_by_bucket",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let pointers: Vec<(String, i64)> = res
        .rows::<(String, i64)>()
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for (txid, code) in &outcomes {
        if *code == Code::Ok {
            assert!(
                states.contains_key(txid),
                "{txid} was acknowledged but has no state row"
            );
        }
    }
    for (txid, generation) in &states {
        let live = pointers
            .iter()
            .filter(|(t, g)| t == txid && g == generation)
            .count();
        assert_eq!(
            live, 1,
            "{txid}: state row without exactly one live pointer"
        );
    }
    n.finish().await;
}
