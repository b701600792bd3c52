//! Compensation chains (docs/architecture.md, "Compensation chains"): a saga step's retry that
//! ends DEAD runs its compensations one after another in list order, each only after the one
//! before it was acknowledged SUCCEEDED; a step that succeeds runs none; a dead compensation
//! stops the chain, and a redrive of it resumes the chain.

use rebound_engine::{
    dispatch::{AttemptOutcome, Resolution},
    error::Error,
    saga, validate,
};
use rebound_proto::v1::{self as pb, enqueue_retry_request::Schedule};
use rebound_store::Status;

use crate::{next_delivery, utc_ms, Deliveries, Rig};

const START: &str = "2026-12-03 10:00:00.100";

fn compensation(service: &str, txid: &str) -> pb::Compensation {
    pb::Compensation {
        service: service.into(),
        transaction_id: txid.into(),
        payload: txid.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A saga step `orders/<txid>` with 2 attempts, due at once, that compensates with
/// `compensations` in order.
fn step(txid: &str, compensations: Vec<pb::Compensation>) -> pb::EnqueueRetryRequest {
    pb::EnqueueRetryRequest {
        service: "orders".into(),
        transaction_id: txid.into(),
        payload: txid.as_bytes().to_vec(),
        schedule: Some(Schedule::Delay(prost_types::Duration::default())),
        policy: Some(pb::RetryPolicy {
            max_attempts: Some(2),
            ..Default::default()
        }),
        attempt: 1,
        compensations,
        ..Default::default()
    }
}

async fn enqueue(rig: &Rig, r: pb::EnqueueRetryRequest) -> Result<(), Error> {
    let input = validate::enqueue("", r, 1 << 20)?;
    rig.writer.enqueue(input).await.map(|_| ())
}

/// Moves the clock a window on and scans, until something arrives on `sub`.
async fn next(rig: &Rig, sub: &mut Deliveries) -> pb::Delivery {
    for _ in 0..6 {
        rig.clock.set(rig.now() + rig.grid.window_ms());
        rig.scan().await;
        if let Some(d) = next_delivery(sub, 60).await {
            return d;
        }
    }
    panic!("nothing was delivered within 6 windows");
}

/// Nothing arrives on `sub` through 3 more windows.
async fn quiet(rig: &Rig, sub: &mut Deliveries) {
    for _ in 0..3 {
        rig.clock.set(rig.now() + rig.grid.window_ms());
        rig.scan().await;
        if let Some(d) = next_delivery(sub, 60).await {
            panic!("unexpected delivery of {}", d.transaction_id);
        }
    }
}

async fn progress(rig: &Rig, service: &str, txid: &str) -> Vec<(String, i32)> {
    let state = rig.state(service, txid).await;
    rebound_engine::wire::chain_progress(&rig.writer, &state)
        .await
        .expect("progress read")
        .expect("a chain")
        .compensations
        .into_iter()
        .map(|m| (m.transaction_id, m.status))
        .collect()
}

#[tokio::test]
async fn a_dead_step_runs_its_compensations_in_order_each_after_the_last_succeeded() {
    let rig = Rig::new(utc_ms(START)).await;
    let comps = vec![
        compensation("payments", "refund-1"),
        compensation("stock", "release-1"),
        compensation("payments", "void-1"),
    ];
    enqueue(&rig, step("o-1", comps)).await.unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut payments = rig.subscribe("payments", 10).await;
    let mut stock = rig.subscribe("stock", 10).await;

    let head = progress(&rig, "orders", "o-1").await;
    assert!(
        head.iter()
            .all(|(_, s)| *s == pb::RetryStatus::Unspecified as i32),
        "nothing runs before the step dies: {head:?}"
    );
    // The step's last attempt fails: it is DEAD and the first compensation is enqueued.
    let d = next(&rig, &mut orders).await;
    rig.ack(&d, pb::AckOutcome::Retry, None).await.unwrap();
    assert_eq!(rig.state("orders", "o-1").await.status, Status::Dead);
    let first = next(&rig, &mut payments).await;
    assert_eq!(first.transaction_id, "refund-1");
    assert_eq!(first.payload, b"refund-1");
    assert_eq!(first.attempt, 1, "a compensation's first attempt");
    let c1 = rig.state("payments", "refund-1").await;
    let chain = c1.saga.chain.clone().expect("a chain");
    assert_eq!(
        (chain.saga_transaction_id.as_str(), chain.position),
        ("o-1", 1)
    );
    assert_eq!(c1.policy.max_attempts, 0, "unlimited attempts");
    assert_eq!(
        c1.policy.max_retry_duration,
        Some(rebound_engine::policy::COMPENSATION_RETRY_DURATION)
    );
    // Nothing after it runs until it succeeds, however long it fails.
    rig.ack(&first, pb::AckOutcome::Retry, Some(1))
        .await
        .unwrap();
    quiet(&rig, &mut stock).await;
    let again = next(&rig, &mut payments).await;
    assert_eq!(again.transaction_id, "refund-1");
    rig.ack(&again, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    let second = next(&rig, &mut stock).await;
    assert_eq!(second.transaction_id, "release-1");
    rig.ack(&second, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    let third = next(&rig, &mut payments).await;
    assert_eq!(third.transaction_id, "void-1");
    rig.ack(&third, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    quiet(&rig, &mut payments).await;
    let done = progress(&rig, "orders", "o-1").await;
    assert_eq!(
        done,
        [
            ("refund-1".to_string(), pb::RetryStatus::Succeeded as i32),
            ("release-1".to_string(), pb::RetryStatus::Succeeded as i32),
            ("void-1".to_string(), pb::RetryStatus::Succeeded as i32),
        ]
    );
    // The last one sees the same chain, from its own place.
    let last = rig.state("payments", "void-1").await;
    assert_eq!(last.saga.chain.as_ref().map(|c| c.position), Some(3));
    assert!(last.saga.compensations.is_empty());
}

#[tokio::test]
async fn a_step_that_succeeds_or_is_cancelled_runs_no_compensation() {
    let rig = Rig::new(utc_ms(START)).await;
    enqueue(&rig, step("ok", vec![compensation("payments", "undo-ok")]))
        .await
        .unwrap();
    enqueue(
        &rig,
        step("gone", vec![compensation("payments", "undo-gone")]),
    )
    .await
    .unwrap();
    rig.writer.cancel("orders", "gone").await.unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut payments = rig.subscribe("payments", 10).await;
    let d = next(&rig, &mut orders).await;
    assert_eq!(d.transaction_id, "ok");
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    quiet(&rig, &mut payments).await;
    let ok = rig.state("orders", "ok").await;
    assert_eq!(ok.status, Status::Succeeded);
    // Its conditional end counts the succeeded attempt, as the plain SUCCEEDED write does.
    assert_eq!((d.attempt, ok.attempt), (2, 2));
    assert!(rig.writer.get("payments", "undo-ok").await.is_err());
    assert!(rig.writer.get("payments", "undo-gone").await.is_err());
}

#[tokio::test]
async fn a_dead_compensation_stops_the_chain_and_its_redrive_resumes_it() {
    let rig = Rig::new(utc_ms(START)).await;
    let comps = vec![
        compensation("payments", "refund-2"),
        compensation("stock", "release-2"),
    ];
    enqueue(&rig, step("o-2", comps)).await.unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut payments = rig.subscribe("payments", 10).await;
    let mut stock = rig.subscribe("stock", 10).await;
    let d = next(&rig, &mut orders).await;
    rig.ack(&d, pb::AckOutcome::Failed, None).await.unwrap();
    let c1 = next(&rig, &mut payments).await;
    // FAILED kills the compensation: the chain stops there, for a human.
    rig.ack(&c1, pb::AckOutcome::Failed, None).await.unwrap();
    assert_eq!(rig.state("payments", "refund-2").await.status, Status::Dead);
    quiet(&rig, &mut stock).await;
    assert_eq!(
        progress(&rig, "payments", "refund-2").await,
        [
            ("refund-2".to_string(), pb::RetryStatus::Dead as i32),
            ("release-2".to_string(), pb::RetryStatus::Unspecified as i32),
        ]
    );
    // The redrive restarts it from its state row, chain and all.
    let dead = rig.state("payments", "refund-2").await;
    rig.writer.restart(dead, rig.now()).await.unwrap();
    let again = next(&rig, &mut payments).await;
    assert_eq!(again.transaction_id, "refund-2");
    rig.ack(&again, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    let c2 = next(&rig, &mut stock).await;
    assert_eq!(c2.transaction_id, "release-2");
}

#[tokio::test]
async fn a_hand_off_repeated_after_a_crash_enqueues_the_next_once() {
    let rig = Rig::new(utc_ms(START)).await;
    enqueue(
        &rig,
        step(
            "o-3",
            vec![
                compensation("payments", "refund-3"),
                compensation("stock", "release-3"),
            ],
        ),
    )
    .await
    .unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut payments = rig.subscribe("payments", 10).await;
    let d = next(&rig, &mut orders).await;
    rig.ack(&d, pb::AckOutcome::Failed, None).await.unwrap();
    let c1 = next(&rig, &mut payments).await;
    let first = rig.state("payments", "refund-3").await;
    // A node that died after handing on and before recording the step's death hands on
    // again: the enqueue is deduplicated, the compensation keeps its generation.
    let input = saga::next_enqueue(&rig.state("orders", "o-3").await)
        .unwrap()
        .unwrap();
    let again = rig.writer.enqueue(input).await.unwrap();
    assert!(again.deduplicated);
    // And once the compensation succeeded, the same hand-off is refused as ALREADY_EXISTS,
    // which the dispatcher counts as done.
    rig.ack(&c1, pb::AckOutcome::Succeeded, None).await.unwrap();
    let input = saga::next_enqueue(&first).unwrap().unwrap();
    assert_eq!(input.transaction_id, "release-3");
    let input = saga::next_enqueue(&rig.state("orders", "o-3").await)
        .unwrap()
        .unwrap();
    assert!(matches!(
        rig.writer.enqueue(input).await,
        Err(Error::AlreadyExists(_))
    ));
    assert_eq!(
        rig.state("payments", "refund-3").await.status,
        Status::Succeeded
    );
}

#[tokio::test]
async fn a_chain_over_the_limits_is_refused_by_name_before_anything_is_written() {
    let rig = Rig::new(utc_ms(START)).await;
    let many = (0..=rebound_engine::validate::MAX_COMPENSATIONS)
        .map(|i| compensation("payments", &format!("c-{i}")))
        .collect();
    let e = enqueue(&rig, step("big", many)).await.unwrap_err();
    assert!(format!("{e}").contains("compensations"), "{e}");
    let heavy = vec![pb::Compensation {
        payload: vec![0; 2 << 20],
        ..compensation("payments", "heavy")
    }];
    let e = enqueue(&rig, step("heavy", heavy)).await.unwrap_err();
    assert!(format!("{e}").contains("REBOUND_MAX_PAYLOAD_BYTES"), "{e}");
    let twice = vec![
        compensation("payments", "same"),
        compensation("payments", "same"),
    ];
    let e = enqueue(&rig, step("twice", twice)).await.unwrap_err();
    assert!(
        format!("{e}").contains("compensations[1].transaction_id"),
        "{e}"
    );
    let own = vec![compensation("orders", "own")];
    let e = enqueue(&rig, step("own", own)).await.unwrap_err();
    assert!(
        format!("{e}").contains("compensations[0].transaction_id"),
        "{e}"
    );
    let bad_policy = vec![pb::Compensation {
        policy: Some(pb::RetryPolicy {
            multiplier: Some(0.5),
            ..Default::default()
        }),
        ..compensation("payments", "p")
    }];
    let e = enqueue(&rig, step("bad", bad_policy)).await.unwrap_err();
    assert!(
        format!("{e}").contains("compensations[0].policy.multiplier"),
        "{e}"
    );
    for txid in ["big", "heavy", "twice", "own", "bad"] {
        assert!(
            rig.writer.get("orders", txid).await.is_err(),
            "{txid} was written"
        );
    }
}

#[tokio::test]
async fn a_first_compensation_waits_for_its_step_and_is_cancelled_when_the_step_succeeds() {
    let rig = Rig::new(utc_ms(START)).await;
    enqueue(
        &rig,
        step("o-5", vec![compensation("payments", "refund-5")]),
    )
    .await
    .unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut payments = rig.subscribe("payments", 10).await;
    let d = next(&rig, &mut orders).await;
    // The hand-off of a delivery that is about to die landed (or its node died right after
    // it), and the step is not DEAD: its compensation waits, without using an attempt.
    let input = saga::next_enqueue(&rig.state("orders", "o-5").await)
        .unwrap()
        .unwrap();
    rig.writer.enqueue(input).await.unwrap();
    quiet(&rig, &mut payments).await;
    let waiting = rig.state("payments", "refund-5").await;
    assert_eq!((waiting.status, waiting.attempt), (Status::Scheduled, 0));
    // The step's delivery in flight then succeeds: the compensation never goes out. Its
    // postponed schedule falls due up to three windows on (a second, a second of jitter, and
    // W+1), so six windows pass before it is looked at.
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    quiet(&rig, &mut payments).await;
    quiet(&rig, &mut payments).await;
    assert_eq!(rig.state("orders", "o-5").await.status, Status::Succeeded);
    assert_eq!(
        rig.state("payments", "refund-5").await.status,
        Status::Cancelled
    );
}

#[tokio::test]
async fn of_two_answers_at_once_succeeded_and_failed_the_first_ends_the_step() {
    for succeeded_first in [false, true] {
        let rig = Rig::new(utc_ms(START)).await;
        enqueue(
            &rig,
            step("o-6", vec![compensation("payments", "refund-6")]),
        )
        .await
        .unwrap();
        let mut orders = rig.subscribe("orders", 10).await;
        let mut payments = rig.subscribe("payments", 10).await;
        let d = next(&rig, &mut orders).await;
        // Two deliveries of the last attempt, on two nodes, both read the row before either
        // answer landed; one is acknowledged SUCCEEDED, the other FAILED.
        let read = rig.state("orders", "o-6").await;
        let failed = |rig: &Rig| {
            let dispatcher = rig.dispatcher.clone();
            let read = read.clone();
            async move {
                dispatcher
                    .resolve(
                        read,
                        1,
                        AttemptOutcome::Failed {
                            error: "declined".into(),
                        },
                    )
                    .await
            }
        };
        if succeeded_first {
            rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
            // The FAILED answer finds the step ended: refused, and the compensation it
            // enqueued first is cancelled, never delivered.
            assert!(matches!(
                failed(&rig).await,
                Err(Error::FailedPrecondition(_))
            ));
            quiet(&rig, &mut payments).await;
            assert_eq!(rig.state("orders", "o-6").await.status, Status::Succeeded);
            assert_eq!(
                rig.state("payments", "refund-6").await.status,
                Status::Cancelled
            );
        } else {
            assert_eq!(failed(&rig).await.unwrap(), Resolution::Dead);
            // The SUCCEEDED answer finds the step DEAD: refused, and the chain runs.
            let late = rig.ack(&d, pb::AckOutcome::Succeeded, None).await;
            assert_eq!(late.unwrap_err().code(), tonic::Code::FailedPrecondition);
            assert_eq!(rig.state("orders", "o-6").await.status, Status::Dead);
            let c = next(&rig, &mut payments).await;
            assert_eq!(c.transaction_id, "refund-6");
        }
    }
}

#[tokio::test]
async fn a_cancel_or_a_retry_racing_a_failed_answer_never_lands_over_the_other() {
    let failed = AttemptOutcome::Failed {
        error: "declined".into(),
    };
    // The cancel first: the FAILED answer is refused, its compensation never goes out.
    let rig = Rig::new(utc_ms(START)).await;
    enqueue(&rig, step("c-1", vec![compensation("payments", "undo-c1")]))
        .await
        .unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut payments = rig.subscribe("payments", 10).await;
    next(&rig, &mut orders).await;
    let read = rig.state("orders", "c-1").await;
    assert_eq!(
        rig.writer.cancel("orders", "c-1").await.unwrap(),
        (Status::Cancelled, true)
    );
    assert!(matches!(
        rig.dispatcher.resolve(read, 1, failed.clone()).await,
        Err(Error::FailedPrecondition(_))
    ));
    quiet(&rig, &mut payments).await;
    assert_eq!(rig.state("orders", "c-1").await.status, Status::Cancelled);
    assert_eq!(
        rig.state("payments", "undo-c1").await.status,
        Status::Cancelled
    );

    // The FAILED answer first: the cancel finds the step DEAD and cancels nothing.
    enqueue(&rig, step("c-2", vec![compensation("payments", "undo-c2")]))
        .await
        .unwrap();
    next(&rig, &mut orders).await;
    let read = rig.state("orders", "c-2").await;
    rig.dispatcher
        .resolve(read, 1, failed.clone())
        .await
        .unwrap();
    assert_eq!(
        rig.writer.cancel("orders", "c-2").await.unwrap(),
        (Status::Dead, false)
    );
    assert_eq!(next(&rig, &mut payments).await.transaction_id, "undo-c2");

    // A RETRY answer first: the FAILED answer of the same attempt is refused, and the
    // compensation it enqueued waits for the step's end.
    enqueue(&rig, step("c-3", vec![compensation("payments", "undo-c3")]))
        .await
        .unwrap();
    let _in_flight = next(&rig, &mut orders).await;
    let read = rig.state("orders", "c-3").await;
    let again = rig
        .dispatcher
        .resolve(
            read.clone(),
            1,
            AttemptOutcome::Retry {
                after: Some(std::time::Duration::from_secs(3600)),
                error: "busy".into(),
                error_class: String::new(),
                snooze: true,
            },
        )
        .await
        .unwrap();
    assert!(matches!(again, Resolution::Rescheduled { .. }));
    assert!(matches!(
        rig.dispatcher.resolve(read, 1, failed).await,
        Err(Error::FailedPrecondition(_))
    ));
    quiet(&rig, &mut payments).await;
    assert_eq!(rig.state("orders", "c-3").await.status, Status::Scheduled);
    let waiting = rig.state("payments", "undo-c3").await;
    assert_eq!((waiting.status, waiting.attempt), (Status::Scheduled, 0));
}
