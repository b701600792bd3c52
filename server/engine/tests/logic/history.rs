//! The attempt history: each ack (and each attempt's last expired deadline) records the
//! attempt in the state row it writes anyway, bounded to the first and the latest attempts.

use rebound_engine::wire;
use rebound_proto::v1 as pb;
use rebound_store::{
    history::{AttemptEnd, MAX_ATTEMPTS_KEPT},
    policy::UNLIMITED_ATTEMPTS,
    Status,
};
use tonic::Request;

use crate::{eventually, expect_delivery, utc_ms, Deliveries, Rig};

const START: &str = "2026-12-06 09:00:00.100";

/// Makes `txid` due now and fires the timer: its next delivery.
async fn deliver_now(rig: &Rig, sub: &mut Deliveries, txid: &str) -> pb::Delivery {
    let due = rig.state("svc", txid).await.due_at_ms;
    rig.clock.set(due.max(rig.now()));
    rig.dispatcher.fire_due();
    expect_delivery(sub).await
}

async fn ack(rig: &Rig, r: pb::AckRequest) {
    rig.executor
        .ack(Request::new(r))
        .await
        .expect("the ack is taken");
}

#[tokio::test]
async fn every_ack_records_its_attempt_and_get_retry_returns_them() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.enqueue("svc", "t1", 500).await;
    let mut sub = rig.subscribe("svc", 10).await;

    // Attempt 2 (the enqueue's 1 was made): RETRY with an error, a class and a retry_after.
    let d = deliver_now(&rig, &mut sub, "t1").await;
    let delivered_at = rig.now();
    rig.clock.advance(250);
    ack(
        &rig,
        pb::AckRequest {
            delivery_id: d.delivery_id.clone(),
            outcome: pb::AckOutcome::Retry as i32,
            error: "gateway: 503".into(),
            error_class: "http.503".into(),
            retry_after: Some(prost_types::Duration {
                seconds: 2,
                nanos: 0,
            }),
            ..Default::default()
        },
    )
    .await;
    // Then a snooze, which uses no attempt.
    let d = deliver_now(&rig, &mut sub, "t1").await;
    assert_eq!(d.attempt, 3);
    ack(
        &rig,
        pb::AckRequest {
            delivery_id: d.delivery_id.clone(),
            outcome: pb::AckOutcome::Retry as i32,
            snooze: true,
            retry_after: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        },
    )
    .await;
    // Then SUCCEEDED: the one-write settle records it too.
    let d = deliver_now(&rig, &mut sub, "t1").await;
    assert_eq!(d.attempt, 3, "the snooze used no attempt");
    rig.clock.advance(40);
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();

    let s = rig.state("svc", "t1").await;
    assert_eq!(s.status, Status::Succeeded);
    let h = &s.history;
    let ends: Vec<_> = h.attempts.iter().map(|a| (a.attempt, a.end)).collect();
    assert_eq!(
        ends,
        vec![
            (2, AttemptEnd::Retry),
            (3, AttemptEnd::Snoozed),
            (3, AttemptEnd::Succeeded)
        ]
    );
    assert_eq!(h.dropped, 0);
    let first = &h.attempts[0];
    assert_eq!(first.delivered_at_ms, delivered_at);
    assert_eq!(first.duration_ms(), 250);
    assert_eq!(first.node_id, "node-a");
    assert_eq!(first.executor_id, "logic-test");
    assert_eq!(first.error, "gateway: 503");
    assert_eq!(first.error_class, "http.503");
    assert_eq!(first.retry_after_ms, Some(2_000));
    assert_eq!(first.deliveries, 1);
    assert_eq!(h.attempts[2].duration_ms(), 40);
    assert_eq!(h.attempts[2].retry_after_ms, None);

    // GetRetry's answer carries them.
    let r = wire::retry_pb(s);
    assert_eq!(r.attempts.len(), 3);
    assert_eq!(r.attempts[0].outcome, pb::AttemptOutcome::Retry as i32);
    assert_eq!(r.attempts[1].outcome, pb::AttemptOutcome::Snoozed as i32);
    assert_eq!(r.attempts[2].outcome, pb::AttemptOutcome::Succeeded as i32);
    assert_eq!(
        r.attempts[0].duration,
        Some(prost_types::Duration {
            seconds: 0,
            nanos: 250_000_000
        })
    );
    assert_eq!(r.attempts[0].executor_id, "logic-test");
}

