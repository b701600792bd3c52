//! The checker's rules for a pushed service.

use rebound_proto::v1 as pb;

use super::*;
use std::collections::HashSet;

use crate::chaos::history::Reply;

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
            on_time: None,
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
