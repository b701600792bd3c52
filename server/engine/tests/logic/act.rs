//! ActOnRetries: run now, reschedule, cancel and dead-letter the scheduled retries a listing
//! selects, each change in the retry's history, idempotent, paced, and never undoing a cancel
//! or a SUCCEEDED ack made on another node.

use std::sync::Arc;

use rebound_engine::error::Error;
use rebound_proto::v1 as pb;
use rebound_store::{history::AttemptEnd, observed::Observed, ScheduleStore, Status};

use crate::{
    config, expect_delivery, input, next_delivery, stall::StallingStore, utc_ms, Rig, WholeRing,
};

const START: &str = "2026-12-06 09:00:00.100";

fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

fn act(action: pb::RetryAction, selection: pb::ListRetriesRequest) -> pb::ActOnRetriesRequest {
    pb::ActOnRetriesRequest {
        selection: Some(selection),
        action: action as i32,
        max_per_second: 100_000,
        reason: "incident 7".into(),
        ..Default::default()
    }
}

fn of(service: &str) -> pb::ListRetriesRequest {
    pb::ListRetriesRequest {
        service: service.into(),
        ..Default::default()
    }
}

fn customer(c: &str) -> pb::ListRetriesRequest {
    pb::ListRetriesRequest {
        attributes: [("customer".to_string(), c.to_string())].into(),
        ..of("svc")
    }
}

/// Ten retries of `svc` due in an hour, customers 42 (even) and 7 (odd).
async fn ten_in_an_hour(rig: &Rig) {
    for i in 0..10 {
        let mut inp = input("svc", &format!("t{i}"), 3_600_000);
        let c = if i % 2 == 0 { "42" } else { "7" };
        inp.attributes.insert("customer".into(), c.into());
        rig.writer.enqueue(inp).await.unwrap();
    }
}

async fn run(rig: &Rig, r: &pb::ActOnRetriesRequest) -> pb::ActOnRetriesResponse {
    rig.executor
        .handle
        .act_on_retries(r, "ops")
        .await
        .expect("acted")
}

#[tokio::test]
async fn run_now_delivers_the_selection_at_once_without_using_an_attempt() {
    let rig = Rig::new(utc_ms(START)).await;
    ten_in_an_hour(&rig).await;
    let mut sub = rig.subscribe("svc", 20).await;
    let r = run(&rig, &act(pb::RetryAction::RunNow, customer("42"))).await;
    assert_eq!((r.changed, r.skipped), (5, 0));
    assert!(r.next_page_token.is_empty());
    // Due now: the timer delivers them (after the settle time), and only them.
    rig.clock.advance(600);
    rig.dispatcher.fire_due();
    let mut got = Vec::new();
    for _ in 0..5 {
        let d = expect_delivery(&mut sub).await;
        assert_eq!(d.attempt, 2, "no attempt used");
        got.push(d.transaction_id);
    }
    got.sort();
    assert_eq!(got, ["t0", "t2", "t4", "t6", "t8"]);
    assert!(next_delivery(&mut sub, 100).await.is_none());
    // Recorded: who, why, which action; no attempt.
    let s = rig.state("svc", "t0").await;
    let a = s.history.attempts.last().expect("a record");
    assert_eq!(a.end, AttemptEnd::RunNow);
    assert_eq!(
        (a.executor_id.as_str(), a.error.as_str()),
        ("ops", "incident 7")
    );
    assert_eq!((a.attempt, a.deliveries), (1, 0));
    assert_eq!(a.node_id, "node-a");
    // Again: they are due already (in flight), so nothing changes.
    let again = run(&rig, &act(pb::RetryAction::RunNow, customer("42"))).await;
    assert_eq!((again.changed, again.skipped), (0, 5));
    let odd = rig.state("svc", "t1").await;
    assert!(odd.due_at_ms > rig.now() + 3_000_000);
    assert!(odd.history.attempts.is_empty());
}

