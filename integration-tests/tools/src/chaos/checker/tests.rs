//! The checker's rules on small histories.

use std::collections::{BTreeMap, HashMap, HashSet};

use rebound_proto::v1 as pb;

use super::*;
use crate::chaos::history::{AckOk, Answer, EnqueueOk, Event, FaultKind, Kind, Outcome, Reply};

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
fn act(start_ms: i64, end_ms: i64, action: pb::RetryAction, answer: Answer<bool>) -> Event {
    at(
        start_ms,
        end_ms,
        Kind::Act {
            node: 2,
            service: SVC.into(),
            tx: TX.into(),
            action,
            due_ms: None,
            answer,
        },
    )
}

fn cancelled(start_ms: i64, end_ms: i64) -> Event {
    at(
        start_ms,
        end_ms,
        Kind::Cancel {
            node: 2,
            service: SVC.into(),
            tx: TX.into(),
            answer: Answer::Ok((true, pb::RetryStatus::Cancelled as i32)),
        },
    )
}

const RUN_NOW: pb::RetryAction = pb::RetryAction::RunNow;

/// A run-now writes a new generation with the same attempt: the attempt delivered again after
/// it is no duplicate (the executor's RETRY of the first delivery is refused as stale).
#[test]
fn the_same_attempt_delivered_again_after_a_run_now_is_no_duplicate() {
    let stale = at(
        2_100,
        2_105,
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
            answer: Answer::Refused("FailedPrecondition: stale".into()),
        },
    );
    let mut h = vec![
        enqueue(0, 5, 1_000, 1),
        delivery(1_500, "d1", 1_000),
        act(2_000, 2_010, RUN_NOW, Answer::Ok(true)),
        stale,
        delivery(2_600, "d4", 2_005),
        ack(2_700, 4, Outcome::Succeeded, false),
    ];
    let finals = BTreeMap::from([(
        (SVC.to_string(), TX.to_string()),
        Answer::Ok(pb::Retry {
            status: pb::RetryStatus::Succeeded as i32,
            ..Default::default()
        }),
    )]);
    let letters = HashMap::new();
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
    // One of unknown outcome may have changed it too.
    h[2] = act(2_000, 2_010, RUN_NOW, Answer::Unknown("deadline".into()));
    let r = check_h(&h);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.duplicates, 0);
    // One that skipped the retry changed nothing: the second delivery is a duplicate (explained
    // here: the first one was never acknowledged OK).
    h[2] = act(2_000, 2_010, RUN_NOW, Answer::Ok(false));
    let r = check_h(&h);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.duplicates, r.explained_duplicates), (1, 1));
}

/// No action undoes a SUCCEEDED ack: one that changed the retry after the ack answered OK
/// was accepted as if it were not SUCCEEDED. One that raced the ack may have changed it (its
/// schedule reads SUCCEEDED), and one that skipped it is right.
#[test]
fn an_action_that_changed_a_retry_after_its_succeeded_ack_undid_it() {
    let h = |act_at: (i64, i64), action, answer| {
        vec![
            enqueue(0, 5, 1_000, 1),
            delivery(1_500, "d1", 1_000),
            ack(1_600, 1, Outcome::Succeeded, false),
            act(act_at.0, act_at.1, action, answer),
        ]
    };
    const UNDONE: &str = "SUCCEEDED undone (a later call was accepted)";
    for action in [
        RUN_NOW,
        pb::RetryAction::Reschedule,
        pb::RetryAction::Cancel,
        pb::RetryAction::DeadLetter,
    ] {
        let after = h((3_000, 3_010), action, Answer::Ok(true));
        assert!(
            kinds(&after, pb::RetryStatus::Succeeded).contains(&UNDONE),
            "{action:?}"
        );
        let skipped = h((3_000, 3_010), action, Answer::Ok(false));
        assert_eq!(
            kinds(&skipped, pb::RetryStatus::Succeeded),
            Vec::<&str>::new()
        );
        let raced = h((1_590, 1_700), action, Answer::Ok(true));
        assert_eq!(
            kinds(&raced, pb::RetryStatus::Succeeded),
            Vec::<&str>::new(),
            "{action:?}"
        );
    }
    // A delivery after the ack is not excused by an action between.
    let mut delivered = h((1_590, 1_700), RUN_NOW, Answer::Ok(true));
    delivered.push(delivery(2_500, "d4", 1_700));
    assert_eq!(
        kinds(&delivered, pb::RetryStatus::Succeeded),
        vec!["delivered after SUCCEEDED was acknowledged"]
    );
}

/// A cancel action is a cancel: one that took effect after the delivery's read beats the
/// SUCCEEDED ack, and the enqueue after it starts a fresh retry, delivered (as in
/// `a_fresh_start_after_a_cancel_that_beat_the_ack_may_be_delivered`).
#[test]
fn a_fresh_start_after_a_cancel_action_that_beat_the_ack_may_be_delivered() {
    let fresh = enqueue(1_500, 2_900, 5_000, 2);
    let mut h = race((3_010, 3_012), (1_000, 2_800));
    h[3] = act(1_000, 2_800, pb::RetryAction::Cancel, Answer::Ok(true));
    h.extend([fresh.clone(), delivery_again()]);
    assert_eq!(kinds(&h, pb::RetryStatus::Succeeded), Vec::<&str>::new());
    // A run-now in its place wins nothing over the ack.
    h[3] = act(1_000, 2_800, RUN_NOW, Answer::Ok(true));
    assert!(kinds(&h, pb::RetryStatus::Succeeded)
        .contains(&"delivered after SUCCEEDED was acknowledged"));
}

