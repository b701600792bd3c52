//! A multi-day backlog (issue 14, defects 1 and 2): a node whose clock runs three days behind
//! Cassandra's (clock sync off, standing for a node that wrote them three days ago) enqueues
//! retries and is killed with SIGKILL; a normal node drains them with one executor. Every one
//! is delivered, the old day's retries before today's, and the directory is empty afterwards
//! but for today's day. Needs the Cassandra of `scripts/cassandra start`.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack_succeeded as ack, count_rows, cql, drop_keyspace, enqueue_req, next_delivery as next,
    process::{connect, free_port, spawn_node_with},
    subscribe, unique_keyspace, DIRECTORY_TABLES,
};
use rebound_proto::v1::retry_service_client::RetryServiceClient;
use tonic::transport::Channel;

const DAY_MS: i64 = 86_400_000;
const OLD: usize = 600;

fn skewed() -> Vec<(&'static str, String)> {
    vec![
        ("REBOUND_CLOCK_SYNC", "false".into()),
        ("REBOUND_TEST_CLOCK_SKEW_MS", (-3 * DAY_MS).to_string()),
    ]
}

/// Enqueues `n` retries one by one, 8 at a time, with delays of 0-1.5 s.
async fn enqueue_singles(ch: &Channel, prefix: &str, n: usize) {
    let ids: Vec<usize> = (0..n).collect();
    for chunk in ids.chunks(8) {
        let calls = chunk.iter().map(|i| {
            let mut c = RetryServiceClient::new(ch.clone());
            let req = enqueue_req(
                "payments",
                &format!("{prefix}-{i:04}"),
                (*i as u64 * 37) % 1500,
            );
            async move { c.enqueue_retry(req).await.expect("enqueue") }
        });
        futures::future::join_all(calls).await;
    }
}

async fn drain(
    ch: &Channel,
    want: &BTreeSet<String>,
    within: Duration,
) -> (Vec<String>, BTreeSet<String>) {
    let mut sub = subscribe(ch, "payments", 50).await;
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    let started = Instant::now();
    while !want.is_subset(&seen) && started.elapsed() < within {
        let Some(d) = next(&mut sub, Duration::from_secs(2)).await else {
            continue;
        };
        ack(ch, &d).await;
        seen.insert(d.transaction_id.clone());
        order.push(d.transaction_id);
    }
    (order, seen)
}

async fn directory_left(cql: &scylla::client::session::Session, ks: &str) -> Vec<String> {
    let mut left = Vec::new();
    // Every tier below the days: today's day stays.
    for t in &DIRECTORY_TABLES[1..] {
        let n = count_rows(cql, ks, t).await;
        if n > 0 {
            left.push(format!("{t}: {n}"));
        }
    }
    left
}

/// Runs the scenario; `overlap`: the normal node (with its executor) is up while the skewed
/// one writes, as it would be in a cluster where one node's clock is off.
async fn backlog(overlap: bool) {
    let keyspace = unique_keyspace("backlog");
    let (port_a, port_b) = (free_port(), free_port());
    let mut b = None;
    if overlap {
        b = Some(spawn_node_with(&keyspace, port_b, "normal", &[]));
    }
    let old = spawn_node_with(&keyspace, port_a, "skewed", &skewed());
    let ch_a = connect(port_a).await;
    if overlap {
        // The normal node drains while the skewed one writes.
        let ch_b = connect(port_b).await;
        let want: BTreeSet<String> = (0..OLD).map(|i| format!("old-{i:04}")).collect();
        let drainer = tokio::spawn({
            let want = want.clone();
            async move { drain(&ch_b, &want, Duration::from_secs(90)).await }
        });
        enqueue_singles(&ch_a, "old", OLD).await;
        old.kill();
        let (_, seen) = drainer.await.unwrap();
        let missing: Vec<_> = want.difference(&seen).collect();
        assert!(missing.is_empty(), "never delivered: {missing:?}");
    } else {
        enqueue_singles(&ch_a, "old", OLD).await;
        old.kill();
        b = Some(spawn_node_with(&keyspace, port_b, "normal", &[]));
        let ch_b = connect(port_b).await;
        // The executor is there from the start; today's retries, due at once, are enqueued
        // while the old day drains, and must wait for it.
        let mut want: BTreeSet<String> = (0..OLD).map(|i| format!("old-{i:04}")).collect();
        want.extend((0..50).map(|i| format!("new-{i:04}")));
        let drainer = tokio::spawn({
            let (want, ch_b) = (want.clone(), ch_b.clone());
            async move { drain(&ch_b, &want, Duration::from_secs(90)).await }
        });
        enqueue_singles(&ch_b, "new", 50).await;
        let (order, seen) = drainer.await.unwrap();
        let missing: Vec<_> = want.difference(&seen).collect();
        assert!(missing.is_empty(), "never delivered: {missing:?}");
        let first_new = order.iter().position(|t| t.starts_with("new-")).unwrap();
        let late_old = order[first_new..]
            .iter()
            .filter(|t| t.starts_with("old-"))
            .count();
        if late_old > 0 {
            let mut c = RetryServiceClient::new(ch_b.clone());
            let mut where_ = Vec::new();
            let late: Vec<&String> = order[first_new..]
                .iter()
                .filter(|t| t.starts_with("old-"))
                .take(6)
                .collect();
            for t in late.into_iter().chain([&order[first_new], &order[0]]) {
                let r = c
                    .get_retry(rebound_proto::v1::GetRetryRequest {
                        service: "payments".into(),
                        transaction_id: t.clone(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                where_.push(format!("{t}: {:?} due {:?}", r.location, r.due_time));
            }
            panic!(
                "{late_old} three-day-old retries were delivered after the first of today's (at {first_new} of {}): {where_:#?}",
                order.len()
            );
        }
    }
    let cql = cql().await;
    let started = Instant::now();
    loop {
        let left = directory_left(&cql, &keyspace).await;
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "directory not emptied: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(b);
    drop_keyspace(&keyspace).await;
}

#[tokio::test]
async fn a_killed_nodes_three_day_old_backlog_is_drained_oldest_first() {
    backlog(false).await;
}

#[tokio::test]
async fn a_node_three_days_behind_loses_nothing_while_another_drains() {
    backlog(true).await;
}
