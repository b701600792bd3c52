//! Dependency holds (docs/architecture.md, "Dependency holds"): a retry naming a held
//! dependency is postponed to the hold's end without using an attempt or a delivery, in
//! every service; when the hold ends one probe goes first; an executor's RETRY ack can hold
//! the dependency itself.

use std::time::Duration;

use rebound_proto::v1 as pb;
use rebound_store::{window::WindowId, Status};
use tonic::Request;

use crate::{expect_delivery, input, next_delivery, utc_ms, Deliveries, Rig};

const START: &str = "2026-12-03 09:00:00.100";

fn readable_at(rig: &Rig, w: WindowId) -> i64 {
    rig.grid.end_ms(w) + rig.config.skew_margin_ms as i64
}

async fn enqueue_naming(rig: &Rig, service: &str, txid: &str, dependency: &str) {
    let mut i = input(service, txid, 0);
    i.dependency = dependency.to_string();
    rig.writer.enqueue(i).await.expect("enqueue");
}

/// Scans at `at` and collects what arrives on `subs` within a short while.
async fn scan_at(rig: &Rig, at: i64, subs: &mut [&mut Deliveries]) -> Vec<pb::Delivery> {
    rig.clock.set(at);
    rig.scan().await;
    let mut got = Vec::new();
    for sub in subs.iter_mut() {
        while let Some(d) = next_delivery(sub, 60).await {
            got.push(d);
        }
    }
    got
}

#[tokio::test]
async fn a_held_dependency_defers_every_service_without_attempts_then_one_probe_goes_first() {
    let rig = Rig::new(utc_ms(START)).await;
    let holds = rig.dispatcher.holds.clone();
    let w = rig.writer.first_window(rig.now(), rig.now());
    for (service, txid) in [("orders", "o1"), ("orders", "o2"), ("billing", "b1")] {
        enqueue_naming(&rig, service, txid, "payments-gateway").await;
    }
    rig.enqueue("orders", "free", 0).await;
    let hold = holds
        .hold(
            "payments-gateway",
            Duration::from_secs(120),
            "503",
            "admin",
            0,
        )
        .await
        .unwrap();
    let mut orders = rig.subscribe("orders", 10).await;
    let mut billing = rig.subscribe("billing", 10).await;

    // Due now, but held: only the retry naming no dependency is delivered.
    let got = scan_at(&rig, readable_at(&rig, w), &mut [&mut orders, &mut billing]).await;
    assert_eq!(
        got.iter()
            .map(|d| d.transaction_id.as_str())
            .collect::<Vec<_>>(),
        ["free"]
    );
    for (service, txid) in [("orders", "o1"), ("orders", "o2"), ("billing", "b1")] {
        let s = rig.state(service, txid).await;
        assert_eq!(s.status, Status::Scheduled);
        assert_eq!(s.attempt, 1, "{txid}: no attempt used");
        assert_eq!(s.delivery_count, 0, "{txid}: no delivery");
        assert!(s.due_at_ms >= hold.until_ms, "{txid}: postponed to the end");
        assert_eq!(s.dependency, "payments-gateway");
    }

    // The hold has ended: one probe, the others wait for its answer.
    let after = rig.grid.window_of(hold.until_ms + 1_000);
    let at = readable_at(&rig, rig.grid.next(after));
    let probes = scan_at(&rig, at, &mut [&mut orders, &mut billing]).await;
    assert_eq!(probes.len(), 1, "one probe: {probes:?}");
    assert_eq!(probes[0].dependency, "payments-gateway");
    assert_eq!(
        rig.ack(&probes[0], pb::AckOutcome::Succeeded, None)
            .await
            .unwrap()
            .next_due_time,
        None
    );

    // Answered: the rest go (the ramp lets 10 through in its first second).
    let mut rest = Vec::new();
    for _ in 0..10 {
        if rest.len() == 2 {
            break;
        }
        let at = rig.now() + 2_000;
        let at = readable_at(&rig, rig.grid.window_of(at));
        rest.extend(scan_at(&rig, at, &mut [&mut orders, &mut billing]).await);
    }
    assert_eq!(
        rest.len(),
        2,
        "the other two delivered after the probe: {rest:?}"
    );
    for d in &rest {
        assert_eq!(
            d.attempt, 2,
            "{}: the first attempt Rebound makes",
            d.transaction_id
        );
    }
}

