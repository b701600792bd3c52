//! The delivery rules, for streamed and pushed services alike: 1. never early; 4. every
//! acknowledged schedule is delivered until an outcome ends it, and nothing is SCHEDULED, or
//! DEAD without a dead letter, after the drain; 6. the same attempt delivered again with no
//! scheduling in between is a duplicate, which a fault, a late ack or an unstored push
//! outcome must explain, and the bound on duplicates; 10. on time (streamed services): away
//! from faults, an acknowledged schedule is first delivered within the limit of its due
//! time.

use rebound_proto::v1 as pb;

use super::{
    view::{dl, effect_end, role, status_name, Dl, Role, Tx, View},
    CheckResult, Input, RECORD_SLACK_MS, SLACK_MS, UNKNOWN_TAIL_MS,
};
use crate::chaos::history::{Answer, EnqueueOk, FaultKind, Kind};

/// The bound on duplicates: deliveries in flight at a fault (on its node, or anywhere for a
/// Cassandra pause and for a join, whose lease moves touch every node), plus those whose ack
/// did not come back OK or was never sent. A push is
/// in flight until its outcome may be stored, and may be on any node.
pub(super) fn duplicate_bound(view: &View) -> usize {
    let (ev, faults, ack_of) = (view.ev, &view.faults, &view.ack_of);
    let push_answer = |d: usize| view.push_answer(d);
    let unstored = view.unstored;
    let mut bound = 0;
    for f in faults {
        for (i, e) in ev.iter().enumerate() {
            let in_flight = e.end_ms <= f.start
                && match &e.kind {
                    Kind::Delivery { node, .. } => {
                        (f.node.is_none() || f.kind == FaultKind::Join || f.node == Some(*node))
                            && ack_of.get(&i).is_none_or(|a| ev[*a].end_ms > f.start)
                    }
                    Kind::Push { .. } => {
                        push_answer(i).is_none_or(|(_, s)| s + RECORD_SLACK_MS > f.start)
                    }
                    _ => false,
                };
            if in_flight {
                bound += 1;
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
            bound += 1;
        }
    }
    bound
}

/// 1. Never early.
pub(super) fn never_early(input: &Input, view: &View, tx: &Tx, out: &mut CheckResult) {
    let ev = view.ev;
    let mut v = |kind: &'static str, detail: String, focus: &[usize]| {
        out.violations.push(tx.violation(kind, detail, focus));
    };
    for &d in &tx.deliveries {
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
}

/// 4. Every acknowledged schedule is delivered until an outcome ends it; the final states.
pub(super) fn until_ended(input: &Input, view: &View, tx: &Tx, out: &mut CheckResult) {
    let ev = view.ev;
    let (key, idx, deliveries) = (tx.key, tx.idx, &tx.deliveries);
    let push_answer = |d: usize| view.push_answer(d);
    let mut v = |kind: &'static str, detail: String, focus: &[usize]| {
        out.violations.push(tx.violation(kind, detail, focus));
    };
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
                Kind::PushAnswer { push, .. } => {
                    push_answer(*push).is_some_and(|(_, settled)| settled + UNKNOWN_TAIL_MS > start)
                }
                _ => false,
            };
            push_end
                || (matches!(role(&ev[j]), Role::End | Role::Unknown) && effect_end(&ev[j]) > start)
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
}

/// 6. Duplicates.
pub(super) fn duplicates(view: &View, tx: &Tx, out: &mut CheckResult) {
    let (ev, faults, ack_of) = (view.ev, &view.faults, &view.ack_of);
    let (idx, deliveries) = (tx.idx, &tx.deliveries);
    let push_answer = |d: usize| view.push_answer(d);
    let unrecorded = |d: usize| view.unrecorded(d);
    let mut v = |kind: &'static str, detail: String, focus: &[usize]| {
        out.violations.push(tx.violation(kind, detail, focus));
    };
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
                format!(
                    "#{d2} repeats #{d1} (attempt {attempt}), which was acknowledged OK in time"
                ),
                &[d1, d2],
            );
        }
    }
}

