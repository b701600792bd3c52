//! The rules of a pushed service (see "Pushed services" in the checker's documentation): 7.
//! after a 2xx, another attempt only when the 2xx may not be what was stored; 8. a Subscribe
//! stream gets nothing while the service has a push target; 9. SUCCEEDED only after a 2xx,
//! DEAD only for a reason the receiver gave, a stall or a fault.

use rebound_proto::v1 as pb;

use super::{
    view::{dl, Tx, View},
    CheckResult, Input, SLACK_MS,
};
use crate::chaos::{
    history::{Answer, FaultKind, Kind, Reply},
    push::parse_error_body,
};

/// Rules 7 to 9, for a transaction of a pushed service.
pub(super) fn check(input: &Input, view: &View, tx: &Tx, out: &mut CheckResult) {
    let (ev, faults, ack_of) = (view.ev, &view.faults, &view.ack_of);
    let (key, deliveries) = (tx.key, &tx.deliveries);
    let sent_lb = |i: usize| view.sent_lb(i);
    let push_answer = |d: usize| view.push_answer(d);
    let unrecorded = |d: usize| view.unrecorded(d);
    let fault_in = |lo: i64, hi: i64| view.fault_in(lo, hi);
    let enqueue_between = |from: i64, to: i64| tx.enqueue_between(ev, from, to);
    let mut v = |kind: &'static str, detail: String, focus: &[usize]| {
        out.violations.push(tx.violation(kind, detail, focus));
    };
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
    let non_2xx = |a: u32| of_attempt(a).any(|d| push_answer(d).is_some_and(|(r, _)| !r.is_2xx()));
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
    for &d in deliveries {
        let Kind::Delivery { node, .. } = &ev[d].kind else {
            continue;
        };
        let t = ev[d].end_ms;
        let restarting = faults.iter().any(|f| {
            matches!(f.kind, FaultKind::Kill | FaultKind::Skew | FaultKind::Join)
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
        return;
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
        let explained = if let Some((code, tx, attempt)) = parse_error_body(err) {
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
