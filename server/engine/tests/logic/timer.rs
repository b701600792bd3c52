//! The timer: a retry this node wrote is delivered from memory at its due time; the scan of
//! its window is the recovery path, and never delivers what the timer is delivering.

use std::sync::Arc;

use rebound_engine::ownership::WholeRing;
use rebound_proto::v1 as pb;
use rebound_store::{observed::Observed, ScheduleStore};

use crate::{
    config,
    dispatcher::{readable_at, window_is_empty},
    eventually, expect_delivery, next_delivery, utc_ms, Rig,
};

const START: &str = "2026-11-30 15:00:00.100";

#[tokio::test]
async fn a_retry_is_delivered_from_memory_at_its_due_time_not_before() {
    let rig = Rig::new(utc_ms(START)).await;
    let out = rig.enqueue("svc", "t1", 700).await;
    assert_eq!(out.due_at_ms, rig.now() + 700, "due when asked for");
    let w = rig.location("svc", "t1").await.window;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(out.due_at_ms - 1);
    rig.dispatcher.fire_due();
    assert!(
        next_delivery(&mut sub, 30).await.is_none(),
        "delivered early"
    );
    rig.clock.set(out.due_at_ms);
    rig.dispatcher.fire_due();
    let d = expect_delivery(&mut sub).await;
    assert_eq!(d.transaction_id, "t1");
    assert!(rig.now() < readable_at(&rig, w), "not from a scan");
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    // The scan of its window finds it resolved: nothing more is delivered, the bucket goes.
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    assert!(next_delivery(&mut sub, 30).await.is_none(), "twice");
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
    assert_eq!(rig.dispatcher.timer_counts().0, 1);
}

