//! A cancel answered on one node is never undone by an ack on another (issue 14, defect 3;
//! docs/architecture.md, "Guarantees across nodes"). Two `rebound-server` processes share a
//! keyspace; 200 retries are delivered, and for each one an `Ack(RETRY, retry_after = 0)` or an
//! `Ack(SUCCEEDED)` on the node that delivered it races a `CancelRetry` on the other node. Every
//! cancel that answered `cancelled = true` must stay cancelled: GetRetry says CANCELLED, and the
//! retry is never delivered again. The same holds against ActOnRetries on the other node.
//! Needs the Cassandra of `scripts/cassandra start`.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack, ack_req, batch_accepted, drop_keyspace, enqueue_req,
    process::{connect, free_port, shared_ring, spawn_node},
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
    let (nodes, chans) = shared_ring(&keyspace, 2).await;
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

    // Every other race is a SUCCEEDED ack: it must lose to the cancel too.
    let (kept, again) = race_first_deliveries(&mut rx, ROUNDS, |round, node, d| {
        let (acker, canceller) = (chans[node].clone(), chans[1 - node].clone());
        let ack = if round.is_multiple_of(2) {
            pb::AckRequest {
                delivery_id: d.delivery_id.clone(),
                outcome: pb::AckOutcome::Retry as i32,
                retry_after: Some(prost_types::Duration::default()),
                error: "race".into(),
                ..Default::default()
            }
        } else {
            ack_req(&d, pb::AckOutcome::Succeeded)
        };
        async move {
            let mut executor = ExecutorServiceClient::new(acker);
            let ack = executor.ack(ack);
            let mut retries = RetryServiceClient::new(canceller);
            let cancel = retries.cancel_retry(pb::CancelRetryRequest {
                service: "payments".into(),
                transaction_id: d.transaction_id.clone(),
            });
            let (_ack, cancel) = tokio::join!(ack, cancel);
            cancel
                .ok()
                .filter(|r| r.get_ref().cancelled)
                .map(|_| pb::RetryStatus::Cancelled as i32)
        }
    })
    .await;
    assert!(
        kept.len() > ROUNDS / 2,
        "most cancels find the retry scheduled: {} of {ROUNDS}",
        kept.len()
    );
    assert!(
        again.is_empty(),
        "{} cancelled retries were delivered again: {again:?}",
        again.len()
    );
    assert_statuses_kept(&chans[1], &kept).await;
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

/// ActOnRetries on one node never undoes a cancel or a SUCCEEDED ack answered on another
/// (docs/architecture.md, "Acting on retries"): 150 retries are delivered, and for each one an
/// action on the other node (run now, reschedule to a second later, or move to the dead
/// letters) races a SUCCEEDED ack (even rounds) or a CancelRetry (odd rounds) on the node that
/// delivered it. None of them is delivered after its ack or cancel answered, and each reads
/// SUCCEEDED or CANCELLED at the end.
#[tokio::test]
async fn an_action_on_one_node_never_undoes_a_cancel_or_an_ack_on_another() {
    const ACTED: usize = 150;
    let keyspace = unique_keyspace("actrace");
    let (nodes, chans) = shared_ring(&keyspace, 2).await;
    let mut rx = subscribe_all(&chans, "payments", 500).await;
    let resp = RetryServiceClient::new(chans[0].clone())
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..ACTED)
                .map(|i| enqueue_req("payments", &format!("act-{i:03}"), 0))
                .collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(batch_accepted(&resp));

    // Even rounds race a SUCCEEDED ack, odd ones a cancel, on the node that delivered.
    let (kept, again) = race_first_deliveries(&mut rx, ACTED, |round, node, d| {
        let (here, there) = (chans[node].clone(), chans[1 - node].clone());
        let action = [
            pb::RetryAction::RunNow,
            pb::RetryAction::Reschedule,
            pb::RetryAction::DeadLetter,
        ][round % 3];
        let due = (action == pb::RetryAction::Reschedule).then(|| {
            let at = std::time::SystemTime::now() + Duration::from_secs(1);
            prost_types::Timestamp::from(at)
        });
        let act = pb::ActOnRetriesRequest {
            selection: Some(pb::ListRetriesRequest {
                service: "payments".into(),
                ..Default::default()
            }),
            transaction_ids: vec![d.transaction_id.clone()],
            action: action as i32,
            due_time: due,
            reason: "race".into(),
            ..Default::default()
        };
        async move {
            let mut actor = RetryServiceClient::new(there);
            let acting = actor.act_on_retries(act);
            if round.is_multiple_of(2) {
                let mut executor = ExecutorServiceClient::new(here);
                let ack = executor.ack(ack_req(&d, pb::AckOutcome::Succeeded));
                let (acked, acted) = tokio::join!(ack, acting);
                acted.expect("the action answers");
                acked.ok().map(|_| pb::RetryStatus::Succeeded as i32)
            } else {
                let mut canceller = RetryServiceClient::new(here);
                let cancel = canceller.cancel_retry(pb::CancelRetryRequest {
                    service: "payments".into(),
                    transaction_id: d.transaction_id.clone(),
                });
                let (cancelled, acted) = tokio::join!(cancel, acting);
                acted.expect("the action answers");
                cancelled
                    .ok()
                    .filter(|r| r.get_ref().cancelled)
                    .map(|_| pb::RetryStatus::Cancelled as i32)
            }
        }
    })
    .await;
    assert!(
        kept.len() > ACTED / 2,
        "most acks and cancels answer: {} of {ACTED}",
        kept.len()
    );
    assert!(
        again.is_empty(),
        "{} retries were delivered after their ack or cancel answered: {again:?}",
        again.len()
    );
    assert_statuses_kept(&chans[1], &kept).await;
    drop(nodes);
    drop_keyspace(&keyspace).await;
}

