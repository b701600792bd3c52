//! Checks a chaos history against the contract (docs/architecture.md "Dispatch" and
//! "Guarantees across nodes").
//!
//! The history is a set of intervals on Cassandra's clock: a call may have taken effect at
//! any point between its start and its end, and a call whose outcome is unknown (deadline,
//! connection, unavailable) may have taken effect at any point after its start, even a while
//! after its end (a SIGSTOPped node resumes and finishes it). A rule fires only when no such
//! placement of the calls explains what was seen. A delivery is received some time after it
//! was sent; it may have been sent before a node was SIGSTOPped (or before Cassandra was) and
//! reach the executor only after the resume, so its send time is bounded from below by the
//! start of such a pause.

use std::collections::{BTreeMap, HashMap};

use rebound_proto::v1 as pb;

use super::history::{Answer, Event, FaultKind, Kind, Outcome};

/// Time the test process itself may take between a message arriving and it being stamped
/// (two cores, three debug nodes and Cassandra), and a node between reading a state row and
/// sending the delivery it decided on.
pub const SLACK_MS: i64 = 500;
/// How long after its end a call of unknown outcome may still take effect.
pub const UNKNOWN_TAIL_MS: i64 = 5_000;

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
        Kind::Delivery { .. } => Role::Delivery,
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

fn is_enqueue(e: &Event) -> bool {
    matches!(e.kind, Kind::Enqueue { .. })
}

fn status_name(s: i32) -> String {
    pb::RetryStatus::try_from(s)
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| s.to_string())
}

pub fn check(input: &Input) -> CheckResult {
    let ev = input.events;
    let mut out = CheckResult::default();
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
    // The earliest time a delivery may have been sent.
    let sent_lb = |i: usize| -> i64 {
        let e = &ev[i];
        let Kind::Delivery { node, .. } = &e.kind else {
            unreachable!()
        };
        let recv = e.end_ms;
        let mut lb = recv - SLACK_MS;
        for f in &faults {
            let relevant = match f.kind {
                FaultKind::Stop => f.node == Some(*node),
                FaultKind::CassandraPause => true,
                _ => false,
            };
            if relevant && f.start <= recv && f.end + 1_500 >= recv {
                lb = lb.min(f.start - SLACK_MS);
            }
        }
        lb
    };
    // Acks by delivery index.
    let mut ack_of: HashMap<usize, usize> = HashMap::new();
    let mut by_tx: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, e) in ev.iter().enumerate() {
        if let Kind::Ack { delivery, .. } = &e.kind {
            ack_of.insert(*delivery, i);
        }
        if let Some((s, t)) = e.tx() {
            by_tx
                .entry((s.to_string(), t.to_string()))
                .or_default()
                .push(i);
        }
        if matches!(e.kind, Kind::Delivery { .. }) {
            out.deliveries += 1;
        }
    }
    // The bound on duplicates: deliveries in flight at a fault (on its node, or anywhere for
    // a Cassandra pause), plus those whose ack did not come back OK or was never sent.
    for f in &faults {
        for (i, e) in ev.iter().enumerate() {
            if let Kind::Delivery { node, .. } = &e.kind {
                if e.end_ms <= f.start
                    && (f.node.is_none() || f.node == Some(*node))
                    && ack_of.get(&i).is_none_or(|a| ev[*a].end_ms > f.start)
                {
                    out.duplicate_bound += 1;
                }
            }
        }
    }
    for (i, e) in ev.iter().enumerate() {
        if matches!(e.kind, Kind::Delivery { .. }) {
            match ack_of.get(&i) {
                None => out.duplicate_bound += 1,
                Some(a)
                    if !matches!(
                        &ev[*a].kind,
                        Kind::Ack {
                            answer: Answer::Ok(_),
                            ..
                        }
                    ) =>
                {
                    out.duplicate_bound += 1
                }
                _ => {}
            }
        }
    }

    for (key, idx) in &by_tx {
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
            let Kind::Delivery { due_ms, .. } = &ev[d].kind else {
                continue;
            };
            if ev[d].end_ms + input.clock_err_ms + 20 < *due_ms {
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

        // 4. Every acknowledged schedule is delivered until an outcome ends it.
        let last_schedule = idx
            .iter()
            .copied()
            .filter(|&i| role(&ev[i]) == Role::Schedule)
            .max_by_key(|&i| ev[i].end_ms);
        if let Some(s) = last_schedule {
            let start = ev[s].start_ms;
            let ended = idx.iter().any(|&j| {
                matches!(role(&ev[j]), Role::End | Role::Unknown) && effect_end(&ev[j]) > start
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
            let Kind::Delivery { attempt, .. } = &ev[d2].kind else {
                continue;
            };
            let Some(&d1) = deliveries[..n].iter().rev().find(
                |&&d| matches!(&ev[d].kind, Kind::Delivery { attempt: a, .. } if a == attempt),
            ) else {
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
            let Kind::Delivery { deadline_ms, .. } = &ev[d1].kind else {
                continue;
            };
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
            let late = ack.is_some_and(|a| a.end_ms > *deadline_ms);
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
}