#[tokio::test]
async fn reschedule_moves_named_retries_and_is_idempotent() {
    let rig = Rig::new(utc_ms(START)).await;
    ten_in_an_hour(&rig).await;
    let to = rig.now() + 7_200_000;
    let mut r = act(pb::RetryAction::Reschedule, of("svc"));
    r.due_time = Some(ts(to));
    r.transaction_ids = vec!["t1".into(), "t2".into(), "t1".into(), "nope".into()];
    let out = run(&rig, &r).await;
    assert_eq!((out.changed, out.skipped), (2, 1), "t1 counted once");
    for t in ["t1", "t2"] {
        let s = rig.state("svc", t).await;
        assert_eq!(s.due_at_ms, to);
        assert_eq!(s.status, Status::Scheduled);
        let a = s.history.attempts.last().unwrap();
        assert_eq!(a.end, AttemptEnd::Rescheduled);
        assert_eq!(a.retry_after_ms, Some(7_200_000));
    }
    let again = run(&rig, &r).await;
    assert_eq!((again.changed, again.skipped), (0, 3));
    // Named retries must still match the filters: customer 7 is t1, not t2.
    let mut r7 = act(pb::RetryAction::Reschedule, customer("7"));
    r7.due_time = Some(ts(to + 60_000));
    r7.transaction_ids = vec!["t1".into(), "t2".into()];
    let out = run(&rig, &r7).await;
    assert_eq!((out.changed, out.skipped), (1, 1));
    assert_eq!(rig.state("svc", "t2").await.due_at_ms, to);
    // The listing shows the moved retry once, at its new time.
    let listed = rig
        .executor
        .handle
        .list_retries(
            &pb::ListRetriesRequest {
                page_size: 100,
                ..of("svc")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(listed.retries.len(), 10);
}

#[tokio::test]
async fn cancel_and_dead_letter_end_the_selection_and_record_it() {
    let rig = Rig::new(utc_ms(START)).await;
    ten_in_an_hour(&rig).await;
    let out = run(&rig, &act(pb::RetryAction::Cancel, customer("42"))).await;
    assert_eq!((out.changed, out.skipped), (5, 0));
    let s = rig.state("svc", "t4").await;
    assert_eq!(s.status, Status::Cancelled);
    assert_eq!(
        s.history.attempts.last().unwrap().end,
        AttemptEnd::Cancelled
    );
    // Nothing of them is left to select.
    let again = run(&rig, &act(pb::RetryAction::Cancel, customer("42"))).await;
    assert_eq!((again.changed, again.skipped), (0, 0));

    let out = run(&rig, &act(pb::RetryAction::DeadLetter, customer("7"))).await;
    assert_eq!((out.changed, out.skipped), (5, 0));
    let s = rig.state("svc", "t3").await;
    assert_eq!(s.status, Status::Dead);
    assert_eq!(s.last_error, "moved to the dead letters by ops: incident 7");
    assert_eq!(
        s.history.attempts.last().unwrap().end,
        AttemptEnd::DeadLettered
    );
    let dead = rig
        .executor
        .handle
        .list_retries(
            &pb::ListRetriesRequest {
                statuses: vec![pb::RetryStatus::Dead as i32],
                ..of("svc")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(dead.retries.len(), 5);
    // A cancelled retry is not brought back by any action.
    let mut back = act(pb::RetryAction::RunNow, of("svc"));
    back.transaction_ids = vec!["t0".into()];
    assert_eq!(run(&rig, &back).await.skipped, 1);
    assert_eq!(rig.state("svc", "t0").await.status, Status::Cancelled);
}

#[tokio::test]
async fn a_big_selection_goes_max_items_at_a_time_with_a_token() {
    let rig = Rig::new(utc_ms(START)).await;
    for i in 0..7 {
        rig.enqueue("svc", &format!("p{i}"), 60_000 + i * 30_000)
            .await;
    }
    let mut r = act(pb::RetryAction::Cancel, of("svc"));
    r.max_items = 3;
    let mut total = 0;
    let mut calls = 0;
    loop {
        let out = run(&rig, &r).await;
        calls += 1;
        total += out.changed;
        if out.next_page_token.is_empty() {
            break;
        }
        r.selection.as_mut().unwrap().page_token = out.next_page_token;
        assert!(calls < 10);
    }
    assert_eq!((total, calls), (7, 3));
}

#[tokio::test]
async fn bad_requests_are_refused_naming_the_field_and_change_nothing() {
    let rig = Rig::new(utc_ms(START)).await;
    ten_in_an_hour(&rig).await;
    let field_of = |e: Error| match e {
        Error::InvalidArgument { field, .. } => field,
        other => panic!("not INVALID_ARGUMENT: {other:?}"),
    };
    let base = act(pb::RetryAction::RunNow, of("svc"));
    let far = rig.now() + 40 * 86_400_000;
    let cases: Vec<(pb::ActOnRetriesRequest, &str)> = vec![
        (
            pb::ActOnRetriesRequest {
                selection: None,
                ..base.clone()
            },
            "selection",
        ),
        (act(pb::RetryAction::RunNow, of("")), "selection.service"),
        (
            act(
                pb::RetryAction::RunNow,
                pb::ListRetriesRequest {
                    statuses: vec![pb::RetryStatus::Dead as i32],
                    ..of("svc")
                },
            ),
            "selection.statuses",
        ),
        (
            act(
                pb::RetryAction::RunNow,
                pb::ListRetriesRequest {
                    page_token: "l1.junk".into(),
                    ..of("svc")
                },
            ),
            "selection.page_token",
        ),
        (
            pb::ActOnRetriesRequest {
                action: 0,
                ..base.clone()
            },
            "action",
        ),
        (
            pb::ActOnRetriesRequest {
                action: 99,
                ..base.clone()
            },
            "action",
        ),
        (act(pb::RetryAction::Reschedule, of("svc")), "due_time"),
        (
            pb::ActOnRetriesRequest {
                due_time: Some(ts(rig.now())),
                ..base.clone()
            },
            "due_time",
        ),
        (
            pb::ActOnRetriesRequest {
                due_time: Some(ts(far)),
                ..act(pb::RetryAction::Reschedule, of("svc"))
            },
            "due_time",
        ),
        (
            pb::ActOnRetriesRequest {
                transaction_ids: vec!["x".into(); 1001],
                ..base.clone()
            },
            "transaction_ids",
        ),
        (
            pb::ActOnRetriesRequest {
                transaction_ids: vec!["ok".into(), String::new()],
                ..base.clone()
            },
            "transaction_ids[1]",
        ),
        (
            pb::ActOnRetriesRequest {
                reason: "x".repeat(513),
                ..base.clone()
            },
            "reason",
        ),
        (
            pb::ActOnRetriesRequest {
                max_items: 100_001,
                ..base.clone()
            },
            "max_items",
        ),
        (
            pb::ActOnRetriesRequest {
                max_per_second: 100_001,
                ..base.clone()
            },
            "max_per_second",
        ),
    ];
    for (r, field) in cases {
        let what = format!("{r:?}");
        let e = rig
            .executor
            .handle
            .act_on_retries(&r, "ops")
            .await
            .unwrap_err();
        assert_eq!(field_of(e), field, "{}", &what[..what.len().min(300)]);
    }
    for i in 0..10 {
        let s = rig.state("svc", &format!("t{i}")).await;
        assert!(s.history.attempts.is_empty(), "t{i} changed");
    }
    // A service that never existed.
    let e = rig
        .executor
        .handle
        .act_on_retries(&act(pb::RetryAction::RunNow, of("nobody")), "ops")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
}

/// A second node on the same store: its own locks, its own clock reads, the same rows; its
/// writer writes through `writer_store`.
async fn second_node(rig: &Rig, writer_store: Arc<dyn ScheduleStore>) -> Rig {
    let mut config = config();
    config.node_id = "node-b".into();
    Rig::build(
        config,
        rig.clock.clone(),
        rig.store.clone(),
        tempfile::tempdir().unwrap(),
        writer_store,
        Arc::new(WholeRing),
    )
    .await
}

#[tokio::test]
async fn actions_on_one_node_never_undo_a_cancel_or_a_succeeded_ack_on_another() {
    let a = Rig::new(utc_ms(START)).await;
    let b = second_node(&a, Arc::new(Observed::new(a.store.clone(), "embedded"))).await;
    let rounds = 40;
    for i in 0..rounds {
        a.enqueue("svc", &format!("r{i:02}"), 500).await;
    }
    let mut sub = a.subscribe("svc", 100).await;
    a.clock.advance(600);
    a.dispatcher.fire_due();
    let mut deliveries = Vec::new();
    for _ in 0..rounds {
        deliveries.push(expect_delivery(&mut sub).await);
    }
    // Each delivery: an action on node B races a SUCCEEDED ack (even) or a cancel (odd) on
    // node A.
    let actions = [
        pb::RetryAction::RunNow,
        pb::RetryAction::Reschedule,
        pb::RetryAction::DeadLetter,
    ];
    let mut succeeded = Vec::new();
    let mut cancelled = Vec::new();
    for (i, d) in deliveries.iter().enumerate() {
        let mut r = act(actions[i % 3], of("svc"));
        r.transaction_ids = vec![d.transaction_id.clone()];
        if actions[i % 3] == pb::RetryAction::Reschedule {
            r.due_time = Some(ts(a.now() + 1_000));
        }
        let on_b = b.executor.handle.act_on_retries(&r, "ops");
        if i % 2 == 0 {
            let (acked, acted) = tokio::join!(a.ack(d, pb::AckOutcome::Succeeded, None), on_b);
            acked.expect("the ack answers");
            acted.expect("the action answers");
            succeeded.push(d.transaction_id.clone());
        } else {
            let (c, acted) = tokio::join!(a.executor.handle.cancel("svc", &d.transaction_id), on_b);
            acted.expect("the action answers");
            if c.expect("the cancel answers").1 {
                cancelled.push(d.transaction_id.clone());
            }
        }
    }
    assert!(cancelled.len() > rounds / 4, "{cancelled:?}");
    // Whatever the actions scheduled falls due: none of these is delivered again.
    for _ in 0..4 {
        a.clock.advance(1_000);
        a.dispatcher.fire_due();
        b.dispatcher.fire_due();
        a.scan().await;
    }
    while let Some(d) = next_delivery(&mut sub, 200).await {
        assert!(
            !succeeded.contains(&d.transaction_id) && !cancelled.contains(&d.transaction_id),
            "{} delivered after its ack or cancel answered",
            d.transaction_id
        );
    }
    for t in &succeeded {
        let s = a.state("svc", t).await.apply_settled();
        assert_eq!(s.status, Status::Succeeded, "{t}");
    }
    for t in &cancelled {
        let s = a.state("svc", t).await.apply_settled();
        assert_eq!(s.status, Status::Cancelled, "{t}");
    }
}

/// The interleaving that matters, forced: node B reads a retry for a reschedule, node A
/// cancels it (or acks its delivery SUCCEEDED), then B's schedule lands. The schedule derives
/// from the generation B read, so the cancel's (the ack's) cell covers it: it reads CANCELLED
/// (SUCCEEDED) and is never delivered. Written as a fresh start, it would undo both.
#[tokio::test]
async fn a_schedule_written_after_a_cancel_or_ack_it_did_not_see_stays_undone() {
    let a = Rig::new(utc_ms(START)).await;
    let stalling = Arc::new(StallingStore::new(a.store.clone(), a.clock.clone()));
    let b = Arc::new(second_node(&a, stalling.clone()).await);
    a.enqueue("svc", "cancel-me", 3_600_000).await;
    a.enqueue("svc", "ack-me", 500).await;
    let mut on_a = a.subscribe("svc", 10).await;
    let mut on_b = b.subscribe("svc", 10).await;
    a.clock.advance(600);
    a.dispatcher.fire_due();
    let delivered = expect_delivery(&mut on_a).await;
    assert_eq!(delivered.transaction_id, "ack-me");

    for txid in ["cancel-me", "ack-me"] {
        let (began, go) = stalling.hold_next_pointer_write();
        let mut r = act(pb::RetryAction::Reschedule, of("svc"));
        r.transaction_ids = vec![txid.into()];
        r.due_time = Some(ts(a.now() + 1_000));
        let node_b = b.clone();
        let acting =
            tokio::spawn(async move { node_b.executor.handle.act_on_retries(&r, "ops").await });
        began.await.expect("B's schedule is on its way");
        if txid == "cancel-me" {
            let (_, cancelled) = a.executor.handle.cancel("svc", txid).await.unwrap();
            assert!(cancelled);
        } else {
            a.ack(&delivered, pb::AckOutcome::Succeeded, None)
                .await
                .unwrap();
        }
        go.send(()).unwrap();
        let out = acting.await.unwrap().expect("the action answers");
        assert_eq!(out.changed, 1, "{txid}: B wrote its schedule");
    }
    assert_eq!(
        a.state("svc", "cancel-me").await.apply_settled().status,
        Status::Cancelled
    );
    assert_eq!(
        a.state("svc", "ack-me").await.apply_settled().status,
        Status::Succeeded
    );
    for _ in 0..3 {
        a.clock.advance(1_000);
        a.dispatcher.fire_due();
        b.dispatcher.fire_due();
        a.scan().await;
        b.scan().await;
    }
    assert!(next_delivery(&mut on_a, 200).await.is_none());
    assert!(next_delivery(&mut on_b, 200).await.is_none());
}