/// The race of both tests above: the first delivery of each of `rounds` transactions starts
/// `race(round, node, delivery)` (round counts from 1), whose answer is the status the
/// transaction must keep from then on (None: nothing to keep). Returns, per transaction
/// kept, that status and when it was answered, and the transactions delivered after their
/// answer. Ends once every race answered and five quiet seconds passed (retries acked with
/// `retry_after = 0` are due again within two windows).
async fn race_first_deliveries<F, Fut>(
    rx: &mut mpsc::UnboundedReceiver<(usize, pb::Delivery)>,
    rounds: usize,
    mut race: F,
) -> (HashMap<String, (i32, Instant)>, Vec<String>)
where
    F: FnMut(usize, usize, pb::Delivery) -> Fut,
    Fut: std::future::Future<Output = Option<i32>> + Send + 'static,
{
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Option<i32>, Instant)>();
    let mut raced: HashSet<String> = HashSet::new();
    let mut kept: HashMap<String, (i32, Instant)> = HashMap::new();
    let mut again: Vec<String> = Vec::new();
    let mut finished = 0;
    let mut quiet_since: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        tokio::select! {
            Some((node, d)) = rx.recv() => {
                let txid = d.transaction_id.clone();
                if let Some((_, at)) = kept.get(&txid) {
                    // Delivered after its answer: the answer was undone.
                    if Instant::now() > *at {
                        again.push(txid);
                    }
                    continue;
                }
                if !raced.insert(txid.clone()) {
                    // Delivered again before its race answered (or after nothing to keep).
                    continue;
                }
                let outcome = race(raced.len(), node, d);
                let done_tx = done_tx.clone();
                tokio::spawn(async move {
                    let status = outcome.await;
                    let _ = done_tx.send((txid, status, Instant::now()));
                });
            }
            Some((txid, status, at)) = done_rx.recv() => {
                finished += 1;
                if let Some(status) = status {
                    kept.insert(txid, (status, at));
                }
                if finished == rounds {
                    quiet_since = Some(Instant::now());
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if quiet_since.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {finished} of {rounds} races finished"
        );
    }
    (kept, again)
}

/// GetRetry on `channel` reads each transaction of `kept` with the status it must keep.
async fn assert_statuses_kept(channel: &Channel, kept: &HashMap<String, (i32, Instant)>) {
    let mut retries = RetryServiceClient::new(channel.clone());
    for (txid, (status, _)) in kept {
        let r = retries
            .get_retry(pb::GetRetryRequest {
                service: "payments".into(),
                transaction_id: txid.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, *status, "{txid} answered and was undone");
    }
}
