//! Checks a chaos history against the contract (docs/architecture.md "Dispatch" and
//! "Guarantees across nodes"; docs/push.md "Guarantees" for a pushed service).
//!
//! The history is a set of intervals on Cassandra's clock: a call may have taken effect at
//! any point between its start and its end, and a call whose outcome is unknown (deadline,
//! connection, unavailable) may have taken effect at any point after its start, even a while
//! after its end (a SIGSTOPped node resumes and finishes it). A rule fires only when no such
//! placement of the calls explains what was seen. A delivery is received some time after it
//! was sent; it may have been sent before a node was SIGSTOPped (or before Cassandra was) and
//! reach the executor only after the resume, so its send time is bounded from below by the
//! start of such a pause.
//!
//! # Pushed services
//!
//! A service with a push target has no executor: its node POSTs each delivery to the
//! harness's receiver (`chaos::push`) and records the outcome the answer means itself. A
//! request is a delivery ([`Kind::Push`]: rules 1, 3, 4 and 6 below hold for it as for a
//! streamed one), and the receiver's answer ([`Kind::PushAnswer`]) is the executor's work
//! and outcome, but *not* an acknowledged ack: when, and whether, the node stored the outcome
//! is not observable. A node may be killed or stopped after the 2xx reached it, its write may
//! time out, the answer may come after the delivery's deadline: then the delivery goes out
//! again, and that is the guarantee docs/push.md gives (at least once; nothing pushed again
//! after a 2xx *was recorded*; duplicates bounded by the pushes in flight at a fault). Which
//! node sent a request is not known either, so a SIGSTOP of any node may have held it back.
//! So, for a pushed service:
//!
//! - A request of the same attempt as an earlier one, with no enqueue between (rule 6), is a
//!   duplicate. It must be explained: the earlier one was never answered, or a fault (any
//!   node, or Cassandra) overlaps the time from its arrival to [`RECORD_SLACK_MS`] after its
//!   answer was settled (sent; for a stall, the node's timeout), or a node logged that the
//!   outcome of that delivery was not stored (`Push::unstored`), or the answer came after the
//!   delivery's deadline. Otherwise: "pushed again after a 2xx without a fault" (its answer
//!   was a 2xx) or "duplicate push without a fault".
//! - After a 2xx to attempt `a`, a request for another attempt of the same retry (no enqueue
//!   between) means the 2xx was not what the node recorded. A later attempt is explained by a
//!   non-2xx answer to some push of attempt `a` (the receiver answers every push of one
//!   attempt alike, but 200 once the drain starts; a 503 stored late by a stopped node
//!   supersedes the 2xx), or by one of attempt `a`'s pushes being explained as above (not
//!   recorded: after enough lost deliveries the attempt counts as failed); an earlier attempt
//!   only by a fault between the first push of `a` and it. Otherwise: "pushed again after a
//!   2xx without a fault". Every request after a 2xx counts in `pushes_after_2xx`.
//! - An acknowledged schedule is delivered until an outcome ends it (rule 4): a push's answer
//!   counts as an outcome that may land up to [`UNKNOWN_TAIL_MS`] after its node had it.
//! - Nothing is lost, and nothing settles without the receiver's say: at the end (after the
//!   drain, in which the receiver answers 200) a pushed retry is never SCHEDULED (rule 4's
//!   final check); a SUCCEEDED one was answered a 2xx at its final attempt (or before); a DEAD one is in
//!   the dead letters, and its last error is one the receiver gave to that retry (the
//!   receiver's error body names status, transaction and attempt), a timeout after a stall of
//!   it (or a fault), or deliveries lost to faults (`not acknowledged after N deliveries`).
//! - Every request is well-formed and signed (the Standard Webhooks signature verifies with
//!   the target's secret, `webhook-id` is the delivery id, the body is the payload), and no
//!   delivery id is pushed twice (a delivery pushed again gets a new id).
//! - A Subscribe stream of the service gets nothing while the target is set, but for a node
//!   that was just (re)started and has not read its settings yet.
//!
//! What is not checked for a pushed service, for want of an observable ack: "SUCCEEDED undone"
//! (an enqueue after a 2xx may be accepted: the 2xx may not be stored yet) and "cancel undone
//! by an ack" (the final status after a cancel is still checked).

use std::collections::{BTreeMap, HashMap, HashSet};

use rebound_proto::v1 as pb;

use super::history::{Answer, Event, FaultKind, Kind, Outcome, Reply};

/// Time the test process itself may take between a message arriving and it being stamped
/// (two cores, three debug nodes and Cassandra), and a node between reading a state row and
/// sending the delivery it decided on.
pub const SLACK_MS: i64 = 500;
/// How long after its end a call of unknown outcome may still take effect.
pub const UNKNOWN_TAIL_MS: i64 = 5_000;
/// How long after the receiver's answer a node may still be storing the outcome: a fault
/// starting within it may keep the outcome from being stored.
pub const RECORD_SLACK_MS: i64 = 2_000;
/// What a pushed delivery's ack deadline adds to the target's timeout (the hub's
/// `PUSH_DEADLINE_MARGIN`).
pub const PUSH_DEADLINE_MARGIN_MS: i64 = 5_000;

/// What the checker needs to know of the pushed services of a run.
pub struct Push<'a> {
    pub services: &'a [&'a str],
    /// The target's request timeout.
    pub timeout_ms: i64,
    /// Delivery ids whose outcome a node logged as not stored (`push outcome not stored`).
    pub unstored: &'a HashSet<String>,
}

pub struct Input<'a> {
    pub events: &'a [Event],
    pub finals: &'a BTreeMap<(String, String), Answer<pb::Retry>>,
    pub letters: &'a HashMap<(String, String), Vec<String>>,
    pub clock_err_ms: i64,
    pub t0: i64,
}

#[derive(Debug)]
pub struct Violation {
    pub kind: &'static str,
    pub subject: String,
    /// History lines (indices) that show it.
    pub lines: Vec<usize>,
}

#[derive(Debug, Default)]
pub struct CheckResult {
    pub violations: Vec<Violation>,
    pub deliveries: usize,
    pub duplicates: usize,
    pub explained_duplicates: usize,
    pub duplicate_bound: usize,
    /// Push requests received.
    pub pushes: usize,
    /// Push requests of an attempt pushed before (no enqueue between), all explained when
    /// there is no violation: counted in `duplicates` too.
    pub push_duplicates: usize,
    /// Push requests for a retry after a 2xx to it, and how many of those were explained.
    pub pushes_after_2xx: usize,
    pub explained_pushes_after_2xx: usize,
}

