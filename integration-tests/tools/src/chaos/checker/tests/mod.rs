//! The checker's rules on small histories.

use std::collections::{BTreeMap, HashMap};

use rebound_proto::v1 as pb;

use super::*;
use crate::chaos::history::{AckOk, Answer, EnqueueOk, Event, FaultKind, Kind, Outcome};

mod actions;
mod push;

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
        on_time: None,
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
            on_time: None,
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

/// The retry delivered again at 6 s (due at 5 s), after the race of `race`.
fn delivery_again() -> Event {
    at(
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
    )
}

/// A SUCCEEDED ack that lost to a cancel does not make a later enqueue (a fresh start
/// after the cancel) a violation; one that no cancel raced does.
#[test]
fn an_enqueue_after_a_succeeded_ack_is_refused_unless_a_cancel_won() {
    let enqueue = enqueue(4_000, 4_005, 5_000, 2);
    let delivery_again = delivery_again();
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

/// Seed 131228's interleaving: while a delivery runs, a cancel and a fresh enqueue (both slow,
/// both taking effect after the delivery's read, the enqueue answered before the ack was sent);
/// the SUCCEEDED ack answers OK and loses to the cancel, and the fresh retry is delivered. No
/// violation; without the cancel, the same delivery is one.
#[test]
fn a_fresh_start_after_a_cancel_that_beat_the_ack_may_be_delivered() {
    let fresh = enqueue(1_500, 2_900, 5_000, 2);
    let delivery_again = delivery_again();
    let mut h = race((3_010, 3_012), (1_000, 2_800));
    h.extend([fresh.clone(), delivery_again.clone()]);
    assert_eq!(kinds(&h, pb::RetryStatus::Succeeded), Vec::<&str>::new());
    let mut h = race((3_010, 3_012), (1_000, 2_800));
    h.truncate(3);
    h.extend([fresh, delivery_again]);
    assert!(kinds(&h, pb::RetryStatus::Succeeded)
        .contains(&"delivered after SUCCEEDED was acknowledged"));
}

// Actions (ActOnRetries of one retry) and listings.

/// An action on node 2 over [start, end] answered `answer` (Ok(true): changed).
/// An enqueue due at 1,000 ms and its one delivery received at `received`, with `extra`
/// events after them; judged by rule 10 with a limit of 2,000 ms and 3,000 ms after a fault.
fn on_time_of(received: i64, extra: Vec<Event>) -> CheckResult {
    let mut events = vec![
        enqueue(0, 5, 1_000, 1),
        at(
            received - 1,
            received,
            Kind::Delivery {
                node: 1,
                service: SVC.into(),
                tx: TX.into(),
                delivery_id: "d1".into(),
                attempt: 1,
                due_ms: 1_000,
                deadline_ms: received + 30_000,
            },
        ),
    ];
    events.extend(extra);
    let finals = BTreeMap::from([(
        (SVC.to_string(), TX.to_string()),
        Answer::Ok(pb::Retry {
            status: pb::RetryStatus::Succeeded as i32,
            ..Default::default()
        }),
    )]);
    let letters = HashMap::new();
    check(&Input {
        events: &events,
        finals: &finals,
        letters: &letters,
        clock_err_ms: 0,
        t0: 0,
        on_time: Some(OnTime {
            limit_ms: 2_000,
            after_fault_ms: 3_000,
        }),
    })
}

fn late_kinds(r: &CheckResult) -> Vec<&'static str> {
    r.violations
        .iter()
        .map(|v| v.kind)
        .filter(|k| *k == "delivered late")
        .collect()
}

#[test]
fn a_delivery_past_the_limit_away_from_faults_is_late() {
    // Within the limit: judged, lateness sampled from the due time.
    let r = on_time_of(2_900, vec![]);
    assert_eq!((r.on_time_judged, r.lateness_ms.clone()), (1, vec![1_900]));
    // From the due time asked for too (delay=0ms, asked at 0).
    assert_eq!(r.lateness_requested_ms, vec![2_900]);
    assert!(late_kinds(&r).is_empty());
    // Past it.
    let r = on_time_of(3_100, vec![]);
    assert_eq!(late_kinds(&r), vec!["delivered late"]);
}

#[test]
fn lateness_near_a_fault_or_another_call_is_not_judged() {
    let fault = |start, end| {
        at(
            start,
            end,
            Kind::Fault {
                kind: FaultKind::Kill,
                node: Some(1),
                detail: String::new(),
            },
        )
    };
    // A fault before the limit, or one that ended less than after_fault_ms before the enqueue.
    for f in [fault(2_500, 2_600), fault(-3_500, -2_900)] {
        let r = on_time_of(9_000, vec![f]);
        assert_eq!((r.on_time_judged, late_kinds(&r)), (0, vec![]));
    }
    // One that ended long before is no excuse.
    let r = on_time_of(9_000, vec![fault(-9_000, -8_000)]);
    assert_eq!(late_kinds(&r), vec!["delivered late"]);
    // A cancel of unknown outcome may have changed the retry before the limit.
    let cancel = at(
        1_500,
        1_600,
        Kind::Cancel {
            node: 2,
            service: SVC.into(),
            tx: TX.into(),
            answer: Answer::Unknown("deadline".into()),
        },
    );
    let r = on_time_of(9_000, vec![cancel]);
    assert_eq!((r.on_time_judged, late_kinds(&r)), (0, vec![]));
}

#[test]
fn what_follows_the_delivery_does_not_excuse_it() {
    // Its ack (a RETRY that schedules again) comes after the late delivery: still late.
    let ack = at(
        3_200,
        3_210,
        Kind::Ack {
            node: 1,
            service: SVC.into(),
            tx: TX.into(),
            delivery_id: "d1".into(),
            delivery: 1,
            attempt: 1,
            outcome: Outcome::Retry,
            retry_after_ms: None,
            error: "x".into(),
            answer: Answer::Ok(AckOk {
                next_due_ms: Some(9_000),
                dead_lettered: false,
                snoozed: false,
            }),
        },
    );
    let r = on_time_of(3_100, vec![ack]);
    assert_eq!(late_kinds(&r), vec!["delivered late"]);
}
