//! The workload's calls: each planned operation ([`Op`]) performed on its node, its answer
//! recorded in the history.

use std::sync::Arc;

use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};

use super::{
    call, dur,
    history::{now_ms, Answer, EnqueueOk, Event, Kind},
    hold,
    ops::{Op, Sched},
    policy, saga, ts, ts_ms, Shared,
};

pub(super) async fn perform(shared: Arc<Shared>, op: Op) {
    match op {
        Op::Enqueue { node, items, batch } => {
            let now = now_ms();
            let reqs: Vec<(pb::EnqueueRetryRequest, String)> = items
                .iter()
                .map(|(svc, tx, s)| {
                    let (schedule, asked) = match s {
                        Sched::Delay(ms) => (
                            pb::enqueue_retry_request::Schedule::Delay(dur(*ms)),
                            format!("delay={ms}ms"),
                        ),
                        Sched::DueIn(ms) => (
                            pb::enqueue_retry_request::Schedule::DueTime(ts(now + ms)),
                            format!("due_in={ms}ms"),
                        ),
                    };
                    (
                        pb::EnqueueRetryRequest {
                            service: svc.clone(),
                            transaction_id: tx.clone(),
                            payload: tx.as_bytes().to_vec(),
                            schedule: Some(schedule),
                            policy: Some(policy()),
                            attempt: 1,
                            last_error: "first try failed".into(),
                            compensations: if svc == saga::STEP {
                                saga::compensations(tx)
                            } else {
                                Vec::new()
                            },
                            dependency: if svc == hold::SERVICE {
                                hold::DEPENDENCY.into()
                            } else {
                                String::new()
                            },
                            ..Default::default()
                        },
                        asked,
                    )
                })
                .collect();
            let mut client = RetryServiceClient::new(shared.channels[node].clone());
            let start = now_ms();
            let answers: Vec<Answer<EnqueueOk>> = if batch {
                let r = call(client.enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
                    requests: reqs.iter().map(|(r, _)| r.clone()).collect(),
                }))
                .await;
                match r {
                    Ok(resp) => resp
                        .results
                        .into_iter()
                        .map(|r| match r.result {
                            Some(pb::enqueue_retry_result::Result::Response(x)) => {
                                Answer::Ok(enqueue_ok(&x))
                            }
                            Some(pb::enqueue_retry_result::Result::Error(e)) => {
                                Answer::from_item_error(e.code, &e.message)
                            }
                            None => Answer::Unknown("empty result".into()),
                        })
                        .collect(),
                    Err(s) => reqs.iter().map(|_| Answer::from_status(&s)).collect(),
                }
            } else {
                let r = call(client.enqueue_retry(reqs[0].0.clone())).await;
                vec![match r {
                    Ok(x) => Answer::Ok(enqueue_ok(&x)),
                    Err(s) => Answer::from_status(&s),
                }]
            };
            let end = now_ms();
            for ((req, asked), answer) in reqs.into_iter().zip(answers) {
                shared.history.push(Event {
                    start_ms: start,
                    end_ms: end,
                    kind: Kind::Enqueue {
                        node,
                        service: req.service,
                        tx: req.transaction_id,
                        asked,
                        batch,
                        answer,
                    },
                });
            }
        }
        Op::Cancel { node, service, tx } => {
            let mut client = RetryServiceClient::new(shared.channels[node].clone());
            let start = now_ms();
            let r = call(client.cancel_retry(pb::CancelRetryRequest {
                service: service.clone(),
                transaction_id: tx.clone(),
            }))
            .await;
            let end = now_ms();
            let answer = match r {
                Ok(x) => Answer::Ok((x.cancelled, x.status)),
                Err(s) => Answer::from_status(&s),
            };
            shared.history.push(Event {
                start_ms: start,
                end_ms: end,
                kind: Kind::Cancel {
                    node,
                    service,
                    tx,
                    answer,
                },
            });
        }
        Op::Act {
            node,
            service,
            tx,
            action,
            due_in_ms,
        } => {
            let mut client = RetryServiceClient::new(shared.channels[node].clone());
            let start = now_ms();
            let due_ms = (action == pb::RetryAction::Reschedule).then_some(start + due_in_ms);
            let r = call(client.act_on_retries(pb::ActOnRetriesRequest {
                selection: Some(pb::ListRetriesRequest {
                    service: service.clone(),
                    ..Default::default()
                }),
                transaction_ids: vec![tx.clone()],
                action: action as i32,
                due_time: due_ms.map(ts),
                reason: "chaos".into(),
                ..Default::default()
            }))
            .await;
            let end = now_ms();
            let answer = match r {
                Ok(x) => Answer::Ok(x.changed > 0),
                Err(s) => Answer::from_status(&s),
            };
            shared.history.push(Event {
                start_ms: start,
                end_ms: end,
                kind: Kind::Act {
                    node,
                    service,
                    tx,
                    action,
                    due_ms,
                    answer,
                },
            });
        }
        Op::List { node, service } => {
            let mut client = RetryServiceClient::new(shared.channels[node].clone());
            let start = now_ms();
            let mut rows = 0;
            let mut token = String::new();
            let mut answer = None;
            for _ in 0..LIST_PAGES {
                // Every status: the directory by due time, every node's deliveries, the
                // dead letters and the finished log, each read under the faults.
                let r = call(client.list_retries(pb::ListRetriesRequest {
                    service: service.clone(),
                    statuses: vec![
                        pb::RetryStatus::Scheduled as i32,
                        pb::RetryStatus::InFlight as i32,
                        pb::RetryStatus::Dead as i32,
                        pb::RetryStatus::Succeeded as i32,
                        pb::RetryStatus::Cancelled as i32,
                    ],
                    page_size: 100,
                    page_token: token.clone(),
                    ..Default::default()
                }))
                .await;
                match r {
                    Ok(page) => {
                        rows += page.retries.len();
                        token = page.next_page_token;
                        if token.is_empty() {
                            break;
                        }
                    }
                    Err(s) => {
                        answer = Some(list_refusal(&s));
                        break;
                    }
                }
            }
            let end = now_ms();
            shared.history.push(Event {
                start_ms: start,
                end_ms: end,
                kind: Kind::List {
                    node,
                    service,
                    answer: answer.unwrap_or(Answer::Ok(rows)),
                },
            });
        }
    }
}

/// The pages a listing reads at most.
const LIST_PAGES: usize = 5;

/// A listing's failure: unknown when the node or its storage could not answer (down,
/// stopped, killed mid-call, Cassandra paused: unavailable, deadline, a broken connection),
/// refused when the node answered it with an error (a bad page token, an internal error),
/// which the checker holds as a violation. A listing writes nothing: unlike the calls that
/// write, its INTERNAL is no outcome left unknown.
fn list_refusal(s: &tonic::Status) -> Answer<usize> {
    use tonic::Code::*;
    let text = format!("{:?}: {}", s.code(), s.message());
    match s.code() {
        Unavailable | DeadlineExceeded | Cancelled | Unknown | Aborted => Answer::Unknown(text),
        // The connection broke (a node killed mid-call) rather than the node answering.
        Internal if s.message().starts_with("h2 protocol error") => Answer::Unknown(text),
        _ => Answer::Refused(text),
    }
}

fn enqueue_ok(x: &pb::EnqueueRetryResponse) -> EnqueueOk {
    EnqueueOk {
        due_ms: ts_ms(&x.due_time).unwrap_or(0),
        generation: x.generation,
        deduplicated: x.deduplicated,
    }
}
