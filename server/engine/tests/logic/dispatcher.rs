//! The dispatcher: when a bucket is delivered, how acks complete it, late state rows,
//! redelivery after an ack deadline, and RETRY acks.

use std::{collections::BTreeSet, time::Duration};

use rebound_proto::v1 as pb;
use rebound_store::{window::WindowId, DirectoryStore, Pointer, StateStore, Status, TxState};
use tonic::Code;

use crate::{eventually, expect_delivery, next_delivery, utc_ms, Deliveries, Rig};

const START: &str = "2026-11-30 15:00:00.100";

/// The window an enqueue at `rig.now()` with no delay goes to (`Writer::first_window`).
fn next_window(rig: &Rig) -> WindowId {
    rig.writer.first_window(rig.now(), rig.now())
}

/// When `w` becomes readable: its end plus the skew margin.
pub(crate) fn readable_at(rig: &Rig, w: WindowId) -> i64 {
    rig.grid.end_ms(w) + rig.config.skew_margin_ms as i64
}

/// Receives `n` deliveries, each once.
async fn deliveries(sub: &mut Deliveries, n: usize) -> Vec<pb::Delivery> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        let d = expect_delivery(sub).await;
        assert!(
            seen.insert(d.transaction_id.clone()),
            "{} delivered twice",
            d.transaction_id
        );
        out.push(d);
    }
    out
}

pub(crate) async fn window_is_empty(rig: &Rig, w: WindowId) -> bool {
    rig.window_rows(w).await == (0, 0, 0)
}

#[tokio::test]
async fn a_due_bucket_is_delivered_after_its_window_and_the_margin_not_before() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    for i in 0..5 {
        rig.enqueue("svc", &format!("t{i}"), 0).await;
    }
    let mut sub = rig.subscribe("svc", 100).await;
    // The window has ended, but the margin has not passed.
    rig.clock.set(readable_at(&rig, w) - 1);
    rig.scan().await;
    assert!(
        next_delivery(&mut sub, 30).await.is_none(),
        "delivered early"
    );
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let got = deliveries(&mut sub, 5).await;
    for d in &got {
        assert_eq!(d.service, "svc");
        assert_eq!(d.attempt, 2, "the enqueue's attempt 1 was made");
        assert_eq!(d.payload, d.transaction_id.as_bytes());
    }
    // A scan while the deliveries are in flight starts nothing again.
    rig.scan().await;
    assert!(
        next_delivery(&mut sub, 30).await.is_none(),
        "delivered twice"
    );
    // A service nobody subscribed to is not delivered.
    let other = rig.state("svc", "t0").await;
    assert_eq!(other.status, Status::Scheduled);
}

#[tokio::test]
async fn succeeded_acks_complete_the_bucket_and_delete_its_partition() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    for i in 0..4 {
        rig.enqueue("svc", &format!("t{i}"), 0).await;
    }
    let (instances, buckets, pointers) = rig.window_rows(w).await;
    assert!(instances >= 1 && buckets >= 2, "{instances} {buckets}");
    assert_eq!(pointers, 4);
    let mut sub = rig.subscribe("svc", 100).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let got = deliveries(&mut sub, 4).await;
    for d in &got[..3] {
        rig.ack(d, pb::AckOutcome::Succeeded, None).await.unwrap();
    }
    // One ack is missing: its bucket stays whole.
    let last = &got[3];
    let loc = rig.location("svc", &last.transaction_id).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!rig.pointers("svc", &loc).await.is_empty());
    rig.ack(last, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    eventually("the window's buckets and instances to be deleted", || {
        window_is_empty(&rig, w)
    })
    .await;
    assert!(!rig.store.window_has_instances(w).await.unwrap());
    for d in &got {
        let s = rig.state("svc", &d.transaction_id).await;
        assert_eq!(s.status, Status::Succeeded);
        assert_eq!(s.succeeded_generation, Some(s.generation));
        assert_eq!(s.delivery_count, 1);
        assert_eq!(
            (d.attempt, s.attempt),
            (2, 2),
            "the succeeded attempt counts as made"
        );
    }
    // An ack of a finished delivery changes nothing.
    let again = rig
        .ack(&got[0], pb::AckOutcome::Retry, None)
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    // The window row itself is the compactor's to delete.
    assert!(rig.store.window_listed(w).await.unwrap());
}

