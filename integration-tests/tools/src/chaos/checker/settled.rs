//! The rules of what an acknowledged outcome settles: 2. nothing is delivered after a
//! SUCCEEDED ack answered OK, and no later call is accepted as if it were not SUCCEEDED (an
//! enqueue, a cancel, an action that changed it); 3. after a cancel answered cancelled = true,
//! that generation is never delivered again, and no ack or action undoes the cancel; 5. every
//! DEAD retry is in the dead letters, with its last error.
//!
//! Actions (ActOnRetries) act only on a SCHEDULED retry, and a schedule an action writes in
//! a race with a SUCCEEDED ack or a cancel reads SUCCEEDED or CANCELLED (docs/architecture.md,
//! "Acting on retries"): so only an enqueue excuses a delivery after them, never an action,
//! and an action that changed the retry after them (with no enqueue between) undid them. A
//! cancel action is a cancel, with the cancel cell: one that may have taken effect after a
//! delivery's read beats its SUCCEEDED ack as a cancel does.

use rebound_proto::v1 as pb;

use super::{
    view::{effect_end, role, status_name, Role, Tx, View},
    CheckResult, Input,
};
use crate::chaos::history::{Answer, Kind, Outcome};

/// Rules 2, 3 and 5, event by event.
pub(super) fn outcomes(input: &Input, view: &View, tx: &Tx, out: &mut CheckResult) {
    let ev = view.ev;
    let (key, idx, deliveries) = (tx.key, tx.idx, &tx.deliveries);
    let sent_lb = |i: usize| view.sent_lb(i);
    let enqueue_between = |from: i64, to: i64| tx.enqueue_between(ev, from, to);
    let mut v = |kind: &'static str, detail: String, focus: &[usize]| {
        out.violations.push(tx.violation(kind, detail, focus));
    };
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
                        } | Kind::Act {
                            action: pb::RetryAction::Cancel,
                            answer: Answer::Ok(true) | Answer::Unknown(_),
                            ..
                        }
                    ) && ev[j].start_ms < e.end_ms
                        && effect_end(&ev[j]) > read_at
                });
                // An enqueue after the ack started schedules the retry again. So does one that
                // took effect after the delivery's read when a cancel did too: the ack lost to
                // the cancel, and the enqueue started a fresh retry it does not cover (the
                // timer delivers at the due time, so its read can precede both by little).
                let since = if cancelled_after_read {
                    read_at
                } else {
                    e.start_ms
                };
                if let Some(&d) = deliveries
                    .iter()
                    .find(|&&d| sent_lb(d) > e.end_ms && !enqueue_between(since, ev[d].end_ms))
                {
                    v(
                        "delivered after SUCCEEDED was acknowledged",
                        format!("ack #{a} returned OK, delivery #{d} sent after it"),
                        &[a, d],
                    );
                }
                // An action that changed the retry after the ack answered found it SCHEDULED:
                // only an enqueue between (a fresh start after a cancel that beat the ack;
                // one accepted after the ack alone is a violation above) may have made it so.
                if let Some(&x) = idx.iter().find(|&&x| {
                    ev[x].start_ms > e.end_ms
                        && match &ev[x].kind {
                            Kind::Enqueue {
                                answer: Answer::Ok(_),
                                ..
                            }
                            | Kind::Cancel {
                                answer: Answer::Ok((true, _)),
                                ..
                            } => !cancelled_after_read,
                            Kind::Act {
                                answer: Answer::Ok(true),
                                ..
                            } => !enqueue_between(since, ev[x].start_ms),
                            _ => false,
                        }
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
                        format!("cancel #{a} answered cancelled=true, delivery #{d} sent after it"),
                        &[a, d],
                    );
                }
                // An action acts only on a SCHEDULED retry: after the cancel answered, only an
                // enqueue (a fresh start) may have made it one again.
                if let Some(&x) = idx.iter().find(|&&x| {
                    matches!(
                        &ev[x].kind,
                        Kind::Act {
                            answer: Answer::Ok(true),
                            ..
                        }
                    ) && ev[x].start_ms > ce
                        && !enqueue_between(cs, ev[x].start_ms)
                }) {
                    v(
                        "cancel undone (a later action changed it)",
                        format!(
                            "cancel #{a} answered cancelled=true, later action #{x} changed the retry as if it were SCHEDULED"
                        ),
                        &[a, x],
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
                // the cancel starts a new retry, and an unknown outcome may be one. No
                // action counts: one that raced the cancel wrote a schedule or a dead
                // letter that reads CANCELLED, and one after it must have skipped it.
                let later = idx.iter().any(|&j| {
                    j != a
                        && !matches!(ev[j].kind, Kind::Act { .. })
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
}