/// Rule 10, on time. An acknowledged schedule (an enqueue that was not deduplicated, or a RETRY
/// ack with its next due time) is judged when nothing else may have changed the retry
/// before it was delivered (no other schedule, outcome or call of unknown outcome of the
/// transaction overlaps it) and no fault may have had an effect in it (from the schedule's
/// start to its first delivery of that due time, or to the limit, a fault's period extended
/// by `OnTime::after_fault_ms`). That delivery must then be received by
/// `max(due, answered) + limit`; its lateness (received − due) is sampled. Its absence is
/// rule 4's to judge. An action's schedule (run now, reschedule) is not judged: it only keeps
/// the schedules it overlaps from being judged, as any other call that may change the retry.
pub(super) fn on_time(input: &Input, view: &View, tx: &Tx, out: &mut CheckResult) {
    let Some(rule) = &input.on_time else {
        return;
    };
    let ev = view.ev;
    for &s in tx.idx {
        let due = match &ev[s].kind {
            Kind::Enqueue {
                answer:
                    Answer::Ok(EnqueueOk {
                        due_ms,
                        deduplicated: false,
                        ..
                    }),
                ..
            } => *due_ms,
            Kind::Ack {
                answer: Answer::Ok(a),
                ..
            } if !a.dead_lettered && role(&ev[s]) == Role::Schedule => match a.next_due_ms {
                Some(d) => d,
                None => continue,
            },
            _ => continue,
        };
        let ready = due.max(ev[s].end_ms);
        let limit = ready + rule.limit_ms + input.clock_err_ms;
        let lo = ev[s].start_ms;
        let first = tx
            .deliveries
            .iter()
            .copied()
            .filter(|&d| ev[d].end_ms >= lo && dl(&ev[d]).is_some_and(|x| x.due_ms == due))
            .min_by_key(|&d| ev[d].end_ms);
        let Some(d) = first else {
            continue;
        };
        // What happened after the delivery (its ack, above all) is not what made it late.
        let hi = limit.min(ev[d].end_ms);
        let overlapped = tx.idx.iter().any(|&j| {
            j != s
                && matches!(role(&ev[j]), Role::Schedule | Role::End | Role::Unknown)
                && ev[j].start_ms <= hi
                && effect_end(&ev[j]) >= lo
        });
        let faulted = view
            .faults
            .iter()
            .any(|f| f.start <= hi && f.end + rule.after_fault_ms >= lo);
        if overlapped || faulted {
            continue;
        }
        out.on_time_judged += 1;
        out.lateness_ms.push(ev[d].end_ms - due);
        if let Kind::Enqueue { asked, .. } = &ev[s].kind {
            if let Some(ms) = asked_ms(asked) {
                // The harness computed the due time at about the call's start.
                out.lateness_requested_ms
                    .push(ev[d].end_ms - (ev[s].start_ms + ms));
            }
        }
        if ev[d].end_ms > limit {
            out.violations.push(tx.violation(
                "delivered late",
                format!(
                    "#{s} due at {} ms, answered at {} ms, first delivered {} ms after it was due \
                     (#{d}); the limit is {} ms after max(due, answered), with no fault near",
                    due - input.t0,
                    ev[s].end_ms - input.t0,
                    ev[d].end_ms - due,
                    rule.limit_ms
                ),
                &[s, d],
            ));
        }
    }
}

/// The delay an enqueue asked for (`delay=…ms` or `due_in=…ms`, as the workload writes it).
fn asked_ms(asked: &str) -> Option<i64> {
    let v = asked
        .strip_prefix("delay=")
        .or_else(|| asked.strip_prefix("due_in="))?;
    v.strip_suffix("ms")?.parse().ok()
}