#[tokio::test]
async fn a_state_row_that_lands_late_keeps_the_bucket_and_is_delivered() {
    let rig = Rig::new(utc_ms(START)).await;
    let start = rig.now();
    let w = next_window(&rig);
    rig.enqueue("svc", "real", 0).await;
    let loc = rig.location("svc", "real").await;
    // Two pointers in the same bucket whose state rows are missing: one written just now (its
    // state write may still land), one written long ago (its enqueue failed).
    for (txid, at) in [("ghost", start), ("old-ghost", start - 600_000)] {
        let p = Pointer {
            transaction_id: txid.into(),
            generation: 42,
            attempt: 1,
            enqueued_at_ms: at,
            due_at_ms: Some(at),
        };
        rig.store.put_pointer("svc", &loc, &p).await.unwrap();
    }
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    assert!(rig.now() - start < rig.orphan_grace_ms(), "ghost is young");
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    assert_eq!(d.transaction_id, "real");
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    // Let the worker finish, then scan again: the young orphan keeps its bucket.
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    rig.scan().await;
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(
        rig.pointers("svc", &loc).await.len(),
        3,
        "a young orphan keeps its bucket"
    );
    assert!(next_delivery(&mut sub, 10).await.is_none());
    // The late state row lands: the pointer is live after all and is delivered.
    let real = rig.state("svc", "real").await;
    let ghost = TxState {
        transaction_id: "ghost".into(),
        status: Status::Scheduled,
        generation: 42,
        base_generation: 42,
        attempt: 1,
        payload: b"ghost".to_vec(),
        succeeded_generation: None,
        cancelled_generation: None,
        delivery_count: 0,
        ..real
    };
    rig.store.put_state(&ghost, None).await.unwrap();
    // The worker of the last scan may still be finishing: scan until one picks it up.
    let started = std::time::Instant::now();
    let late = loop {
        rig.scan().await;
        if let Some(d) = next_delivery(&mut sub, 10).await {
            break d;
        }
        assert!(
            started.elapsed().as_secs() < 2,
            "the late pointer was not delivered"
        );
    };
    let d = late;
    assert_eq!(d.transaction_id, "ghost");
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    // The old orphan is past the grace: skipped, and the bucket goes.
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
    assert!(next_delivery(&mut sub, 10).await.is_none());
}

#[tokio::test]
async fn a_young_orphan_stops_holding_its_bucket_once_the_grace_has_passed() {
    let rig = Rig::new(utc_ms(START)).await;
    let start = rig.now();
    let w = next_window(&rig);
    rig.enqueue("svc", "real", 0).await;
    let loc = rig.location("svc", "real").await;
    let ghost = Pointer {
        transaction_id: "ghost".into(),
        generation: 42,
        attempt: 1,
        enqueued_at_ms: start,
        due_at_ms: None,
    };
    rig.store.put_pointer("svc", &loc, &ghost).await.unwrap();
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(rig.pointers("svc", &loc).await.len(), 2);
    // No state row came within the grace: an enqueue that failed.
    rig.clock.set(start + rig.orphan_grace_ms());
    eventually("the bucket to be deleted", || async {
        rig.scan().await;
        window_is_empty(&rig, w).await
    })
    .await;
    assert!(next_delivery(&mut sub, 10).await.is_none());
}

#[tokio::test]
async fn an_unacked_delivery_is_redelivered_after_its_ack_timeout() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.start_reaper();
    let w = next_window(&rig);
    rig.enqueue("svc", "t1", 0).await;
    let ack_timeout = rig.state("svc", "t1").await.policy.ack_timeout.as_millis() as i64;
    let mut sub = rig.subscribe("svc", 1).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d1 = expect_delivery(&mut sub).await;
    // Just before the deadline: nothing happens.
    rig.clock.advance(ack_timeout - 1);
    assert!(next_delivery(&mut sub, 30).await.is_none());
    rig.clock.advance(1);
    let d2 = expect_delivery(&mut sub).await;
    assert_eq!(d2.transaction_id, "t1");
    assert_ne!(d2.delivery_id, d1.delivery_id);
    assert_eq!(d2.attempt, d1.attempt, "a redelivery is the same attempt");
    // The expired delivery can no longer be acknowledged.
    let stale = rig
        .ack(&d1, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::NotFound);
    rig.ack(&d2, pb::AckOutcome::Succeeded, None).await.unwrap();
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.status, Status::Succeeded);
    assert_eq!(s.delivery_count, 2);
}