#[tokio::test]
async fn a_long_history_keeps_the_first_and_the_latest_and_a_dead_retry_keeps_it() {
    let rig = Rig::new(utc_ms(START)).await;
    let mut input = crate::input("svc", "t1", 500);
    input.policy.max_attempts = Some(UNLIMITED_ATTEMPTS);
    rig.writer.enqueue(input).await.unwrap();
    let mut sub = rig.subscribe("svc", 10).await;
    let n = 14u32;
    for i in 0..n {
        let d = deliver_now(&rig, &mut sub, "t1").await;
        ack(
            &rig,
            pb::AckRequest {
                delivery_id: d.delivery_id.clone(),
                outcome: pb::AckOutcome::Retry as i32,
                error: format!("failure {i}"),
                retry_after: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                ..Default::default()
            },
        )
        .await;
    }
    let d = deliver_now(&rig, &mut sub, "t1").await;
    ack(
        &rig,
        pb::AckRequest {
            delivery_id: d.delivery_id.clone(),
            outcome: pb::AckOutcome::Failed as i32,
            error: "card declined".into(),
            ..Default::default()
        },
    )
    .await;
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.status, Status::Dead);
    let h = &s.history;
    assert_eq!(h.attempts.len(), MAX_ATTEMPTS_KEPT);
    assert_eq!(h.dropped, n + 1 - MAX_ATTEMPTS_KEPT as u32);
    assert_eq!(
        h.attempts[0].error, "failure 0",
        "the first attempt is kept"
    );
    assert_eq!(h.attempts[0].attempt, 2);
    let last = h.attempts.last().unwrap();
    assert_eq!(
        (last.end, last.error.as_str()),
        (AttemptEnd::Failed, "card declined")
    );
    assert_eq!(last.attempt, n + 2);
    // The latest ones, in order, with none missing.
    let numbers: Vec<u32> = h.attempts[1..].iter().map(|a| a.attempt).collect();
    let want: Vec<u32> = (n + 2 - (MAX_ATTEMPTS_KEPT as u32 - 2)..=n + 2).collect();
    assert_eq!(numbers, want);
}

#[tokio::test]
async fn an_attempt_whose_deadlines_all_expired_is_recorded_as_such() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.start_reaper();
    rig.enqueue("svc", "t1", 500).await;
    let policy = rig.state("svc", "t1").await.policy;
    let first = rig.state("svc", "t1").await.generation;
    let mut sub = rig.subscribe("svc", 1).await;
    deliver_now(&rig, &mut sub, "t1").await;
    for k in 1..policy.max_deliveries_per_attempt {
        rig.clock.advance(policy.ack_timeout.as_millis() as i64);
        let d = expect_delivery(&mut sub).await;
        assert_eq!(d.attempt, 2, "redelivery {k} is the same attempt");
    }
    rig.clock.advance(policy.ack_timeout.as_millis() as i64);
    eventually("the attempt to be recorded", || async {
        rig.state("svc", "t1").await.generation != first
    })
    .await;
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.history.attempts.len(), 1);
    let a = &s.history.attempts[0];
    assert_eq!(a.end, AttemptEnd::DeadlineExpired);
    assert_eq!(a.deliveries, policy.max_deliveries_per_attempt);
    assert_eq!(a.executor_id, "logic-test");
    assert!(a.error.contains("not acknowledged"), "{}", a.error);
}
