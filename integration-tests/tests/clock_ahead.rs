//! A node whose clock runs 3 s ahead of Cassandra's, with clock sync off, delivers nothing
//! before the due time it answered, measured on Cassandra's clock (this machine's: the test
//! Cassandra runs here). Before, it read its own windows on its own clock and delivered up to
//! its lead early (docs/architecture.md, "Guarantees across nodes", Clocks). Needs the
//! Cassandra of `scripts/cassandra start`.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use rebound_integration_tests::{
    ack_succeeded as ack, drop_keyspace, enqueue_req, next_delivery as next,
    process::{connect, free_port, spawn_node_with},
    subscribe, unique_keyspace,
};
use rebound_proto::v1::retry_service_client::RetryServiceClient;

const AHEAD_MS: i64 = 3_000;
const N: usize = 24;

fn real_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn ts_ms(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("a due time");
    t.seconds * 1_000 + i64::from(t.nanos) / 1_000_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_ahead_of_cassandra_delivers_nothing_before_the_due_time_it_answered() {
    let keyspace = unique_keyspace("ahead");
    let port = free_port();
    let node = spawn_node_with(
        &keyspace,
        port,
        "ahead",
        &[
            ("REBOUND_CLOCK_SYNC", "false".into()),
            ("REBOUND_TEST_CLOCK_SKEW_MS", AHEAD_MS.to_string()),
        ],
    );
    let ch = connect(port).await;
    let mut sub = subscribe(&ch, "payments", 50).await;
    let mut due = BTreeMap::new();
    for i in 0..N {
        let tx = format!("ahead-{i:02}");
        let r = RetryServiceClient::new(ch.clone())
            .enqueue_retry(enqueue_req("payments", &tx, (i as u64 * 97) % 2_000))
            .await
            .expect("enqueue")
            .into_inner();
        due.insert(tx, ts_ms(&r.due_time));
    }
    let mut early = Vec::new();
    let mut seen = 0;
    let started = Instant::now();
    while seen < N && started.elapsed() < Duration::from_secs(60) {
        let Some(d) = next(&mut sub, Duration::from_secs(2)).await else {
            continue;
        };
        let at = real_now_ms();
        let answered = due[&d.transaction_id];
        if at < answered {
            early.push(format!("{} {} ms early", d.transaction_id, answered - at));
        }
        ack(&ch, &d).await;
        seen += 1;
    }
    assert_eq!(seen, N, "only {seen} of {N} delivered");
    assert!(
        early.is_empty(),
        "delivered before the due time the node answered, on Cassandra's clock: {early:?}"
    );
    node.kill();
    drop_keyspace(&keyspace).await;
}