#[tokio::test]
async fn deliveries_never_acked_count_as_a_failed_attempt() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.start_reaper();
    let w = next_window(&rig);
    let first = rig.enqueue("svc", "t1", 0).await;
    let policy = rig.state("svc", "t1").await.policy;
    let mut sub = rig.subscribe("svc", 1).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    for _ in 0..policy.max_deliveries_per_attempt {
        expect_delivery(&mut sub).await;
        rig.clock.advance(policy.ack_timeout.as_millis() as i64);
    }
    // The attempt is used up and the retry rescheduled with backoff, in a later window.
    eventually("the retry to be rescheduled", || async {
        rig.state("svc", "t1").await.generation != first.generation
    })
    .await;
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.status, Status::Scheduled);
    assert_eq!(s.attempt, 2);
    assert!(
        s.last_error.contains("not acknowledged after 3 deliveries"),
        "{}",
        s.last_error
    );
    assert!(s.location.unwrap().window > w);
    eventually("the old bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn a_retry_ack_reschedules_into_a_later_window() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    let first = rig.enqueue("svc", "t1", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d1 = expect_delivery(&mut sub).await;
    let acked_at = rig.now();
    let r = rig
        .ack(&d1, pb::AckOutcome::Retry, Some(3_000))
        .await
        .unwrap();
    assert!(!r.dead_lettered && !r.snoozed);
    let next = rig.grid.target(acked_at, acked_at + 3_000);
    let next_due = r.next_due_time.expect("a next due time");
    assert_eq!(
        next_due.seconds * 1000 + i64::from(next_due.nanos) / 1_000_000,
        acked_at + 3_000
    );
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.location.as_ref().unwrap().window, next);
    assert_eq!(s.status, Status::Scheduled);
    assert_eq!(s.attempt, 2);
    assert_eq!(s.last_error, "boom");
    assert!(s.generation > first.generation);
    assert_eq!(s.base_generation, first.generation);
    assert_eq!(s.due_at_ms, acked_at + 3_000);
    // The first bucket is resolved and goes.
    eventually("the first bucket to be deleted", || {
        window_is_empty(&rig, w)
    })
    .await;
    // The new schedule is due after its own window and the margin, not before.
    rig.clock.set(readable_at(&rig, next) - 1);
    rig.scan().await;
    assert!(
        next_delivery(&mut sub, 30).await.is_none(),
        "delivered early"
    );
    rig.clock.set(readable_at(&rig, next));
    rig.scan().await;
    let d2 = expect_delivery(&mut sub).await;
    assert_eq!(d2.transaction_id, "t1");
    assert_eq!(d2.attempt, d1.attempt + 1);
    assert_eq!(d2.last_error, "boom");
    rig.ack(&d2, pb::AckOutcome::Succeeded, None).await.unwrap();
    eventually("the second bucket to be deleted", || {
        window_is_empty(&rig, next)
    })
    .await;
    // `attempt` is the last delivery's number: 2 while the retry waited for delivery 3, then 3
    // once delivery 3 succeeded.
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.status, Status::Succeeded);
    assert_eq!((d1.attempt, d2.attempt, s.attempt), (2, 3, 3));
}

