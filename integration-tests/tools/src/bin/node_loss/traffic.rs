//! The node-loss test's traffic: batches of enqueues (again on the next node for the items
//! not accepted), executors acking every delivery SUCCEEDED, and the dead letters at the end,
//! each call recorded in the chaos history.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use rebound_tools::chaos::{
    dur,
    history::{now_ms, AckOk, Answer, EnqueueOk, Event, History, Kind, Outcome},
    record_deliveries, ts_ms, StreamSpec,
};
use tonic::transport::Channel;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn policy() -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: Some(10),
        initial_backoff: Some(dur(1_000)),
        max_backoff: Some(dur(2_000)),
        multiplier: Some(2.0),
        jitter: Some(0.2),
        ack_timeout: Some(dur(10_000)),
        max_deliveries_per_attempt: Some(10),
        ..Default::default()
    }
}

pub(super) async fn call<T>(
    f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded(
            "client timeout (node_loss)",
        )),
    }
}

fn code_name(code: tonic::Code) -> String {
    format!("{code:?}")
}

pub(super) struct Shared {
    pub(super) history: History,
    pub(super) channels: Vec<Channel>,
    pub(super) stop: AtomicBool,
    pub(super) service: String,
    /// Transactions acked SUCCEEDED with an OK answer.
    pub(super) settled: Mutex<HashSet<String>>,
    /// Enqueue item errors by gRPC code, and when they happened (ms, Cassandra clock).
    pub(super) enqueue_errors: Mutex<BTreeMap<String, Vec<i64>>>,
    pub(super) ack_errors: Mutex<BTreeMap<String, usize>>,
    /// Batch answers with a result count different from the request count, or an empty result.
    pub(super) silent: AtomicUsize,
    pub(super) accepted: AtomicUsize,
    pub(super) calls: AtomicUsize,
}

/// Enqueues one batch, again (on the next node) for the items not accepted, until all are
/// accepted or two minutes pass. Returns the items never accepted.
pub(super) async fn enqueue_batch(
    shared: Arc<Shared>,
    first_node: usize,
    ids: Vec<String>,
) -> usize {
    let n = shared.channels.len();
    let mut left = ids;
    let mut node = first_node;
    let started = Instant::now();
    while !left.is_empty() && started.elapsed() < Duration::from_secs(120) {
        let reqs: Vec<pb::EnqueueRetryRequest> = left
            .iter()
            .map(|tx| pb::EnqueueRetryRequest {
                service: shared.service.clone(),
                transaction_id: tx.clone(),
                payload: tx.as_bytes().to_vec(),
                schedule: Some(pb::enqueue_retry_request::Schedule::Delay(dur(0))),
                policy: Some(policy()),
                attempt: 1,
                last_error: "first try failed".into(),
                ..Default::default()
            })
            .collect();
        let mut client = RetryServiceClient::new(shared.channels[node].clone());
        shared.calls.fetch_add(1, Ordering::Relaxed);
        let start = now_ms();
        let r = call(client.enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: reqs.clone(),
        }))
        .await;
        let end = now_ms();
        let answers: Vec<(Answer<EnqueueOk>, Option<String>)> = match r {
            Ok(resp) => {
                if resp.results.len() != reqs.len() {
                    shared.silent.fetch_add(1, Ordering::Relaxed);
                }
                (0..reqs.len())
                    .map(
                        |i| match resp.results.get(i).and_then(|r| r.result.as_ref()) {
                            Some(pb::enqueue_retry_result::Result::Response(x)) => (
                                Answer::Ok(EnqueueOk {
                                    due_ms: ts_ms(&x.due_time).unwrap_or(0),
                                    generation: x.generation,
                                    deduplicated: x.deduplicated,
                                }),
                                None,
                            ),
                            Some(pb::enqueue_retry_result::Result::Error(e)) => (
                                Answer::from_item_error(e.code, &e.message),
                                Some(code_name(tonic::Code::from(e.code))),
                            ),
                            None => {
                                shared.silent.fetch_add(1, Ordering::Relaxed);
                                (Answer::Unknown("empty result".into()), Some("EMPTY".into()))
                            }
                        },
                    )
                    .collect()
            }
            Err(s) => reqs
                .iter()
                .map(|_| (Answer::from_status(&s), Some(code_name(s.code()))))
                .collect(),
        };
        let mut again = Vec::new();
        for (tx, (answer, code)) in left.iter().zip(answers) {
            let ok = matches!(answer, Answer::Ok(_));
            if let Some(c) = code {
                shared
                    .enqueue_errors
                    .lock()
                    .expect("errors")
                    .entry(c)
                    .or_default()
                    .push(end);
            }
            shared.history.push(Event {
                start_ms: start,
                end_ms: end,
                kind: Kind::Enqueue {
                    node,
                    service: shared.service.clone(),
                    tx: tx.clone(),
                    asked: "delay=0ms".into(),
                    batch: true,
                    answer,
                },
            });
            if ok {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
            } else {
                again.push(tx.clone());
            }
        }
        left = again;
        if !left.is_empty() {
            node = (node + 1) % n;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    left.len()
}

pub(super) async fn executor(
    shared: Arc<Shared>,
    node: usize,
    stream_no: usize,
    max_in_flight: u32,
) {
    let spec = StreamSpec {
        node,
        service: &shared.service,
        executor_id: format!("node-loss-n{}-{stream_no}", node + 1),
        max_in_flight,
        subscribe_timeout: Duration::from_secs(5),
    };
    record_deliveries(
        &shared.stop,
        &shared.channels[node],
        &shared.history,
        spec,
        |idx, d| {
            tokio::spawn(ack(shared.clone(), node, idx, d));
        },
    )
    .await;
}

async fn ack(shared: Arc<Shared>, node: usize, idx: usize, d: pb::Delivery) {
    let mut client = ExecutorServiceClient::new(shared.channels[node].clone());
    let start = now_ms();
    let r = call(client.ack(pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: pb::AckOutcome::Succeeded as i32,
        ..Default::default()
    }))
    .await;
    let end = now_ms();
    let answer = match r {
        Ok(x) => {
            shared
                .settled
                .lock()
                .expect("settled")
                .insert(d.transaction_id.clone());
            Answer::Ok(AckOk {
                next_due_ms: ts_ms(&x.next_due_time),
                dead_lettered: x.dead_lettered,
                snoozed: x.snoozed,
            })
        }
        Err(s) => {
            *shared
                .ack_errors
                .lock()
                .expect("ack errors")
                .entry(code_name(s.code()))
                .or_default() += 1;
            Answer::from_status(&s)
        }
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
            outcome: Outcome::Succeeded,
            retry_after_ms: None,
            error: String::new(),
            answer,
        },
    });
}

pub(super) async fn dead_letters(shared: &Shared) -> HashMap<(String, String), Vec<String>> {
    let mut out: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut admin = AdminServiceClient::new(shared.channels[0].clone());
    let mut token = String::new();
    loop {
        match call(admin.list_dead_letters(pb::ListDeadLettersRequest {
            service: shared.service.clone(),
            page_size: 1000,
            page_token: token.clone(),
            include_redriven: true,
            ..Default::default()
        }))
        .await
        {
            Ok(page) => {
                for l in page.dead_letters {
                    out.entry((l.service, l.transaction_id))
                        .or_default()
                        .push(l.last_error);
                }
                if page.next_page_token.is_empty() {
                    break;
                }
                token = page.next_page_token;
            }
            Err(e) => {
                eprintln!("node_loss: ListDeadLetters failed: {e}");
                break;
            }
        }
    }
    out
}
