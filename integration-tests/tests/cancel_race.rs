//! A cancel answered on one node is never undone by an ack on another (issue 14, defect 3;
//! docs/architecture.md, "Guarantees across nodes"). Two `rebound-server` processes share a
//! keyspace; 200 retries are delivered, and for each one an `Ack(RETRY, retry_after = 0)` or an
//! `Ack(SUCCEEDED)` on the node that delivered it races a `CancelRetry` on the other node. Every
//! cancel that answered `cancelled = true` must stay cancelled: GetRetry says CANCELLED, and the
//! retry is never delivered again. Needs the Cassandra of `scripts/cassandra start`.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack, ack_req, batch_accepted, drop_keyspace, enqueue_req,
    process::{connect, free_port, spawn_node, wait_for_shared_ring},
    subscribe_all, unique_keyspace,
};
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tokio::sync::mpsc;
use tonic::transport::Channel;

const ROUNDS: usize = 200;

#[tokio::test]
async fn a_cancel_on_one_node_is_not_undone_by_a_retry_ack_on_another() {
    let keyspace = unique_keyspace("cancel");
    let ports = [free_port(), free_port()];
    let nodes: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| spawn_node(&keyspace, *p, &format!("n{i}")))
        .collect();
    let mut chans: Vec<Channel> = Vec::new();
    for p in ports {
        chans.push(connect(p).await);
    }
    // Both nodes hold part of the ring before anything is due.
    wait_for_shared_ring(&chans[0], 2).await;
    let mut rx = subscribe_all(&chans, "payments", 500).await;
    let resp = RetryServiceClient::new(chans[0].clone())
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..ROUNDS)
                .map(|i| enqueue_req("payments", &format!("race-{i:03}"), 0))
                .collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(batch_accepted(&resp));

    // Each first delivery starts a race; its outcome comes back on `done`.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, bool, Instant)>();
    let mut raced: HashSet<String> = HashSet::new();
    let mut cancelled_at: HashMap<String, Instant> = HashMap::new();
    let mut again: Vec<String> = Vec::new();
    let mut finished = 0;
    let mut quiet_since: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        tokio::select! {
            Some((node, d)) = rx.recv() => {
                let txid = d.transaction_id.clone();
                if let Some(at) = cancelled_at.get(&txid) {
                    // Delivered after its cancel answered: the cancel was undone.
                    if Instant::now() > *at {
                        again.push(txid.clone());
                    }
                    continue;
                }
                if !raced.insert(txid.clone()) {
                    // Delivered again before its cancel answered (or after a false one).
                    continue;
                }
                let (acker, canceller) = (chans[node].clone(), chans[1 - node].clone());
                let done_tx = done_tx.clone();
                // Every other race is a SUCCEEDED ack: it must lose to the cancel too.
                let ack = if raced.len().is_multiple_of(2) {
                    pb::AckRequest {
                        delivery_id: d.delivery_id.clone(),
                        outcome: pb::AckOutcome::Retry as i32,
                        retry_after: Some(prost_types::Duration::default()),
                        error: "race".into(),
                        ..Default::default()
                    }
                } else {
                    pb::AckRequest {
                        delivery_id: d.delivery_id.clone(),
                        outcome: pb::AckOutcome::Succeeded as i32,
                        ..Default::default()
                    }
                };
                tokio::spawn(async move {
                    let mut executor = ExecutorServiceClient::new(acker);
                    let ack = executor.ack(ack);
                    let mut retries = RetryServiceClient::new(canceller);
                    let cancel = retries.cancel_retry(pb::CancelRetryRequest {
                        service: "payments".into(),
                        transaction_id: txid.clone(),
                    });
                    let (_ack, cancel) = tokio::join!(ack, cancel);
                    let cancelled = cancel.map(|r| r.into_inner().cancelled).unwrap_or(false);
                    let _ = done_tx.send((txid, cancelled, Instant::now()));
                });
            }
            Some((txid, cancelled, at)) = done_rx.recv() => {
                finished += 1;
                if cancelled {
                    cancelled_at.insert(txid, at);
                }
                if finished == ROUNDS {
                    quiet_since = Some(Instant::now());
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        // Retries acked with retry_after = 0 are due again within two windows: wait five.
        if quiet_since.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {finished} of {ROUNDS} rounds finished"
        );
    }
    assert!(
        cancelled_at.len() > ROUNDS / 2,
        "most cancels find the retry scheduled: {} of {ROUNDS}",
        cancelled_at.len()
    );
    assert!(
        again.is_empty(),
        "{} cancelled retries were delivered again: {again:?}",
        again.len()
    );
    let mut retries = RetryServiceClient::new(chans[1].clone());
    for txid in cancelled_at.keys() {
        let r = retries
            .get_retry(pb::GetRetryRequest {
                service: "payments".into(),
                transaction_id: txid.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.status,
            pb::RetryStatus::Cancelled as i32,
            "{txid} answered cancelled and is not"
        );
    }
    // The nodes stop before their keyspace goes.
    drop(nodes);
    drop_keyspace(&keyspace).await;
}

/// Two enqueues of one transaction on two nodes at once leave exactly one live retry
/// (docs/architecture.md, "Guarantees across nodes"): 200 transactions are each enqueued on both
/// nodes at the same moment (one due at once, one a second later); every one is delivered exactly
/// once and then never again.
#[tokio::test]
async fn two_enqueues_of_one_transaction_on_two_nodes_leave_one_live_retry() {
    let keyspace = unique_keyspace("twoenq");
    let ports = [free_port(), free_port()];
    let nodes: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| spawn_node(&keyspace, *p, &format!("n{i}")))
        .collect();
    let mut chans: Vec<Channel> = Vec::new();
    for p in ports {
        chans.push(connect(p).await);
    }
    let mut rx = subscribe_all(&chans, "payments", 500).await;
    let enqueue = |ch: Channel, txid: String, delay_s: u64| async move {
        RetryServiceClient::new(ch)
            .enqueue_retry(enqueue_req("payments", &txid, delay_s * 1000))
            .await
    };
    for chunk in (0..ROUNDS).collect::<Vec<_>>().chunks(20) {
        let calls = chunk.iter().map(|i| {
            let txid = format!("twice-{i:03}");
            let a = enqueue(chans[0].clone(), txid.clone(), 0);
            let b = enqueue(chans[1].clone(), txid, 1);
            async move {
                let (a, b) = tokio::join!(a, b);
                a.expect("enqueue on n0");
                b.expect("enqueue on n1");
            }
        });
        futures::future::join_all(calls).await;
    }
    let mut delivered: HashMap<String, usize> = HashMap::new();
    let mut last = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(90);
    while last.elapsed() < Duration::from_secs(5) || delivered.len() < ROUNDS {
        assert!(
            Instant::now() < deadline,
            "only {} of {ROUNDS} transactions delivered",
            delivered.len()
        );
        let Ok(Some((node, d))) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await
        else {
            continue;
        };
        last = Instant::now();
        *delivered.entry(d.transaction_id.clone()).or_default() += 1;
        ack(&chans[node], ack_req(&d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
    }
    let twice: Vec<_> = delivered.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    // The nodes stop before their keyspace goes.
    drop(nodes);
    drop_keyspace(&keyspace).await;
}
