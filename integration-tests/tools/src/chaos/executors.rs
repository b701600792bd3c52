//! The executors of a run: one per service on every node, each answering its deliveries
//! with an outcome chosen from the seed ([`executor`]), all reading their streams through
//! [`record_deliveries`] (as `node_loss` does).

use std::{
    hash::{Hash, Hasher},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};

use super::{
    call, dur,
    history::{now_ms, AckOk, Answer, Event, History, Kind, Outcome},
    hold, ts_ms, Shared,
};

/// One executor stream of [`record_deliveries`].
pub struct StreamSpec<'a> {
    pub node: usize,
    pub service: &'a str,
    pub executor_id: String,
    pub max_in_flight: u32,
    /// How long a Subscribe may take to answer before it is tried again.
    pub subscribe_timeout: Duration,
}

/// Subscribes as `spec` says on `channel` (again after every break) until `stop`, records
/// every delivery in `history` when it arrives, and hands it, with its history index, to
/// `on_delivery`. The chaos executors and `node_loss` both read their deliveries this way.
pub async fn record_deliveries(
    stop: &AtomicBool,
    channel: &tonic::transport::Channel,
    history: &History,
    spec: StreamSpec<'_>,
    mut on_delivery: impl FnMut(usize, pb::Delivery),
) {
    while !stop.load(Ordering::SeqCst) {
        let mut client = ExecutorServiceClient::new(channel.clone());
        let sub = tokio::time::timeout(
            spec.subscribe_timeout,
            client.subscribe(pb::SubscribeRequest {
                service: spec.service.to_string(),
                executor_id: spec.executor_id.clone(),
                max_in_flight: spec.max_in_flight,
            }),
        )
        .await;
        let mut stream = match sub {
            Ok(Ok(s)) => s.into_inner(),
            _ => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        while let Ok(Some(d)) = stream.message().await {
            let at = now_ms();
            let idx = history.push(Event {
                start_ms: at,
                end_ms: at,
                kind: Kind::Delivery {
                    node: spec.node,
                    service: d.service.clone(),
                    tx: d.transaction_id.clone(),
                    delivery_id: d.delivery_id.clone(),
                    attempt: d.attempt,
                    due_ms: ts_ms(&d.due_time).unwrap_or(0),
                    deadline_ms: ts_ms(&d.ack_deadline).unwrap_or(0),
                },
            });
            on_delivery(idx, d);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The executor `executor_id` of one service on one node: subscribes (again after every
/// break), answers each delivery with an outcome chosen from the seed, on the node that
/// delivered it. Runs until `Shared::stop`; dropping it closes its stream (the node hands
/// what it had in flight to other executors).
pub async fn executor(shared: Arc<Shared>, node: usize, service: String, executor_id: String) {
    let spec = StreamSpec {
        node,
        service: &service,
        executor_id,
        max_in_flight: 16,
        subscribe_timeout: Duration::from_secs(3),
    };
    record_deliveries(
        &shared.stop,
        &shared.channels[node],
        &shared.history,
        spec,
        |idx, d| {
            tokio::spawn(answer(shared.clone(), node, idx, d));
        },
    )
    .await;
}

/// The deterministic choice for the n-th sighting of (service, tx, attempt).
fn choose(shared: &Shared, d: &pb::Delivery) -> (Option<Outcome>, Option<i64>, u64) {
    let n = {
        let mut seen = shared.seen.lock().expect("seen");
        let c = seen
            .entry((d.service.clone(), d.transaction_id.clone(), d.attempt))
            .or_insert(0);
        *c += 1;
        *c
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (shared.seed, &d.service, &d.transaction_id, d.attempt, n).hash(&mut h);
    let mut rng = StdRng::seed_from_u64(h.finish());
    let think = rng.random_range(0..=200);
    if shared.draining.load(Ordering::SeqCst) {
        return (Some(Outcome::Succeeded), None, think);
    }
    let r: f64 = rng.random();
    let after = rng.random_range(1_000..=2_000);
    let (o, a) = if r < 0.38 {
        (Some(Outcome::Succeeded), None)
    } else if r < 0.56 {
        (Some(Outcome::Retry), None)
    } else if r < 0.70 {
        (Some(Outcome::RetryAfter), Some(after))
    } else if r < 0.80 {
        (Some(Outcome::Failed), None)
    } else if r < 0.96 {
        (Some(Outcome::Snooze), Some(after))
    } else if shared.let_deadlines_pass {
        // Never answered: the ack deadline passes and the node redelivers.
        (None, None)
    } else {
        (Some(Outcome::Succeeded), None)
    };
    (o, a, think)
}

async fn answer(shared: Arc<Shared>, node: usize, idx: usize, d: pb::Delivery) {
    let (outcome, after, think) = choose(&shared, &d);
    tokio::time::sleep(Duration::from_millis(think)).await;
    let Some(outcome) = outcome else {
        shared.ignored.fetch_add(1, Ordering::SeqCst);
        return;
    };
    let error = match outcome {
        Outcome::Succeeded => String::new(),
        _ => format!("chaos-{outcome:?}-#{idx}"),
    };
    let (req, outcome, after, error) = if d.service == hold::SERVICE {
        // Its dependency decides: a hold while it is down, else SUCCEEDED.
        let now = now_ms();
        let down = !shared.draining.load(Ordering::SeqCst)
            && hold::down(&shared.outages.lock().expect("outages"), now);
        let (req, outcome) = hold::ack_request(&d, down);
        let error = req.error.clone();
        (req, outcome, None, error)
    } else {
        (
            ack_request(&d, outcome, after, &error),
            outcome,
            after,
            error,
        )
    };
    let mut client = ExecutorServiceClient::new(shared.channels[node].clone());
    let start = now_ms();
    let r = call(client.ack(req)).await;
    let end = now_ms();
    let answer = match r {
        Ok(x) => Answer::Ok(AckOk {
            next_due_ms: ts_ms(&x.next_due_time),
            dead_lettered: x.dead_lettered,
            snoozed: x.snoozed,
        }),
        Err(s) => Answer::from_status(&s),
    };
    shared.history.push(Event {
        start_ms: start,
        end_ms: end,
        kind: Kind::Ack {
            node,
            service: d.service,
            tx: d.transaction_id,
            delivery_id: d.delivery_id,
            delivery: idx,
            attempt: d.attempt,
            outcome,
            retry_after_ms: after,
            error,
            answer,
        },
    });
}

/// The ack of `d` with `outcome` chosen by [`choose`].
fn ack_request(
    d: &pb::Delivery,
    outcome: Outcome,
    after: Option<i64>,
    error: &str,
) -> pb::AckRequest {
    pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: match outcome {
            Outcome::Succeeded => pb::AckOutcome::Succeeded,
            Outcome::Failed => pb::AckOutcome::Failed,
            _ => pb::AckOutcome::Retry,
        } as i32,
        retry_after: after.map(dur),
        error: error.to_string(),
        snooze: outcome == Outcome::Snooze,
        ..Default::default()
    }
}
