//! The node killed with SIGKILL in the middle of compensation chains (docs/architecture.md,
//! "Compensation chains"): after a restart every chain runs to its end, and no compensation is
//! delivered before the one ahead of it in its chain was acknowledged SUCCEEDED. Needs the
//! Cassandra of `scripts/cassandra start`.

use std::{collections::HashMap, time::Duration};

use rebound_integration_tests::{
    ack, ack_req, drop_keyspace, enqueue_req, get_retry, next_delivery as next,
    process::{connect, free_port, spawn_node},
    subscribe, unique_keyspace,
};
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use tonic::transport::Channel;

const SAGAS: usize = 12;
const STEPS: usize = 3;

fn compensation_id(saga: usize, k: usize) -> String {
    format!("s-{saga:02}/c{k}")
}

/// What the test's executors saw, in order.
#[derive(Default)]
struct Seen {
    events: usize,
    /// For each compensation: the event at which it was first delivered.
    first_delivered: HashMap<String, usize>,
    /// For each compensation: the event at which its first SUCCEEDED ack was sent.
    first_acked: HashMap<String, usize>,
    undo_acks: usize,
}

/// Serves both services on `ch` until `stop(seen)` or `within` passes: steps are acked FAILED,
/// compensations SUCCEEDED.
async fn serve(ch: &Channel, seen: &mut Seen, within: Duration, stop: impl Fn(&Seen) -> bool) {
    let mut steps = subscribe(ch, "saga-steps", 50).await;
    let mut undo = subscribe(ch, "saga-undo", 50).await;
    let started = std::time::Instant::now();
    while !stop(seen) && started.elapsed() < within {
        tokio::select! {
            Some(d) = next(&mut steps, Duration::from_millis(200)) => {
                let _ = ack(ch, ack_req(&d, pb::AckOutcome::Failed)).await;
            }
            Some(d) = next(&mut undo, Duration::from_millis(200)) => {
                seen.events += 1;
                seen.first_delivered.entry(d.transaction_id.clone()).or_insert(seen.events);
                seen.events += 1;
                seen.first_acked.entry(d.transaction_id.clone()).or_insert(seen.events);
                seen.undo_acks += 1;
                let _ = ack(ch, ack_req(&d, pb::AckOutcome::Succeeded)).await;
            }
            else => {}
        }
    }
}

#[tokio::test]
async fn sigkill_mid_chain_then_restart_runs_every_chain_to_its_end_in_order() {
    let keyspace = unique_keyspace("saga_kill");
    let port = free_port();
    let first = spawn_node(&keyspace, port, "saga-kill");
    let ch = connect(port).await;
    let mut retries = RetryServiceClient::new(ch.clone());
    for saga in 0..SAGAS {
        let mut r = enqueue_req("saga-steps", &format!("s-{saga:02}"), 0);
        r.attempt = 1;
        r.compensations = (1..=STEPS)
            .map(|k| pb::Compensation {
                service: "saga-undo".into(),
                transaction_id: compensation_id(saga, k),
                payload: compensation_id(saga, k).into_bytes(),
                ..Default::default()
            })
            .collect();
        retries.enqueue_retry(r).await.unwrap();
    }
    let mut seen = Seen::default();
    // About half of the compensations acknowledged, then SIGKILL: no shutdown hook.
    serve(&ch, &mut seen, Duration::from_secs(60), |s| {
        s.undo_acks >= SAGAS * STEPS / 2
    })
    .await;
    assert!(
        seen.undo_acks >= SAGAS * STEPS / 2,
        "chains ran before the kill"
    );
    first.kill();

    let second = spawn_node(&keyspace, port, "saga-kill");
    let ch = connect(port).await;
    let all_done = |ch: Channel| async move {
        for saga in 0..SAGAS {
            let step = get_retry(&ch, "saga-steps", &format!("s-{saga:02}")).await;
            let done = step.chain.is_some_and(|c| {
                c.compensations
                    .iter()
                    .all(|m| m.status == pb::RetryStatus::Succeeded as i32)
            });
            if !done {
                return false;
            }
        }
        true
    };
    let started = std::time::Instant::now();
    while !all_done(ch.clone()).await {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "chains not finished after the restart"
        );
        serve(&ch, &mut seen, Duration::from_secs(3), |_| false).await;
    }
    for saga in 0..SAGAS {
        let step = get_retry(&ch, "saga-steps", &format!("s-{saga:02}")).await;
        assert_eq!(step.status, pb::RetryStatus::Dead as i32);
        for k in 2..=STEPS {
            let (before, this) = (compensation_id(saga, k - 1), compensation_id(saga, k));
            let acked = seen.first_acked[&before];
            let delivered = seen.first_delivered[&this];
            assert!(
                delivered > acked,
                "{this} was delivered (event {delivered}) before {before} was acked SUCCEEDED (event {acked})"
            );
        }
    }
    drop(second);
    drop_keyspace(&keyspace).await;
}