#[tokio::test]
async fn an_executor_holds_the_dependency_with_its_retry_ack() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = rig.writer.first_window(rig.now(), rig.now());
    enqueue_naming(&rig, "orders", "o1", "ledger").await;
    enqueue_naming(&rig, "billing", "b1", "ledger").await;
    rig.enqueue("orders", "plain", 0).await;
    let mut orders = rig.subscribe("orders", 1).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let first = expect_delivery(&mut orders).await;

    let hold = |d: &pb::Delivery, outcome: pb::AckOutcome| pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: outcome as i32,
        error: "ledger answered 503".into(),
        hold: Some(pb::DependencyHold {
            duration: Some(prost_types::Duration {
                seconds: 300,
                nanos: 0,
            }),
            reason: "Retry-After: 300".into(),
        }),
        ..Default::default()
    };
    // A hold with another outcome, or on a retry naming no dependency: refused, nothing held.
    let refused = rig
        .executor
        .ack(Request::new(hold(&first, pb::AckOutcome::Failed)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("hold"), "{}", refused.message());
    if first.dependency.is_empty() {
        let refused = rig
            .executor
            .ack(Request::new(hold(&first, pb::AckOutcome::Retry)))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(rig.dispatcher.holds.list().await.unwrap().is_empty());
        rig.ack(&first, pb::AckOutcome::Succeeded, None)
            .await
            .unwrap();
    } else {
        let r = rig
            .executor
            .ack(Request::new(hold(&first, pb::AckOutcome::Retry)))
            .await
            .unwrap()
            .into_inner();
        assert!(r.snoozed, "the held retry uses no attempt");
    }
    // Whichever came first, the ledger is held once a retry naming it was acked with a hold.
    let mut billing = rig.subscribe("billing", 10).await;
    let mut held = !rig.dispatcher.holds.list().await.unwrap().is_empty();
    while !held {
        let d = expect_delivery(&mut orders).await;
        assert!(!d.dependency.is_empty(), "{d:?}");
        let r = rig
            .executor
            .ack(Request::new(hold(&d, pb::AckOutcome::Retry)))
            .await
            .unwrap()
            .into_inner();
        assert!(r.snoozed);
        held = true;
    }
    let holds = rig.dispatcher.holds.list().await.unwrap();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].dependency, "ledger");
    assert_eq!(holds[0].source, "executor");
    assert_eq!(holds[0].reason, "Retry-After: 300");
    // billing's retry naming the ledger is not delivered while it is held.
    rig.clock.advance(10_000);
    rig.scan().await;
    assert!(next_delivery(&mut billing, 100).await.is_none());
    let b1 = rig.state("billing", "b1").await;
    assert_eq!((b1.attempt, b1.delivery_count), (1, 0));
}

#[tokio::test]
async fn a_delivery_whose_deadline_passes_during_a_hold_waits_for_its_end() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.start_reaper();
    let holds = rig.dispatcher.holds.clone();
    let w = rig.writer.first_window(rig.now(), rig.now());
    enqueue_naming(&rig, "orders", "o1", "payments-gateway").await;
    let ack_timeout = rig
        .state("orders", "o1")
        .await
        .policy
        .ack_timeout
        .as_millis() as i64;
    let mut orders = rig.subscribe("orders", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d1 = expect_delivery(&mut orders).await;
    // Another retry's executor holds the dependency while this delivery is out, unanswered.
    let hold = holds
        .hold(
            "payments-gateway",
            Duration::from_secs(300),
            "503",
            "executor",
            0,
        )
        .await
        .unwrap();
    rig.clock.advance(ack_timeout);
    assert!(
        next_delivery(&mut orders, 100).await.is_none(),
        "not redelivered during the hold"
    );
    let s = rig.state("orders", "o1").await;
    assert_eq!(s.status, Status::Scheduled);
    assert!(s.due_at_ms >= hold.until_ms, "postponed to the hold's end");
    assert_eq!(s.attempt, d1.attempt - 1, "no attempt used");
    // After the hold it comes again (as the probe), the same attempt.
    let after = rig.grid.window_of(s.due_at_ms + 1_000);
    let got = scan_at(
        &rig,
        readable_at(&rig, rig.grid.next(after)),
        &mut [&mut orders],
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].attempt, d1.attempt);
}