/// No action undoes a cancel that answered cancelled = true: a delivery after the cancel is a
/// violation even with an action's schedule between (one that raced the cancel reads
/// CANCELLED), and an action that changed the retry after the cancel answered is one.
#[test]
fn an_action_never_excuses_a_delivery_after_a_cancel() {
    let raced = vec![
        enqueue(0, 5, 1_000, 1),
        cancelled(1_000, 1_010),
        act(1_005, 1_020, RUN_NOW, Answer::Ok(true)),
        delivery(2_000, "d3", 1_020),
    ];
    assert_eq!(
        kinds(&raced, pb::RetryStatus::Cancelled),
        vec!["delivered after cancel"]
    );
    // After the cancel answered: the action itself undid it.
    let mut after = raced.clone();
    after[2] = act(1_500, 1_510, RUN_NOW, Answer::Ok(true));
    after[3] = delivery(2_000, "d3", 1_510);
    let k = kinds(&after, pb::RetryStatus::Cancelled);
    assert!(k.contains(&"delivered after cancel"), "{k:?}");
    assert!(
        k.contains(&"cancel undone (a later action changed it)"),
        "{k:?}"
    );
    // One that skipped it is right; so is one after an enqueue that started afresh.
    after[2] = act(1_500, 1_510, RUN_NOW, Answer::Ok(false));
    after.truncate(3);
    assert_eq!(
        kinds(&after, pb::RetryStatus::Cancelled),
        Vec::<&str>::new()
    );
    let fresh = vec![
        enqueue(0, 5, 1_000, 1),
        cancelled(1_000, 1_010),
        enqueue(1_200, 1_210, 9_000, 2),
        act(1_500, 1_510, RUN_NOW, Answer::Ok(true)),
        delivery(2_100, "d4", 1_510),
    ];
    assert_eq!(
        kinds(&fresh, pb::RetryStatus::Succeeded),
        Vec::<&str>::new()
    );
    // A dead letter that raced the cancel reads CANCELLED: an action is no later change
    // that excuses another final status.
    let dead = vec![
        enqueue(0, 5, 1_000, 1),
        cancelled(1_000, 1_010),
        act(1_005, 1_020, pb::RetryAction::DeadLetter, Answer::Ok(true)),
    ];
    assert_eq!(kinds(&dead, pb::RetryStatus::Cancelled), Vec::<&str>::new());
    assert!(kinds(&dead, pb::RetryStatus::Dead).contains(&"cancel undone"));
}

/// A cancel or dead-letter action that changed the retry ends it: its schedule need not be
/// delivered. One that skipped it ended nothing.
#[test]
fn a_cancel_action_ends_the_retry() {
    let mut h = vec![
        enqueue(0, 5, 3_000, 1),
        act(500, 510, pb::RetryAction::Cancel, Answer::Ok(true)),
    ];
    assert_eq!(kinds(&h, pb::RetryStatus::Cancelled), Vec::<&str>::new());
    h[1] = act(
        500,
        510,
        pb::RetryAction::Cancel,
        Answer::Unknown("deadline".into()),
    );
    assert_eq!(kinds(&h, pb::RetryStatus::Cancelled), Vec::<&str>::new());
    h[1] = act(500, 510, pb::RetryAction::Cancel, Answer::Ok(false));
    assert_eq!(
        kinds(&h, pb::RetryStatus::Cancelled),
        vec!["acknowledged schedule never delivered"]
    );
    // A run-now is a schedule, delivered.
    h[1] = act(500, 510, RUN_NOW, Answer::Ok(true));
    assert_eq!(
        kinds(&h, pb::RetryStatus::Succeeded),
        vec!["acknowledged schedule never delivered"]
    );
    h.push(delivery(1_100, "d2", 510));
    assert_eq!(kinds(&h, pb::RetryStatus::Succeeded), Vec::<&str>::new());
}

/// A listing the node refused is a violation; one of unknown outcome (its node down, the
/// storage paused) is not.
#[test]
fn a_refused_listing_is_a_violation() {
    let list = |answer| {
        at(
            100,
            150,
            Kind::List {
                node: 0,
                service: SVC.into(),
                answer,
            },
        )
    };
    let h = vec![
        enqueue(0, 5, 1_000, 1),
        delivery(1_100, "d1", 1_000),
        list(Answer::Ok(3)),
        list(Answer::Unknown("Unavailable: down".into())),
    ];
    assert_eq!(kinds(&h, pb::RetryStatus::Succeeded), Vec::<&str>::new());
    let mut refused = h.clone();
    refused.push(list(Answer::Refused("Internal: bad page token".into())));
    assert_eq!(
        kinds(&refused, pb::RetryStatus::Succeeded),
        vec!["listing refused"]
    );
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