#[tokio::test]
async fn the_scan_waits_for_what_the_timer_delivers_and_deletes_the_bucket_after_the_acks() {
    let rig = Rig::new(utc_ms(START)).await;
    for t in ["t1", "t2"] {
        rig.enqueue("svc", t, 600).await;
    }
    let w = rig.location("svc", "t1").await.window;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(rig.now() + 600);
    rig.dispatcher.fire_due();
    let first = expect_delivery(&mut sub).await;
    let second = expect_delivery(&mut sub).await;
    rig.ack(&first, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    // The window is read while the second is in flight: it is not delivered again, and its
    // bucket stays until it is acknowledged.
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    assert!(next_delivery(&mut sub, 50).await.is_none(), "twice");
    assert!(!window_is_empty(&rig, w).await, "deleted before the ack");
    rig.ack(&second, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn what_the_scan_is_delivering_the_timer_does_not_deliver_again() {
    let rig = Rig::new(utc_ms(START)).await;
    let out = rig.enqueue("svc", "t1", 0).await;
    let w = rig.location("svc", "t1").await.window;
    let mut sub = rig.subscribe("svc", 10).await;
    // The scan gets there first (the timer did not fire), then the clock steps back (a sync)
    // to before the timer gives up: the timer finds the scan's claim.
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    rig.clock.set(out.due_at_ms + 600);
    rig.dispatcher.fire_due();
    assert!(next_delivery(&mut sub, 50).await.is_none(), "twice");
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn what_the_timer_does_not_hold_the_scan_delivers() {
    // Room for one retry; a horizon of a minute.
    let rig = Rig::with_config(
        utc_ms(START),
        rebound_engine::engine::Settings {
            timer_max_entries: 1,
            timer_horizon_seconds: 60,
            ..config()
        },
    )
    .await;
    let t0 = rig.now();
    for t in ["held", "full"] {
        rig.enqueue("svc", t, 0).await;
    }
    let far = rig.enqueue("svc", "far", 120_000).await;
    let mut sub = rig.subscribe("svc", 10).await;
    // Due now, but not from memory until half a second after it was written: time for a
    // concurrent enqueue on another node to land.
    rig.dispatcher.fire_due();
    assert!(
        next_delivery(&mut sub, 30).await.is_none(),
        "before it settled"
    );
    rig.clock.set(t0 + 500);
    rig.dispatcher.fire_due();
    let d = expect_delivery(&mut sub).await;
    assert_eq!(d.transaction_id, "held");
    assert!(next_delivery(&mut sub, 30).await.is_none());
    let w = rig.location("svc", "full").await.window;
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    let d2 = expect_delivery(&mut sub).await;
    assert_eq!(d2.transaction_id, "full");
    // Beyond the horizon: the scan of its window, too.
    let wf = rig.location("svc", "far").await.window;
    rig.clock.set(far.due_at_ms);
    rig.dispatcher.fire_due();
    assert!(next_delivery(&mut sub, 30).await.is_none());
    rig.clock.set(readable_at(&rig, wf));
    rig.scan().await;
    assert_eq!(expect_delivery(&mut sub).await.transaction_id, "far");
    assert!(far.due_at_ms - t0 == 120_000);
}

#[tokio::test]
async fn a_paused_service_is_left_to_the_scan_after_the_resume() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.enqueue("svc", "t1", 0).await;
    let w = rig.location("svc", "t1").await.window;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.dispatcher
        .services
        .set_paused("svc", true)
        .await
        .unwrap();
    rig.clock.set(rig.now() + 500);
    rig.dispatcher.fire_due();
    assert!(next_delivery(&mut sub, 50).await.is_none(), "paused");
    rig.dispatcher
        .services
        .set_paused("svc", false)
        .await
        .unwrap();
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    assert_eq!(expect_delivery(&mut sub).await.transaction_id, "t1");
}

#[tokio::test]
async fn after_a_restart_the_scan_delivers_what_the_old_process_held_in_memory() {
    let rig = Rig::new(utc_ms(START)).await;
    let out = rig.enqueue("svc", "t1", 700).await;
    let w = rig.location("svc", "t1").await.window;
    // Near-term: written into the current window, so the scan finds it at that window's end
    // plus the margin, a window sooner than the W+1 rule would.
    assert_eq!(w, rig.grid.window_of(rig.now()));
    // The process dies with the retry in its timer (its timer never fires again); a new
    // process starts on the same store, with a new boot epoch.
    rig.clock.set(rig.now() + 1);
    let writer_store: Arc<dyn ScheduleStore> =
        Arc::new(Observed::new(rig.store.clone(), "embedded"));
    let restarted = Rig::build(
        config(),
        rig.clock.clone(),
        rig.store.clone(),
        tempfile::tempdir().expect("a temporary directory"),
        writer_store,
        Arc::new(WholeRing),
    )
    .await;
    let mut sub = restarted.subscribe("svc", 10).await;
    rig.clock.set(out.due_at_ms);
    restarted.dispatcher.fire_due();
    assert!(
        next_delivery(&mut sub, 30).await.is_none(),
        "the new process's timer holds nothing"
    );
    rig.clock.set(readable_at(&restarted, w));
    restarted.scan().await;
    let d = expect_delivery(&mut sub).await;
    assert_eq!(d.transaction_id, "t1");
    restarted
        .ack(&d, pb::AckOutcome::Succeeded, None)
        .await
        .unwrap();
    eventually("the bucket to be deleted", || {
        window_is_empty(&restarted, w)
    })
    .await;
}

#[tokio::test]
async fn a_retry_placed_in_the_next_day_is_delivered_from_memory_after_the_day_was_scanned() {
    // The scan works today's windows up to midnight; a retry written in the last second of the
    // day and due after midnight goes into tomorrow's first window. Nothing of an older day
    // waits, so the timer delivers it at its due time rather than leaving it to tomorrow's scan.
    let rig = Rig::new(utc_ms("2026-11-30 23:59:58.100")).await;
    rig.enqueue("svc", "today", 0).await;
    let today = rig.location("svc", "today").await.window;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(readable_at(&rig, today));
    rig.scan().await;
    let d = expect_delivery(&mut sub).await;
    assert_eq!(d.transaction_id, "today");
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    let out = rig.enqueue("svc", "tomorrow", 900).await;
    let w = rig.location("svc", "tomorrow").await.window;
    assert!(w.day > today.day, "placed in the next day");
    rig.clock.set(out.due_at_ms);
    rig.dispatcher.fire_due();
    let d = expect_delivery(&mut sub).await;
    assert_eq!(d.transaction_id, "tomorrow");
    assert!(rig.now() < readable_at(&rig, w), "from memory");
}

#[tokio::test]
async fn what_the_timer_delivered_leaves_the_directory_after_the_last_executor_left() {
    let rig = Rig::new(utc_ms(START)).await;
    let out = rig.enqueue("svc", "t1", 600).await;
    let w = rig.location("svc", "t1").await.window;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(out.due_at_ms);
    rig.dispatcher.fire_due();
    let d = expect_delivery(&mut sub).await;
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    drop(sub);
    // No executor when its window is read: the bucket goes all the same, rather than staying
    // (and counting as pending) until one subscribes.
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    eventually("the bucket to be deleted", || window_is_empty(&rig, w)).await;
}

#[tokio::test]
async fn a_sweep_without_executors_keeps_the_retries_the_timer_did_not_deliver() {
    let rig = Rig::new(utc_ms(START)).await;
    let ids: Vec<String> = (0..6).map(|i| format!("t{i}")).collect();
    // The even ones due at .700 (delivered from memory), the odd ones at .900 (after the
    // executor left): one window, several buckets of both.
    let mut due = Vec::new();
    for (i, t) in ids.iter().enumerate() {
        due.push(
            rig.enqueue("svc", t, if i % 2 == 0 { 600 } else { 800 })
                .await,
        );
    }
    let w = rig.location("svc", "t0").await.window;
    for t in &ids {
        assert_eq!(rig.location("svc", t).await.window, w);
    }
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock.set(due[0].due_at_ms);
    rig.dispatcher.fire_due();
    for _ in 0..3 {
        let d = expect_delivery(&mut sub).await;
        rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    }
    drop(sub);
    rig.clock.set(due[1].due_at_ms);
    rig.dispatcher.fire_due();
    rig.clock.set(readable_at(&rig, w));
    rig.scan().await;
    rig.scan().await;
    assert!(
        !window_is_empty(&rig, w).await,
        "a live retry's bucket was deleted"
    );
    // An executor comes back: the three not delivered arrive, once each. Scanned until they
    // do: a sweep still at work on the instance holds it until it stops.
    let mut sub = rig.subscribe("svc", 10).await;
    let mut got = Vec::new();
    let started = std::time::Instant::now();
    while got.len() < 3 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "delivered: {got:?}"
        );
        rig.scan().await;
        while let Some(d) = next_delivery(&mut sub, 50).await {
            got.push(d.transaction_id.clone());
            rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
        }
    }
    got.sort();
    assert_eq!(got, ["t1", "t3", "t5"]);
    assert!(next_delivery(&mut sub, 50).await.is_none(), "twice");
    rig.scan().await;
    eventually("the window to be emptied", || window_is_empty(&rig, w)).await;
}