struct Fault {
    start: i64,
    end: i64,
    kind: FaultKind,
    node: Option<usize>,
}

/// What one event means for its transaction.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Role {
    /// Acknowledged scheduling (enqueue OK, RETRY ack OK with a next due time, a redrive
    /// that started the retry again).
    Schedule,
    /// An outcome that ends the retry (SUCCEEDED / FAILED / dead-lettering ack OK, any
    /// cancel OK).
    End,
    /// A call of unknown outcome that could schedule or end it.
    Unknown,
    Delivery,
    /// Refused: changed nothing.
    None,
}

fn role(e: &Event) -> Role {
    match &e.kind {
        Kind::Enqueue { answer, .. } => match answer {
            Answer::Ok(_) => Role::Schedule,
            Answer::Unknown(_) => Role::Unknown,
            Answer::Refused(_) => Role::None,
        },
        Kind::Cancel { answer, .. } => match answer {
            Answer::Ok(_) => Role::End,
            Answer::Unknown(_) => Role::Unknown,
            Answer::Refused(_) => Role::None,
        },
        Kind::Ack {
            answer, outcome, ..
        } => match answer {
            Answer::Ok(a) => {
                if a.dead_lettered
                    || matches!(outcome, Outcome::Succeeded | Outcome::Failed)
                    || a.next_due_ms.is_none()
                {
                    Role::End
                } else {
                    Role::Schedule
                }
            }
            Answer::Unknown(_) => Role::Unknown,
            Answer::Refused(_) => Role::None,
        },
        // A redrive starts only a DEAD retry again, under a new generation, with its attempts
        // reset: the same attempt may be delivered again after it.
        Kind::Redrive { answer, .. } => match answer {
            Answer::Ok(true) => Role::Schedule,
            Answer::Unknown(_) => Role::Unknown,
            Answer::Ok(false) | Answer::Refused(_) => Role::None,
        },
        Kind::Delivery { .. } | Kind::Push { .. } => Role::Delivery,
        // The node stores what the answer means when, and if, it gets it: not observable.
        Kind::PushAnswer { .. } => Role::None,
        Kind::Fault { .. } => Role::None,
    }
}

/// The latest time an event may take effect.
fn effect_end(e: &Event) -> i64 {
    if role(e) == Role::Unknown {
        e.end_ms + UNKNOWN_TAIL_MS
    } else {
        e.end_ms
    }
}

/// A delivery, streamed or pushed.
struct Dl {
    /// None: pushed (which node sent it is not known).
    node: Option<usize>,
    attempt: u32,
    due_ms: i64,
    deadline_ms: i64,
}

fn dl(e: &Event) -> Option<Dl> {
    match &e.kind {
        Kind::Delivery {
            node,
            attempt,
            due_ms,
            deadline_ms,
            ..
        } => Some(Dl {
            node: Some(*node),
            attempt: *attempt,
            due_ms: *due_ms,
            deadline_ms: *deadline_ms,
        }),
        Kind::Push {
            attempt, due_ms, ..
        } => Some(Dl {
            node: None,
            attempt: *attempt,
            due_ms: *due_ms,
            deadline_ms: i64::MAX,
        }),
        _ => None,
    }
}

fn is_enqueue(e: &Event) -> bool {
    matches!(e.kind, Kind::Enqueue { .. })
}

fn status_name(s: i32) -> String {
    pb::RetryStatus::try_from(s)
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| s.to_string())
}

pub fn check(input: &Input) -> CheckResult {
    check_with(input, None)
}