#[tokio::test]
async fn a_failed_ack_dead_letters() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    rig.enqueue("svc", "t1", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    let r = rig.ack(&d, pb::AckOutcome::Failed, None).await.unwrap();
    assert!(r.dead_lettered);
    let s = rig.state("svc", "t1").await;
    assert_eq!(s.status, Status::Dead);
    assert_eq!(s.last_error, "boom");
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn a_closed_stream_hands_its_deliveries_to_another() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    rig.enqueue("svc", "t1", 0).await;
    let mut first = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d1 = expect_delivery(&mut first).await;
    let mut second = rig.subscribe("svc", 10).await;
    // The executor goes away without acking.
    drop(first);
    let d2 = expect_delivery(&mut second).await;
    assert_eq!(d2.transaction_id, d1.transaction_id);
    assert_ne!(d2.delivery_id, d1.delivery_id);
    rig.ack(&d2, pb::AckOutcome::Succeeded, None).await.unwrap();
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn a_paused_service_is_not_delivered_until_resumed() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    rig.enqueue("svc", "t1", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.dispatcher
        .services
        .set_paused("svc", true)
        .await
        .unwrap();
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    assert!(next_delivery(&mut sub, 30).await.is_none(), "paused");
    rig.dispatcher
        .services
        .set_paused("svc", false)
        .await
        .unwrap();
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn a_node_whose_lease_is_about_to_expire_starts_nothing_until_it_renews() {
    use std::sync::Arc;

    use rebound_engine::ring::{LeaseRing, RingOptions};
    use rebound_store::{
        clock::{ManualClock, SharedClock},
        ScheduleStore,
    };

    let clock = ManualClock::new(utc_ms(START));
    let (store, dir) = crate::open_store(&clock).await;
    let config = crate::config();
    let shared: SharedClock = Arc::new(clock.clone());
    let ring = Arc::new(LeaseRing::new(
        store.clone(),
        shared,
        RingOptions {
            node_id: config.node_id.clone(),
            address: "node-a:7000".into(),
            boot_epoch: crate::clock_now(&clock),
            slots: config.slots,
            lease_ttl_ms: config.lease_ttl_ms as i64,
            clock_deadband_ms: (config.skew_margin_ms / 2) as i64,
        },
    ));
    ring.cycle().await.unwrap();
    let writer_store: Arc<dyn ScheduleStore> = store.clone();
    let rig = Rig::build(config, clock, store, dir, writer_store, ring.clone()).await;
    let start = rig.now();
    let w = next_window(&rig);
    rig.enqueue("svc", "t1", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    // Readable, but the leases (taken at `start`, 3 s) have less than the fencing margin
    // (a fifth of the TTL) left: the scan starts nothing.
    let fence = rig.config.lease_ttl_ms as i64 / 5;
    rig.clock
        .set(start + rig.config.lease_ttl_ms as i64 - fence + 1);
    assert!(rig.now() >= readable_at(&rig, w));
    rig.scan().await;
    assert!(next_delivery(&mut sub, 30).await.is_none(), "fenced");
    // Renewed: delivered.
    ring.cycle().await.unwrap();
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn the_scanner_wakes_when_the_next_window_opens_not_a_whole_interval_later() {
    let rig = Rig::new(utc_ms(START)).await;
    let interval = Duration::from_millis(rig.config.scan_interval_ms);
    let w = next_window(&rig);
    let opens = readable_at(&rig, w);
    // Shortly before the window opens: wake at its opening (plus a few ms), not later.
    rig.clock.set(opens - 100);
    let wait = rig.dispatcher.next_scan_in();
    assert!(
        wait >= Duration::from_millis(100) && wait <= Duration::from_millis(110),
        "{wait:?}"
    );
    // Just after it opened: the next one opens a window (1 s) later, or the interval first.
    rig.clock.set(opens + 1);
    assert_eq!(
        rig.dispatcher.next_scan_in(),
        interval.min(Duration::from_millis(999 + 5))
    );
}

/// A SUCCEEDED ack does not read the state row again: it writes SUCCEEDED just above the row
/// its delivery was read from. So a cancel made while the retry was being worked stays
/// CANCELLED, and a new enqueue after that cancel (a fresh start) is neither undone nor
/// taken for SUCCEEDED: it is delivered in its own window. With no cancel the ack finishes
/// the retry, and an enqueue after it is refused.
#[tokio::test]
async fn a_succeeded_ack_loses_to_a_cancel_and_a_fresh_start_made_while_it_ran() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    for t in ["cancelled", "fresh", "plain"] {
        rig.enqueue("svc", t, 0).await;
    }
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let got = deliveries(&mut sub, 3).await;
    let of = |t: &str| got.iter().find(|d| d.transaction_id == t).unwrap().clone();
    // While the executor works: a cancel of two, and a new enqueue of one of them.
    rig.writer.cancel("svc", "cancelled").await.unwrap();
    rig.writer.cancel("svc", "fresh").await.unwrap();
    let fresh = rig.enqueue("svc", "fresh", 0).await;
    assert!(!fresh.deduplicated);
    for t in ["cancelled", "fresh", "plain"] {
        let r = rig.ack(&of(t), pb::AckOutcome::Succeeded, None).await;
        assert!(r.is_ok(), "{t}: {r:?}");
    }
    assert_eq!(
        rig.state("svc", "cancelled").await.status,
        Status::Cancelled
    );
    let s = rig.state("svc", "fresh").await;
    assert_eq!(
        (s.status, s.generation),
        (Status::Scheduled, fresh.generation)
    );
    let s = rig.state("svc", "plain").await;
    assert_eq!((s.status, s.delivery_count), (Status::Succeeded, 1));
    assert!(rig.try_enqueue("svc", "plain", 0).await.is_err());
    // The fresh start is delivered when its window is due.
    let w2 = rig.location("svc", "fresh").await.window;
    rig.clock.set(readable_at(&rig, w2));
    rig.scan().await;
    let again = expect_delivery(&mut sub).await;
    assert_eq!(again.transaction_id, "fresh");
    rig.ack(&again, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    assert_eq!(rig.state("svc", "fresh").await.status, Status::Succeeded);
}

/// The history the soak found: while a delivery runs, the producer enqueues the transaction
/// again twice (each a reschedule to a later window, so two new generations, the second
/// derived from the first); then the executor acknowledges SUCCEEDED. The ack answered OK, so
/// the retry is SUCCEEDED: a later enqueue is refused, and nothing is delivered again.
#[tokio::test]
async fn a_succeeded_ack_covers_every_reenqueue_made_while_it_ran() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    rig.enqueue("svc", "twice", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    let first = rig.enqueue("svc", "twice", 3_000).await;
    let second = rig.enqueue("svc", "twice", 6_000).await;
    assert!(first.deduplicated && second.deduplicated);
    assert!(second.generation > first.generation);
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    assert_eq!(rig.state("svc", "twice").await.status, Status::Succeeded);
    assert!(rig.try_enqueue("svc", "twice", 0).await.is_err());
    // Neither later window delivers it.
    let last = rig.grid.window_of(second.due_at_ms - 1);
    rig.clock.set(readable_at(&rig, last));
    rig.scan().await;
    assert!(
        next_delivery(&mut sub, 300).await.is_none(),
        "delivered again after a SUCCEEDED ack"
    );
}

/// A window with more due instances of one service than it may feed at once
/// (`workers_per_service`, 4): the rest start as soon as a worker has fed its instance, not
/// at the next scan. Windows of a minute and a scan interval of a minute leave the scanner
/// nothing else to wake for, so every delivery within seconds shows the early rescan.
#[tokio::test]
async fn instances_held_back_by_the_worker_limit_start_when_a_worker_has_fed() {
    let config = rebound_engine::engine::Settings {
        window_seconds: 60,
        scan_interval_ms: 60_000,
        lanes: 8,
        bucket_size: 1_000,
        ..crate::config()
    };
    let rig = Rig::with_config(utc_ms(START), config).await;
    let w = next_window(&rig);
    const N: usize = 64;
    for i in 0..N {
        rig.enqueue("svc", &format!("t{i}"), 0).await;
    }
    let instances = rig.window_rows(w).await.0;
    assert!(
        instances > 4,
        "{instances} instances: not enough to hold any back"
    );
    let mut sub = rig.subscribe("svc", N as u32).await;
    rig.clock.set(readable_at(&rig, w));
    tokio::spawn(rig.dispatcher.clone().run_scanner());
    let got = tokio::time::timeout(Duration::from_secs(20), deliveries(&mut sub, N))
        .await
        .expect("every instance delivered long before the next scan (a minute away)");
    assert_eq!(got.len(), N);
}

/// Two deliveries of one lineage at once: the first still running when a re-enqueue made the
/// retry due again and a second executor answered RETRY. The first then acknowledges
/// SUCCEEDED and answers OK: nothing is delivered after it.
#[tokio::test]
async fn a_succeeded_ack_covers_a_retry_answered_by_a_later_delivery_of_its_lineage() {
    let rig = Rig::new(utc_ms(START)).await;
    let w = next_window(&rig);
    rig.enqueue("svc", "both", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let first = expect_delivery(&mut sub).await;
    let again = rig.enqueue("svc", "both", 3_000).await;
    assert!(again.deduplicated);
    let w2 = rig.location("svc", "both").await.window;
    rig.clock.set(readable_at(&rig, w2));
    rig.scan().await;
    let second = expect_delivery(&mut sub).await;
    assert_eq!(second.transaction_id, "both");
    rig.ack(&second, pb::AckOutcome::Retry, Some(5_000))
        .await
        .unwrap();
    rig.ack(&first, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    assert_eq!(rig.state("svc", "both").await.status, Status::Succeeded);
    let w3 = rig.location("svc", "both").await.window;
    rig.clock.set(readable_at(&rig, w3));
    rig.scan().await;
    assert!(
        next_delivery(&mut sub, 300).await.is_none(),
        "delivered again after a SUCCEEDED ack"
    );
}
