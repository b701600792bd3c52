//! The checker's rules for ActOnRetries and ListRetries in a history.

use rebound_proto::v1 as pb;

use super::*;
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