/// [`check`], with the rules of the pushed services (see "Pushed services" above).
pub fn check_with(input: &Input, push: Option<&Push>) -> CheckResult {
    let ev = input.events;
    let mut out = CheckResult::default();
    let no_unstored = HashSet::new();
    let (pushed_services, push_timeout_ms, unstored): (&[&str], i64, &HashSet<String>) = match push
    {
        Some(p) => (p.services, p.timeout_ms, p.unstored),
        None => (&[], 0, &no_unstored),
    };
    let faults: Vec<Fault> = ev
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Fault { kind, node, .. } => Some(Fault {
                start: e.start_ms,
                end: e.end_ms,
                kind: *kind,
                node: *node,
            }),
            _ => None,
        })
        .collect();
    // A fault that may have had an effect within [lo, hi].
    let fault_in = |lo: i64, hi: i64| faults.iter().any(|f| f.start <= hi && f.end + 2_000 >= lo);
    // The earliest time a delivery may have been sent.
    let sent_lb = |i: usize| -> i64 {
        let e = &ev[i];
        let node = dl(e).expect("a delivery").node;
        let recv = e.end_ms;
        let mut lb = recv - SLACK_MS;
        for f in &faults {
            let relevant = match f.kind {
                // A push may come from any node.
                FaultKind::Stop => node.is_none() || f.node == node,
                FaultKind::CassandraPause => true,
                _ => false,
            };
            if relevant && f.start <= recv && f.end + 1_500 >= recv {
                lb = lb.min(f.start - SLACK_MS);
            }
        }
        lb
    };
    // Acks (and push answers) by delivery index.
    let mut ack_of: HashMap<usize, usize> = HashMap::new();
    let mut by_tx: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    let mut pushed_ids: HashMap<&str, usize> = HashMap::new();
    for (i, e) in ev.iter().enumerate() {
        match &e.kind {
            Kind::Ack { delivery, .. } => {
                ack_of.insert(*delivery, i);
            }
            Kind::PushAnswer { push, .. } => {
                ack_of.insert(*push, i);
            }
            Kind::Delivery { .. } => out.deliveries += 1,
            Kind::Push {
                delivery_id,
                problem,
                service,
                tx,
                ..
            } => {
                out.pushes += 1;
                if let Some(p) = problem {
                    out.violations.push(Violation {
                        kind: "malformed push request",
                        subject: format!("{service}/{tx}: #{i}: {p}"),
                        lines: vec![i],
                    });
                }
                if let Some(first) = pushed_ids.insert(delivery_id, i) {
                    out.violations.push(Violation {
                        kind: "delivery id pushed twice",
                        subject: format!(
                            "{service}/{tx}: #{i} repeats the delivery id of #{first}"
                        ),
                        lines: vec![first, i],
                    });
                }
            }
            _ => {}
        }
        if let Some((s, t)) = e.tx() {
            by_tx
                .entry((s.to_string(), t.to_string()))
                .or_default()
                .push(i);
        }
    }
    // A push's answer, and when the node had it (a stall: when its request timed out).
    let push_answer = |d: usize| -> Option<(Reply, i64)> {
        let a = *ack_of.get(&d)?;
        let Kind::PushAnswer { reply, .. } = &ev[a].kind else {
            return None;
        };
        let settled = match reply {
            Reply::Stall => ev[d].end_ms + push_timeout_ms,
            Reply::Status { .. } => ev[a].end_ms,
        };
        Some((*reply, settled))
    };
    // Why the outcome of push `d` may not have been stored (None: it must have been).
    let unrecorded = |d: usize| -> Option<&'static str> {
        let Some((_, settled)) = push_answer(d) else {
            return Some("never answered");
        };
        let Kind::Push { delivery_id, .. } = &ev[d].kind else {
            return Some("not a push");
        };
        if unstored.contains(delivery_id) {
            return Some("its node logged the outcome as not stored");
        }
        if fault_in(ev[d].end_ms - SLACK_MS, settled + RECORD_SLACK_MS) {
            return Some("a fault");
        }
        // The deadline runs from the hand-out, before the request was sent.
        if settled + SLACK_MS + 1_000 > sent_lb(d) + push_timeout_ms + PUSH_DEADLINE_MARGIN_MS {
            return Some("answered after its deadline");
        }
        None
    };
    // The bound on duplicates: deliveries in flight at a fault (on its node, or anywhere for
    // a Cassandra pause), plus those whose ack did not come back OK or was never sent. A push
    // is in flight until its outcome may be stored, and may be on any node.
    for f in &faults {
        for (i, e) in ev.iter().enumerate() {
            let in_flight = e.end_ms <= f.start
                && match &e.kind {
                    Kind::Delivery { node, .. } => {
                        (f.node.is_none() || f.node == Some(*node))
                            && ack_of.get(&i).is_none_or(|a| ev[*a].end_ms > f.start)
                    }
                    Kind::Push { .. } => {
                        push_answer(i).is_none_or(|(_, s)| s + RECORD_SLACK_MS > f.start)
                    }
                    _ => false,
                };
            if in_flight {
                out.duplicate_bound += 1;
            }
        }
    }
    for (i, e) in ev.iter().enumerate() {
        let unanswered = match &e.kind {
            Kind::Delivery { .. } => !ack_of.get(&i).is_some_and(|a| {
                matches!(
                    &ev[*a].kind,
                    Kind::Ack {
                        answer: Answer::Ok(_),
                        ..
                    }
                )
            }),
            Kind::Push { delivery_id, .. } => {
                push_answer(i).is_none() || unstored.contains(delivery_id)
            }
            _ => false,
        };
        if unanswered {
            out.duplicate_bound += 1;
        }
    }

    for (key, idx) in &by_tx {
        // Compensations are enqueued by the nodes, not the workload: no enqueue in the history
        // explains them; `saga::check` holds them to their own rule. A held retry's holds use
        // no attempt, which these rules count; `hold::check` holds it to the rules of holds.
        if key.0 == super::saga::UNDO || key.0 == super::hold::SERVICE {
            continue;
        }
        let subject = format!("{}/{}", key.0, key.1);
        let lines = |focus: &[usize]| -> Vec<usize> {
            // The transaction's events, at most 40, around the focus.
            if idx.len() <= 40 {
                return idx.clone();
            }
            let f = focus.first().copied().unwrap_or(0);
            let pos = idx.iter().position(|&i| i >= f).unwrap_or(0);
            let lo = pos.saturating_sub(25);
            idx[lo..(lo + 40).min(idx.len())].to_vec()
        };
        let mut v = |kind: &'static str, detail: String, focus: &[usize]| {
            out.violations.push(Violation {
                kind,
                subject: format!("{subject}: {detail}"),
                lines: lines(focus),
            });
        };
        let deliveries: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| role(&ev[i]) == Role::Delivery)
            .collect();
        // An enqueue that may have scheduled the transaction anew in [from, to).
        let enqueue_between = |from: i64, to: i64| {
            idx.iter().any(|&j| {
                let e = &ev[j];
                is_enqueue(e)
                    && matches!(role(e), Role::Schedule | Role::Unknown)
                    && e.start_ms < to
                    && effect_end(e) > from
            })
        };

        // 1. Never early.
        for &d in &deliveries {
            let Some(Dl { due_ms, .. }) = dl(&ev[d]) else {
                continue;
            };
            if ev[d].end_ms + input.clock_err_ms + 20 < due_ms {
                v(
                    "delivered before its due time",
                    format!("received {} ms before due (#{d})", due_ms - ev[d].end_ms),
                    &[d],
                );
            }
        }

        for &a in idx {
            let e = &ev[a];
            match &e.kind {
                // 2. Nothing after SUCCEEDED acknowledged.
                Kind::Ack {
                    outcome: Outcome::Succeeded,
                    answer: Answer::Ok(_),
                    delivery,
                    ..
                } => {
                    // A SUCCEEDED ack writes without reading the row again, just above the
                    // row its delivery was read from: a cancel that may have taken effect
                    // after that read wins over it (docs/architecture.md), and the retry
                    // stays CANCELLED, so a later enqueue starts afresh.
                    let read_at = sent_lb(*delivery);
                    let cancelled_after_read = idx.iter().any(|&j| {
                        matches!(
                            &ev[j].kind,
                            Kind::Cancel {
                                answer: Answer::Ok((true, _)) | Answer::Unknown(_),
                                ..
                            }
                        ) && ev[j].start_ms < e.end_ms
                            && effect_end(&ev[j]) > read_at
                    });
                    if let Some(&d) = deliveries.iter().find(|&&d| {
                        sent_lb(d) > e.end_ms && !enqueue_between(e.start_ms, ev[d].end_ms)
                    }) {
                        v(
                            "delivered after SUCCEEDED was acknowledged",
                            format!("ack #{a} returned OK, delivery #{d} sent after it"),
                            &[a, d],
                        );
                    }
                    if let Some(&x) = idx.iter().find(|&&x| {
                        !cancelled_after_read
                            && ev[x].start_ms > e.end_ms
                            && matches!(
                                &ev[x].kind,
                                Kind::Enqueue {
                                    answer: Answer::Ok(_),
                                    ..
                                } | Kind::Cancel {
                                    answer: Answer::Ok((true, _)),
                                    ..
                                }
                            )
                    }) {
                        v(
                            "SUCCEEDED undone (a later call was accepted)",
                            format!(
                                "ack #{a} SUCCEEDED returned OK, later call #{x} was accepted as if the retry were not SUCCEEDED"
                            ),
                            &[a, x],
                        );
                    }
                }
                // 3. After cancelled = true, that generation is never delivered again, no
                // ack undoes the cancel.
                Kind::Cancel {
                    answer: Answer::Ok((true, _)),
                    ..
                } => {
                    let (cs, ce) = (e.start_ms, e.end_ms);
                    if let Some(&d) = deliveries
                        .iter()
                        .find(|&&d| sent_lb(d) > ce && !enqueue_between(cs, ev[d].end_ms))
                    {
                        v(
                            "delivered after cancel",
                            format!(
                                "cancel #{a} answered cancelled=true, delivery #{d} sent after it"
                            ),
                            &[a, d],
                        );
                    }
                    for &k in idx {
                        let Kind::Ack {
                            delivery,
                            answer: Answer::Ok(_),
                            ..
                        } = &ev[k].kind
                        else {
                            continue;
                        };
                        if ev[*delivery].end_ms >= cs {
                            continue;
                        }
                        // An ack that raced the cancel may answer OK either way: its write
                        // loses to the cancel cell (`TxState::apply_settled`), checked by the
                        // final status below. One that started after the cancel answered must
                        // have found the retry cancelled, except a SUCCEEDED ack: it does not
                        // read the row again, answers OK (its executor did the work), and its
                        // write, just above the row its delivery was read from, loses to the
                        // cancel's; the final status below checks that.
                        let ack = &ev[k];
                        let succeeded = matches!(
                            ack.kind,
                            Kind::Ack {
                                outcome: Outcome::Succeeded,
                                ..
                            }
                        );
                        let undone = match role(ack) {
                            Role::End | Role::Schedule => ack.start_ms > ce && !succeeded,
                            _ => false,
                        };
                        if undone {
                            v(
                                "cancel undone by an ack",
                                format!(
                                    "cancel #{a} answered cancelled=true and ack #{k} of delivery #{delivery} (received before the cancel) answered OK"
                                ),
                                &[a, k],
                            );
                        }
                    }
                    // Nothing after the cancel could have changed it: it must be CANCELLED.
                    // An ack that ends the retry (SUCCEEDED, FAILED, dead-lettered) loses to
                    // the cancel wherever it lands, so it does not count; an enqueue after
                    // the cancel starts a new retry, and an unknown outcome may be one.
                    let later = idx.iter().any(|&j| {
                        j != a
                            && match role(&ev[j]) {
                                Role::Schedule | Role::Unknown => true,
                                Role::End => matches!(ev[j].kind, Kind::Cancel { .. }),
                                _ => false,
                            }
                            && effect_end(&ev[j]) > cs
                    });
                    if !later {
                        if let Some(Answer::Ok(r)) = input.finals.get(key) {
                            if r.status != pb::RetryStatus::Cancelled as i32 {
                                v(
                                    "cancel undone",
                                    format!(
                                        "cancel #{a} answered cancelled=true and nothing later touched it, final status {}",
                                        status_name(r.status)
                                    ),
                                    &[a],
                                );
                            }
                        }
                    }
                }
                // 5. Every DEAD retry is in the dead letters, with its last error.
                Kind::Ack {
                    answer: Answer::Ok(ok),
                    outcome,
                    error,
                    ..
                } if ok.dead_lettered || *outcome == Outcome::Failed => {
                    // Two deliveries of one attempt (a duplicate after a fault) may both be
                    // acked into the dead letters at once: one letter is kept, with the error
                    // of either ack.
                    let concurrent: Vec<&str> = idx
                        .iter()
                        .filter_map(|&j| match &ev[j].kind {
                            Kind::Ack {
                                answer: Answer::Ok(o),
                                outcome: oc,
                                error: er,
                                ..
                            } if (o.dead_lettered || *oc == Outcome::Failed)
                                && (ev[j].start_ms - e.start_ms).abs() < 1_000 =>
                            {
                                Some(er.as_str())
                            }
                            _ => None,
                        })
                        .collect();
                    let found = input.letters.get(key).is_some_and(|ls| {
                        ls.iter().any(|l| {
                            l.contains(error.as_str()) || concurrent.iter().any(|c| l.contains(c))
                        })
                    });
                    if !found {
                        v(
                            "dead-lettered retry missing from the dead letters",
                            format!(
                                "ack #{a} answered dead-lettered; letters of it: {:?}",
                                input.letters.get(key)
                            ),
                            &[a],
                        );
                    }
                }
                _ => {}
            }
        }

        // 4. Every acknowledged schedule is delivered until an outcome ends it. A push's
        // answer may end it (a 2xx, a 422, a last failed attempt) whenever its node stores
        // the outcome: like a call of unknown outcome, up to UNKNOWN_TAIL_MS after the node
        // had the answer (an enqueue that lands first is merged into the retry the 2xx then
        // settles, as for a streamed SUCCEEDED ack that answers after it).
        let last_schedule = idx
            .iter()
            .copied()
            .filter(|&i| role(&ev[i]) == Role::Schedule)
            .max_by_key(|&i| ev[i].end_ms);
        if let Some(s) = last_schedule {
            let start = ev[s].start_ms;
            let ended = idx.iter().any(|&j| {
                let push_end = match &ev[j].kind {
                    Kind::PushAnswer { push, .. } => push_answer(*push)
                        .is_some_and(|(_, settled)| settled + UNKNOWN_TAIL_MS > start),
                    _ => false,
                };
                push_end
                    || (matches!(role(&ev[j]), Role::End | Role::Unknown)
                        && effect_end(&ev[j]) > start)
            });
            let delivered = deliveries.iter().any(|&d| ev[d].end_ms > start);
            if !ended && !delivered {
                let fin = match input.finals.get(key) {
                    Some(Answer::Ok(r)) => status_name(r.status),
                    Some(other) => format!("{other:?}"),
                    None => "-".into(),
                };
                v(
                    "acknowledged schedule never delivered",
                    format!(
                        "#{s} answered OK, no delivery after it and no outcome; final status {fin}"
                    ),
                    &[s],
                );
            }
        }
        match input.finals.get(key) {
            Some(Answer::Ok(r)) if r.status == pb::RetryStatus::Scheduled as i32 => {
                v(
                    "still SCHEDULED after the drain",
                    format!(
                        "GetRetry: attempt {} due {} ms, generation {}",
                        r.attempt,
                        r.due_time
                            .as_ref()
                            .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
                            - input.t0,
                        r.generation
                    ),
                    &[],
                );
            }
            Some(Answer::Ok(r))
                if r.status == pb::RetryStatus::Dead as i32
                    && input.letters.get(key).is_none_or(|l| l.is_empty()) =>
            {
                v(
                    "DEAD without a dead letter",
                    format!("GetRetry DEAD, last error {:?}", r.last_error),
                    &[],
                );
            }
            _ => {}
        }

        // 6. Duplicates: the same attempt delivered again with no scheduling in between.
        for (n, &d2) in deliveries.iter().enumerate() {
            let Some(Dl { attempt, .. }) = dl(&ev[d2]) else {
                continue;
            };
            let Some(&d1) = deliveries[..n]
                .iter()
                .rev()
                .find(|&&d| dl(&ev[d]).is_some_and(|x| x.attempt == attempt))
            else {
                continue;
            };
            let (r1, r2) = (ev[d1].end_ms, ev[d2].end_ms);
            let boundary = idx.iter().any(|&j| {
                let e = &ev[j];
                matches!(role(e), Role::Schedule | Role::Unknown)
                    && effect_end(e) > r1 - 1_000
                    && e.start_ms < r2
            });
            if boundary {
                continue;
            }
            out.duplicates += 1;
            let Some(first) = dl(&ev[d1]) else {
                continue;
            };
            if first.node.is_none() {
                // Pushed: explained when the first push's outcome may not have been stored.
                let after_2xx = push_answer(d1).is_some_and(|(r, _)| r.is_2xx());
                let why = unrecorded(d1);
                out.push_duplicates += 1;
                if after_2xx {
                    out.pushes_after_2xx += 1;
                }
                if why.is_some() {
                    out.explained_duplicates += 1;
                    if after_2xx {
                        out.explained_pushes_after_2xx += 1;
                    }
                } else {
                    v(
                        if after_2xx {
                            "pushed again after a 2xx without a fault"
                        } else {
                            "duplicate push without a fault"
                        },
                        format!(
                            "#{d2} repeats #{d1} (attempt {attempt}), whose answer reached a running node in time and no fault followed"
                        ),
                        &[d1, d2],
                    );
                }
                continue;
            }
            let ack = ack_of.get(&d1).map(|&a| &ev[a]);
            let acked_ok = ack.is_some_and(|a| {
                matches!(
                    &a.kind,
                    Kind::Ack {
                        answer: Answer::Ok(_),
                        ..
                    }
                )
            });
            let until = ack.map_or(r2, |a| a.end_ms);
            let fault = faults
                .iter()
                .any(|f| f.start <= until + SLACK_MS && f.end + 2_000 >= r1);
            let late = ack.is_some_and(|a| a.end_ms > first.deadline_ms);
            if !acked_ok || fault || late {
                out.explained_duplicates += 1;
            } else {
                v(
                    "duplicate delivery without a fault",
                    format!("#{d2} repeats #{d1} (attempt {attempt}), which was acknowledged OK in time"),
                    &[d1, d2],
                );
            }
        }

        if !pushed_services.contains(&key.0.as_str()) {
            continue;
        }
        // Pushed services (see the module's documentation).
        let pushes: Vec<usize> = deliveries
            .iter()
            .copied()
            .filter(|&d| matches!(ev[d].kind, Kind::Push { .. }))
            .collect();
        let of_attempt = |a: u32| {
            pushes
                .iter()
                .copied()
                .filter(move |&d| dl(&ev[d]).is_some_and(|x| x.attempt == a))
        };
        let non_2xx =
            |a: u32| of_attempt(a).any(|d| push_answer(d).is_some_and(|(r, _)| !r.is_2xx()));
        // 7. After a 2xx, another attempt only when the 2xx may not be what was stored.
        for &r in &pushes {
            let b = dl(&ev[r]).map_or(0, |x| x.attempt);
            let found = pushes.iter().copied().find(|&d| {
                let a = dl(&ev[d]).map_or(0, |x| x.attempt);
                a != b
                    && push_answer(d).is_some_and(|(reply, _)| reply.is_2xx())
                    && sent_lb(r) > ev[ack_of[&d]].end_ms
                    && !enqueue_between(ev[d].end_ms, ev[r].end_ms)
            });
            let Some(x) = found else { continue };
            let a = dl(&ev[x]).map_or(0, |x| x.attempt);
            out.pushes_after_2xx += 1;
            let explained = if b > a {
                non_2xx(a) || of_attempt(a).any(|d| unrecorded(d).is_some())
            } else {
                let first_a = of_attempt(a)
                    .map(|d| ev[d].end_ms)
                    .min()
                    .unwrap_or(ev[x].end_ms);
                fault_in(first_a - SLACK_MS, ev[r].end_ms)
            };
            if explained {
                out.explained_pushes_after_2xx += 1;
            } else {
                v(
                    "pushed again after a 2xx without a fault",
                    format!(
                        "#{r} (attempt {b}) after the 2xx to #{x} (attempt {a}), with no enqueue, non-2xx answer or fault that explains it"
                    ),
                    &[x, ack_of[&x], r],
                );
            }
        }
        // 8. A Subscribe stream gets nothing while the service has a push target, but on a
        // node that was just (re)started and has not read its settings yet.
        for &d in &deliveries {
            let Kind::Delivery { node, .. } = &ev[d].kind else {
                continue;
            };
            let t = ev[d].end_ms;
            let restarting = faults.iter().any(|f| {
                matches!(f.kind, FaultKind::Kill | FaultKind::Skew)
                    && f.node == Some(*node)
                    && f.start - SLACK_MS <= t
                    && t <= f.end + 2_500
            });
            if !restarting {
                v(
                    "streamed although the service has a push target",
                    format!("#{d} went to a Subscribe stream on n{}", node + 1),
                    &[d],
                );
            }
        }
        // 9. The end: SUCCEEDED after a 2xx to its final attempt; DEAD for a reason the
        // receiver gave, or after a stall or a fault.
        let Some(Answer::Ok(fin)) = input.finals.get(key) else {
            continue;
        };
        let answered = |pred: &dyn Fn(&Reply, u32) -> bool| {
            pushes.iter().any(|&d| {
                let a = dl(&ev[d]).map_or(0, |x| x.attempt);
                push_answer(d).is_some_and(|(r, _)| pred(&r, a))
            })
        };
        // A delivery's attempt is the state's plus one; a SUCCEEDED ack stores the state as
        // its delivery read it (a RETRY of a concurrent duplicate stored after it may have
        // counted one more).
        if fin.status == pb::RetryStatus::Succeeded as i32
            && !answered(&|r, a| r.is_2xx() && a <= fin.attempt + 1)
        {
            v(
                "SUCCEEDED without a 2xx",
                format!(
                    "GetRetry SUCCEEDED after {} attempts; the receiver answered no push of attempt {} or earlier with a 2xx",
                    fin.attempt,
                    fin.attempt + 1
                ),
                &[],
            );
        }
        if fin.status == pb::RetryStatus::Dead as i32 {
            let err = fin.last_error.as_str();
            let explained = if let Some((code, tx, attempt)) = super::push::parse_error_body(err) {
                tx == key.1
                    && answered(&|r, a| {
                        a == attempt && matches!(r, Reply::Status { code: c, .. } if *c == code)
                    })
            } else if err.contains("no response within the push timeout") {
                answered(&|r, _| *r == Reply::Stall) || !faults.is_empty()
            } else if err.starts_with("not acknowledged after") {
                !faults.is_empty() || pushes.iter().any(|&d| unrecorded(d).is_some())
            } else {
                false
            };
            if !explained {
                v(
                    "DEAD without a failing answer",
                    format!(
                        "GetRetry DEAD at attempt {}, last error {err:?}, which no answer of the receiver, stall or fault explains",
                        fin.attempt
                    ),
                    &[],
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::{AckOk, EnqueueOk};

    const SVC: &str = "mail";
    const TX: &str = "tx-1";

    fn at(start_ms: i64, end_ms: i64, kind: Kind) -> Event {
        Event {
            start_ms,
            end_ms,
            kind,
        }
    }

    /// An enqueue, its delivery on node 1, a SUCCEEDED ack on node 1 over [`ack`] and a
    /// cancel on node 2 over [`cancel`] that answered `cancelled = true`.
    /// An enqueue on node 0 over [start, end] answered OK with `due_ms` and `generation`.
    fn enqueue(start_ms: i64, end_ms: i64, due_ms: i64, generation: u64) -> Event {
        at(
            start_ms,
            end_ms,
            Kind::Enqueue {
                node: 0,
                service: SVC.into(),
                tx: TX.into(),
                asked: "delay=0ms".into(),
                batch: false,
                answer: Answer::Ok(EnqueueOk {
                    due_ms,
                    generation,
                    deduplicated: false,
                }),
            },
        )
    }

    fn race(ack: (i64, i64), cancel: (i64, i64)) -> Vec<Event> {
        vec![
            enqueue(0, 5, 1_000, 1),
            at(
                2_000,
                2_001,
                Kind::Delivery {
                    node: 1,
                    service: SVC.into(),
                    tx: TX.into(),
                    delivery_id: "d1".into(),
                    attempt: 1,
                    due_ms: 1_000,
                    deadline_ms: 32_000,
                },
            ),
            at(
                ack.0,
                ack.1,
                Kind::Ack {
                    node: 1,
                    service: SVC.into(),
                    tx: TX.into(),
                    delivery_id: "d1".into(),
                    delivery: 1,
                    attempt: 1,
                    outcome: Outcome::Succeeded,
                    retry_after_ms: None,
                    error: String::new(),
                    answer: Answer::Ok(AckOk {
                        next_due_ms: None,
                        dead_lettered: false,
                        snoozed: false,
                    }),
                },
            ),
            at(
                cancel.0,
                cancel.1,
                Kind::Cancel {
                    node: 2,
                    service: SVC.into(),
                    tx: TX.into(),
                    answer: Answer::Ok((true, pb::RetryStatus::Cancelled as i32)),
                },
            ),
        ]
    }

    fn kinds(events: &[Event], fin: pb::RetryStatus) -> Vec<&'static str> {
        let finals = BTreeMap::from([(
            (SVC.to_string(), TX.to_string()),
            Answer::Ok(pb::Retry {
                status: fin as i32,
                ..Default::default()
            }),
        )]);
        let letters = HashMap::new();
        check(&Input {
            events,
            finals: &finals,
            letters: &letters,
            clock_err_ms: 0,
            t0: 0,
        })
        .violations
        .iter()
        .map(|v| v.kind)
        .collect()
    }

    #[test]
    fn an_ack_racing_a_cancel_may_answer_ok_if_the_cancel_wins() {
        // The history of the chaos run that found the race: overlapping by 2 ms.
        let h = race((3_000, 3_005), (3_003, 3_006));
        assert_eq!(kinds(&h, pb::RetryStatus::Cancelled), Vec::<&str>::new());
        // The same race ending SUCCEEDED: the cancel was undone.
        assert_eq!(kinds(&h, pb::RetryStatus::Succeeded), vec!["cancel undone"]);
    }

    #[test]
    fn a_succeeded_ack_after_the_cancel_answered_may_answer_ok_and_lose() {
        let h = race((3_010, 3_012), (3_000, 3_005));
        assert_eq!(kinds(&h, pb::RetryStatus::Cancelled), Vec::<&str>::new());
        assert_eq!(kinds(&h, pb::RetryStatus::Succeeded), vec!["cancel undone"]);
    }

    #[test]
    fn a_retry_ack_started_after_the_cancel_answered_must_be_refused() {
        let mut h = race((3_010, 3_012), (3_000, 3_005));
        let Kind::Ack {
            outcome, answer, ..
        } = &mut h[2].kind
        else {
            unreachable!()
        };
        *outcome = Outcome::Retry;
        *answer = Answer::Ok(AckOk {
            next_due_ms: Some(9_000),
            dead_lettered: false,
            snoozed: false,
        });
        assert!(kinds(&h, pb::RetryStatus::Cancelled).contains(&"cancel undone by an ack"));
    }

    fn delivery(at_ms: i64, id: &str, due_ms: i64) -> Event {
        at(
            at_ms,
            at_ms,
            Kind::Delivery {
                node: 1,
                service: SVC.into(),
                tx: TX.into(),
                delivery_id: id.into(),
                attempt: 1,
                due_ms,
                deadline_ms: at_ms + 3_000,
            },
        )
    }

    fn ack(at_ms: i64, delivery: usize, outcome: Outcome, dead: bool) -> Event {
        at(
            at_ms,
            at_ms + 5,
            Kind::Ack {
                node: 1,
                service: SVC.into(),
                tx: TX.into(),
                delivery_id: format!("d{delivery}"),
                delivery,
                attempt: 1,
                outcome,
                retry_after_ms: None,
                error: format!("chaos-{outcome:?}-#{delivery}"),
                answer: Answer::Ok(AckOk {
                    next_due_ms: None,
                    dead_lettered: dead,
                    snoozed: false,
                }),
            },
        )
    }

    /// A redrive starts a dead retry again with its attempts reset: the same attempt is
    /// delivered again, which is no duplicate.
    #[test]
    fn a_redriven_retry_is_delivered_again_from_its_first_attempt() {
        let mut h = vec![
            enqueue(0, 5, 1_000, 1),
            delivery(1_500, "d1", 1_000),
            ack(1_600, 1, Outcome::Failed, true),
            at(
                3_000,
                3_010,
                Kind::Redrive {
                    node: 0,
                    service: SVC.into(),
                    tx: TX.into(),
                    dead_at_ms: 1_605,
                    answer: Answer::Ok(true),
                },
            ),
            delivery(5_500, "d4", 5_000),
            ack(5_600, 4, Outcome::Succeeded, false),
        ];
        let finals = BTreeMap::from([(
            (SVC.to_string(), TX.to_string()),
            Answer::Ok(pb::Retry {
                status: pb::RetryStatus::Succeeded as i32,
                ..Default::default()
            }),
        )]);
        let letters = HashMap::from([(
            (SVC.to_string(), TX.to_string()),
            vec!["chaos-Failed-#1".to_string()],
        )]);
        let check_h = |h: &[Event]| {
            check(&Input {
                events: h,
                finals: &finals,
                letters: &letters,
                clock_err_ms: 0,
                t0: 0,
            })
        };
        let r = check_h(&h);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.duplicates, 0);
        // A redrive that skipped the letter started nothing: the same attempt again is a
        // duplicate.
        let Kind::Redrive { answer, .. } = &mut h[3].kind else {
            unreachable!()
        };
        *answer = Answer::Ok(false);
        let kinds: Vec<&str> = check_h(&h).violations.iter().map(|v| v.kind).collect();
        assert_eq!(kinds, vec!["duplicate delivery without a fault"]);
    }

    /// A SUCCEEDED ack that lost to a cancel does not make a later enqueue (a fresh start
    /// after the cancel) a violation; one that no cancel raced does.
    #[test]
    fn an_enqueue_after_a_succeeded_ack_is_refused_unless_a_cancel_won() {
        let enqueue = enqueue(4_000, 4_005, 5_000, 2);
        let delivery_again = at(
            6_000,
            6_001,
            Kind::Delivery {
                node: 1,
                service: SVC.into(),
                tx: TX.into(),
                delivery_id: "d2".into(),
                attempt: 1,
                due_ms: 5_000,
                deadline_ms: 36_000,
            },
        );
        let mut h = race((3_010, 3_012), (3_000, 3_005));
        h.extend([enqueue.clone(), delivery_again.clone()]);
        assert_eq!(kinds(&h, pb::RetryStatus::Cancelled), Vec::<&str>::new());
        // No cancel: the SUCCEEDED ack stands, and a later enqueue must be refused.
        let mut h = race((3_010, 3_012), (3_000, 3_005));
        h.truncate(3);
        h.extend([enqueue, delivery_again]);
        assert!(kinds(&h, pb::RetryStatus::Scheduled)
            .contains(&"SUCCEEDED undone (a later call was accepted)"));
    }

    // Pushed services.

    const PUSHED: &str = "pushed";

    fn push_req(at_ms: i64, id: &str, attempt: u32) -> Event {
        at(
            at_ms,
            at_ms,
            Kind::Push {
                service: PUSHED.into(),
                tx: TX.into(),
                delivery_id: id.into(),
                attempt,
                due_ms: at_ms - 100,
                problem: None,
            },
        )
    }

    fn push_answer(at_ms: i64, push: usize, attempt: u32, reply: Reply) -> Event {
        at(
            at_ms - 5,
            at_ms,
            Kind::PushAnswer {
                service: PUSHED.into(),
                tx: TX.into(),
                push,
                attempt,
                delivery_id: format!("d{push}"),
                reply,
            },
        )
    }

    fn ok(code: u16) -> Reply {
        Reply::Status {
            code,
            retry_after_s: None,
        }
    }

    fn pushed_enqueue() -> Event {
        let mut e = enqueue(0, 5, 1_000, 1);
        if let Kind::Enqueue { service, .. } = &mut e.kind {
            *service = PUSHED.into();
        }
        e
    }

    fn kill(start_ms: i64, end_ms: i64) -> Event {
        at(
            start_ms,
            end_ms,
            Kind::Fault {
                kind: FaultKind::Kill,
                node: Some(1),
                detail: String::new(),
            },
        )
    }

    /// The violations of a pushed history, with the final `status` after `attempts` and
    /// `last_error`, and the delivery ids logged as not stored.
    fn push_kinds(
        events: &[Event],
        status: pb::RetryStatus,
        attempts: u32,
        last_error: &str,
        unstored: &[&str],
    ) -> Vec<&'static str> {
        let key = (PUSHED.to_string(), TX.to_string());
        let finals = BTreeMap::from([(
            key.clone(),
            Answer::Ok(pb::Retry {
                status: status as i32,
                attempt: attempts,
                last_error: last_error.into(),
                ..Default::default()
            }),
        )]);
        let letters = HashMap::from([(key, vec![last_error.to_string()])]);
        let unstored: HashSet<String> = unstored.iter().map(|s| s.to_string()).collect();
        let push = Push {
            services: &[PUSHED],
            timeout_ms: 2_000,
            unstored: &unstored,
        };
        check_with(
            &Input {
                events,
                finals: &finals,
                letters: &letters,
                clock_err_ms: 0,
                t0: 0,
            },
            Some(&push),
        )
        .violations
        .iter()
        .map(|v| v.kind)
        .collect()
    }

    const SUCCEEDED: pb::RetryStatus = pb::RetryStatus::Succeeded;

    #[test]
    fn a_push_answered_2xx_settles_its_retry() {
        let h = vec![
            pushed_enqueue(),
            push_req(1_100, "p1", 2),
            push_answer(1_150, 1, 2, ok(204)),
        ];
        assert_eq!(push_kinds(&h, SUCCEEDED, 1, "", &[]), Vec::<&str>::new());
        // SUCCEEDED with no 2xx: the node settled it without the receiver's say.
        let mut no_2xx = h.clone();
        no_2xx[2] = push_answer(1_150, 1, 2, ok(503));
        assert_eq!(
            push_kinds(&no_2xx, SUCCEEDED, 1, "", &[]),
            vec!["SUCCEEDED without a 2xx"]
        );
    }

    #[test]
    fn the_same_attempt_pushed_again_after_a_2xx_needs_a_fault_or_an_unstored_outcome() {
        let h = vec![
            pushed_enqueue(),
            push_req(1_100, "p1", 2),
            push_answer(1_150, 1, 2, ok(200)),
            push_req(9_000, "p2", 2),
            push_answer(9_050, 3, 2, ok(200)),
        ];
        assert_eq!(
            push_kinds(&h, SUCCEEDED, 1, "", &[]),
            vec!["pushed again after a 2xx without a fault"]
        );
        // The node logged that it could not store the first outcome.
        assert_eq!(
            push_kinds(&h, SUCCEEDED, 1, "", &["p1"]),
            Vec::<&str>::new()
        );
        // A node killed while the 2xx may still have been on its way to the store.
        let mut killed = h.clone();
        killed.push(kill(2_500, 4_000));
        assert_eq!(
            push_kinds(&killed, SUCCEEDED, 1, "", &[]),
            Vec::<&str>::new()
        );
        // A fault long after the answer explains nothing.
        let mut late = h.clone();
        late.push(kill(7_000, 8_000));
        assert_eq!(
            push_kinds(&late, SUCCEEDED, 1, "", &[]),
            vec!["pushed again after a 2xx without a fault"]
        );
        // The same after a 503: the RETRY it means was not stored either.
        let mut after_503 = h.clone();
        after_503[2] = push_answer(1_150, 1, 2, ok(503));
        assert_eq!(
            push_kinds(&after_503, SUCCEEDED, 1, "", &[]),
            vec!["duplicate push without a fault"]
        );
    }

    #[test]
    fn a_later_attempt_after_a_2xx_needs_a_failing_answer_to_that_attempt_or_a_fault() {
        let h = vec![
            pushed_enqueue(),
            push_req(1_100, "p1", 2),
            push_answer(1_150, 1, 2, ok(200)),
            push_req(4_000, "p2", 3),
            push_answer(4_050, 3, 3, ok(200)),
        ];
        assert_eq!(
            push_kinds(&h, SUCCEEDED, 2, "", &[]),
            vec!["pushed again after a 2xx without a fault"]
        );
        // A first push of attempt 2 was answered 503 by a node stopped before it stored the
        // RETRY; the next owner pushed attempt 2 again (200); the stopped node resumed and
        // stored its RETRY: attempt 3 after a 2xx to attempt 2.
        let stop = at(
            1_200,
            4_000,
            Kind::Fault {
                kind: FaultKind::Stop,
                node: Some(0),
                detail: String::new(),
            },
        );
        let mixed = vec![
            pushed_enqueue(),
            push_req(1_100, "p0", 2),
            push_answer(1_150, 1, 2, ok(503)),
            stop,
            push_req(4_500, "p1", 2),
            push_answer(4_550, 4, 2, ok(200)),
            push_req(7_000, "p2", 3),
            push_answer(7_050, 6, 3, ok(200)),
        ];
        assert_eq!(
            push_kinds(&mixed, SUCCEEDED, 2, "", &[]),
            Vec::<&str>::new()
        );
        // A re-enqueue between starts the retry anew.
        let mut again = h.clone();
        again.push(enqueue(2_000, 2_010, 3_900, 2));
        if let Kind::Enqueue { service, .. } = &mut again[5].kind {
            *service = PUSHED.into();
        }
        assert_eq!(
            push_kinds(&again, SUCCEEDED, 2, "", &[]),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn a_dead_pushed_retry_names_an_answer_of_the_receiver() {
        let failed = "HTTP 422: chaos-push 422 tx-1 attempt 2";
        let h = vec![
            pushed_enqueue(),
            push_req(1_100, "p1", 2),
            push_answer(1_150, 1, 2, ok(422)),
        ];
        let dead = pb::RetryStatus::Dead;
        assert_eq!(push_kinds(&h, dead, 2, failed, &[]), Vec::<&str>::new());
        let mut answered_2xx = h.clone();
        answered_2xx[2] = push_answer(1_150, 1, 2, ok(200));
        assert_eq!(
            push_kinds(&answered_2xx, dead, 2, failed, &[]),
            vec!["DEAD without a failing answer"]
        );
        // A timeout after a stall; a timeout with neither stall nor fault.
        let timeout = "no response within the push timeout";
        let mut stalled = h.clone();
        stalled[2] = push_answer(1_150, 1, 2, Reply::Stall);
        assert_eq!(
            push_kinds(&stalled, dead, 2, timeout, &[]),
            Vec::<&str>::new()
        );
        assert_eq!(
            push_kinds(&answered_2xx, dead, 2, timeout, &[]),
            vec!["DEAD without a failing answer"]
        );
    }

    #[test]
    fn pushed_requests_are_well_formed_unique_and_never_streamed() {
        let mut h = vec![
            pushed_enqueue(),
            push_req(1_100, "p1", 2),
            push_answer(1_150, 1, 2, ok(503)),
            push_req(3_000, "p1", 3),
            push_answer(3_050, 3, 3, ok(200)),
        ];
        if let Kind::Push { problem, .. } = &mut h[3].kind {
            *problem = Some("webhook-signature does not verify".into());
        }
        assert_eq!(
            push_kinds(&h, SUCCEEDED, 2, "", &[]),
            vec!["malformed push request", "delivery id pushed twice"]
        );
        let mut streamed = vec![pushed_enqueue(), delivery(1_100, "d1", 1_000)];
        if let Kind::Delivery { service, .. } = &mut streamed[1].kind {
            *service = PUSHED.into();
        }
        streamed.push(push_req(5_000, "p1", 2));
        streamed.push(push_answer(5_050, 2, 2, ok(200)));
        assert_eq!(
            push_kinds(&streamed, SUCCEEDED, 1, "", &[]),
            vec!["streamed although the service has a push target"]
        );
        // Not while its node was restarting.
        streamed.push(kill(0, 1_000));
        assert_eq!(
            push_kinds(&streamed, SUCCEEDED, 1, "", &[]),
            Vec::<&str>::new()
        );
    }

    /// An enqueue accepted just after a 2xx, before the node stored the SUCCEEDED it means,
    /// merges into the retry that SUCCEEDED then settles (the history of seed 4242); one
    /// accepted long after must be delivered.
    #[test]
    fn an_enqueue_just_after_a_2xx_may_be_settled_by_it() {
        let mut h = vec![
            pushed_enqueue(),
            push_req(1_100, "p1", 2),
            push_answer(1_250, 1, 2, ok(200)),
            enqueue(1_200, 1_300, 3_000, 1),
        ];
        if let Kind::Enqueue { service, .. } = &mut h[3].kind {
            *service = PUSHED.into();
        }
        assert_eq!(push_kinds(&h, SUCCEEDED, 1, "", &[]), Vec::<&str>::new());
        h[3].start_ms = 9_000;
        h[3].end_ms = 9_010;
        assert_eq!(
            push_kinds(&h, SUCCEEDED, 1, "", &[]),
            vec!["acknowledged schedule never delivered"]
        );
    }
}
