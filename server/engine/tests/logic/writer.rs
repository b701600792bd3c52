//! The writer: what one enqueue writes, re-enqueue, cancel, and the late-write paths.

use std::sync::Arc;

use rebound_engine::error::Error;
use rebound_store::{
    clock::ManualClock, token, window::WindowId, DirectoryStore, Location, PointerState,
    ScheduleStore, Status, TokenRange,
};

use crate::{open_store, stall::StallingStore, utc_ms, Rig};

const START: &str = "2026-11-30 15:00:00.100";

#[tokio::test]
async fn an_enqueue_writes_directory_rows_then_pointer_then_state() {
    let rig = Rig::new(utc_ms(START)).await;
    let now = rig.now();
    let out = rig.enqueue("svc", "t1", 0).await;
    // Due when asked for (now); a near-term retry goes into the current window.
    let target = rig.writer.first_window(now, now);
    assert_eq!(out.due_at_ms, now);
    assert_eq!(rig.location("svc", "t1").await.window, target);
    assert!(!out.deduplicated);

    // Tier 1 and 2.
    let year = target.year();
    assert_eq!(rig.store.list_years().await.unwrap(), vec![year]);
    assert_eq!(rig.store.list_days(year).await.unwrap(), vec![target.day]);
    assert!(rig.store.day_listed(year, target.day).await.unwrap());
    assert_eq!(
        rig.store.list_windows_from(target.day, 0).await.unwrap(),
        vec![target.index]
    );
    // Tier 3: the writer instance of the transaction's lane, at its token.
    let lane = token::lane_of("t1", rig.config.lanes);
    let instance = rig.writer.instance_name(lane);
    let rows = rig
        .store
        .list_instances(target, TokenRange::FULL)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].service.as_str(), rows[0].instance.as_str()),
        ("svc", instance.as_str())
    );
    assert_eq!(
        rows[0].instance_token,
        token::instance_token("svc", &instance)
    );
    assert!(rig.store.window_has_instances(target).await.unwrap());
    // Tier 4 and 5.
    assert_eq!(
        rig.store
            .list_buckets(target, "svc", &instance)
            .await
            .unwrap(),
        vec![0]
    );
    let loc = Location {
        window: target,
        instance,
        bucket: 0,
    };
    let pointers = rig.pointers("svc", &loc).await;
    assert_eq!(pointers.len(), 1);
    assert_eq!(pointers[0].transaction_id, "t1");
    assert_eq!(pointers[0].generation, out.generation);
    assert_eq!(pointers[0].enqueued_at_ms, now);
    // The state row names the pointer.
    let state = rig.state("svc", "t1").await;
    assert_eq!(state.status, Status::Scheduled);
    assert_eq!(state.generation, out.generation);
    assert_eq!(state.location.as_ref(), Some(&loc));
    assert_eq!(state.due_at_ms, out.due_at_ms);
    assert_eq!(state.payload, b"t1");
    assert_eq!(state.enqueue_count, 1);
    assert!(state.is_live(pointers[0].generation));
}

#[tokio::test]
async fn buckets_fill_up_to_the_bucket_size_per_lane() {
    let rig = Rig::new(utc_ms(START)).await;
    // Ids of one lane, so they share an instance: bucket_size (3) per bucket.
    let ids: Vec<String> = (0..100)
        .map(|i| format!("t{i}"))
        .filter(|id| token::lane_of(id, rig.config.lanes) == 0)
        .take(7)
        .collect();
    for id in &ids {
        rig.enqueue("svc", id, 0).await;
    }
    let target = rig.writer.first_window(rig.now(), rig.now());
    let by_bucket = rig.window_pointers("svc", target).await;
    let sizes: Vec<usize> = by_bucket.values().map(Vec::len).collect();
    assert_eq!(sizes, vec![3, 3, 1], "{by_bucket:?}");
}

#[tokio::test]
async fn a_re_enqueue_confirms_the_same_window_and_reschedules_another() {
    let rig = Rig::new(utc_ms(START)).await;
    let first = rig.enqueue("svc", "t1", 0).await;
    let loc1 = rig.location("svc", "t1").await;
    // Same window: confirmed, same generation, no second pointer.
    let again = rig.enqueue("svc", "t1", 0).await;
    assert!(again.deduplicated);
    assert_eq!(again.generation, first.generation);
    assert_eq!(rig.pointers("svc", &loc1).await.len(), 1);
    assert_eq!(rig.state("svc", "t1").await.enqueue_count, 2);

    // Another window: a new generation there; the old pointer stays, stale.
    let later = rig.enqueue("svc", "t1", 5_000).await;
    assert!(later.deduplicated);
    assert!(later.generation > first.generation);
    assert!(later.due_at_ms > first.due_at_ms);
    let state = rig.state("svc", "t1").await;
    let loc2 = state.location.clone().unwrap();
    assert_ne!(loc2.window, loc1.window);
    assert_eq!(state.generation, later.generation);
    assert_eq!(state.base_generation, first.generation);
    assert_eq!(state.enqueue_count, 3);
    let now = rig.now();
    let grace = rig.orphan_grace_ms();
    let mut live = 0;
    for loc in [&loc1, &loc2] {
        for p in rig.pointers("svc", loc).await {
            match PointerState::of(&p, Some(state.clone()), now, grace) {
                PointerState::Live(_) => live += 1,
                PointerState::Stale => {}
                other => panic!("pointer {p:?} is {other:?}"),
            }
        }
    }
    assert_eq!(live, 1, "one live pointer generation");
}

#[tokio::test]
async fn cancel_settles_once_and_a_later_enqueue_starts_afresh() {
    let rig = Rig::new(utc_ms(START)).await;
    let first = rig.enqueue("svc", "t1", 0).await;
    let loc = rig.location("svc", "t1").await;
    assert_eq!(
        rig.writer.cancel("svc", "t1").await.unwrap(),
        (Status::Cancelled, true)
    );
    let state = rig.state("svc", "t1").await;
    assert_eq!(state.status, Status::Cancelled);
    assert_eq!(state.cancelled_generation, Some(first.generation));
    // The pointer is stale now: never delivered.
    let p = rig.pointers("svc", &loc).await.pop().unwrap();
    assert!(matches!(
        PointerState::of(&p, Some(state), rig.now(), rig.orphan_grace_ms()),
        PointerState::Stale
    ));
    // A second cancel changes nothing.
    assert_eq!(
        rig.writer.cancel("svc", "t1").await.unwrap(),
        (Status::Cancelled, false)
    );
    // Unknown: NOT_FOUND.
    assert!(matches!(
        rig.writer.cancel("svc", "nope").await,
        Err(Error::NotFound(_))
    ));
    // An enqueue after the cancel is a new retry, above the cancelled generation.
    let fresh = rig.enqueue("svc", "t1", 0).await;
    assert!(!fresh.deduplicated);
    assert!(fresh.generation > first.generation);
    let state = rig.state("svc", "t1").await;
    assert_eq!(state.status, Status::Scheduled);
    assert_eq!(state.base_generation, fresh.generation);
}

#[tokio::test]
async fn a_succeeded_retry_refuses_a_new_enqueue() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.enqueue("svc", "t1", 0).await;
    let state = rig.state("svc", "t1").await;
    rig.writer.finish(state, Status::Succeeded).await.unwrap();
    assert!(matches!(
        rig.try_enqueue("svc", "t1", 0).await,
        Err(Error::AlreadyExists(_))
    ));
}

#[tokio::test]
async fn a_target_below_the_low_water_mark_moves_up_to_it() {
    let rig = Rig::new(utc_ms(START)).await;
    let target = rig.writer.first_window(rig.now(), rig.now());
    // The compactor (with a faster clock) has passed three windows beyond the target.
    rig.store
        .set_low_water(target.day, target.index + 3)
        .await
        .unwrap();
    let out = rig.enqueue("svc", "t1", 0).await;
    let moved = WindowId {
        day: target.day,
        index: target.index + 3,
    };
    // Its due time is still the one asked for; only its window moved.
    assert_eq!(out.due_at_ms, rig.now());
    assert_eq!(rig.location("svc", "t1").await.window, moved);
    assert_eq!(
        rig.store.list_windows_from(target.day, 0).await.unwrap(),
        vec![moved.index]
    );
    assert!(rig.window_pointers("svc", target).await.is_empty());
}

/// A rig whose writer writes through a `StallingStore`.
async fn stalling_rig() -> (Rig, Arc<StallingStore>) {
    let clock = ManualClock::new(utc_ms(START));
    let (store, dir) = open_store(&clock).await;
    let stalling = Arc::new(StallingStore::new(store.clone(), clock.clone()));
    let writer_store: Arc<dyn ScheduleStore> = stalling.clone();
    let rig = Rig::build(
        crate::config(),
        clock,
        store,
        dir,
        writer_store,
        Arc::new(rebound_engine::ownership::WholeRing),
    )
    .await;
    (rig, stalling)
}

#[tokio::test]
async fn a_pointer_that_lands_after_its_window_ended_is_placed_again() {
    let (rig, stalling) = stalling_rig().await;
    let now = rig.now();
    let first = rig.writer.first_window(now, now);
    // The pointer write takes two windows: it lands after `first` has ended.
    stalling.stall_next_pointer_write(2 * rig.grid.window_ms());
    let out = rig.enqueue("svc", "t1", 0).await;
    let after = rig.now();
    assert!(after >= rig.grid.end_ms(first));
    // Placed again by the W+1 rule.
    let second = rig.grid.target(after, now);
    assert_eq!(
        out.due_at_ms, now,
        "due when asked for, wherever it is placed"
    );
    // The late pointer is gone (its bucket may have been read); the new one is live.
    let late = rig.window_pointers("svc", first).await;
    assert!(
        late.values().all(Vec::is_empty),
        "late pointer kept: {late:?}"
    );
    let state = rig.state("svc", "t1").await;
    assert_eq!(state.location.as_ref().unwrap().window, second);
    assert_eq!(state.generation, out.generation);
    let placed = rig.window_pointers("svc", second).await;
    let pointers: Vec<_> = placed.values().flatten().collect();
    assert_eq!(pointers.len(), 1);
    assert!(state.is_live(pointers[0].generation));
}

#[tokio::test]
async fn a_state_row_slower_than_the_orphan_grace_answers_deadline_exceeded() {
    let (rig, stalling) = stalling_rig().await;
    stalling.stall_next_state_write(rig.orphan_grace_ms());
    // Due at a fixed time, so that the repeat below targets the same window.
    let due = |txid: &str| rebound_engine::validate::EnqueueInput {
        schedule: rebound_engine::validate::Schedule::DueAt(utc_ms("2026-11-30 15:01:00.000")),
        ..crate::input("svc", txid, 0)
    };
    let r = rig.writer.enqueue(due("t1")).await;
    assert!(matches!(r, Err(Error::DeadlineExceeded(_))), "{r:?}");
    // The outcome was unknown to the caller; the retry is in fact scheduled, and repeating
    // the enqueue settles it.
    let state = rig.state("svc", "t1").await;
    assert_eq!(state.status, Status::Scheduled);
    let again = rig.writer.enqueue(due("t1")).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.generation, state.generation);
}

#[tokio::test]
async fn concurrent_single_enqueues_share_group_commits_and_one_transaction_stays_one_retry() {
    let rig = Rig::new(utc_ms(START)).await;
    // 64 transactions at once, and one transaction 8 times at once.
    let ids: Vec<String> = (0..64).map(|i| format!("g-{i}")).collect();
    let distinct = ids.iter().map(|id| rig.try_enqueue("svc", id, 0));
    let same = (0..8).map(|_| rig.try_enqueue("svc", "twice", 0));
    let (distinct, same) = tokio::join!(
        futures::future::join_all(distinct),
        futures::future::join_all(same)
    );
    for (i, r) in distinct.iter().enumerate() {
        let r = r.as_ref().unwrap_or_else(|e| panic!("g-{i}: {e}"));
        assert!(!r.deduplicated, "g-{i} is new");
        let state = rig.state("svc", &format!("g-{i}")).await;
        assert_eq!(state.generation, r.generation);
        let loc = state.location.expect("scheduled");
        assert!(rig
            .pointers("svc", &loc)
            .await
            .iter()
            .any(|p| p.transaction_id == format!("g-{i}") && p.generation == r.generation));
    }
    // The same transaction: one new, the rest deduplicated onto it (same window: confirmed).
    let same: Vec<_> = same
        .into_iter()
        .map(|r| r.expect("an enqueue of `twice`"))
        .collect();
    assert_eq!(same.iter().filter(|r| !r.deduplicated).count(), 1);
    let state = rig.state("svc", "twice").await;
    assert!(same.iter().all(|r| r.generation == state.generation));
    assert_eq!(state.enqueue_count, 8);
    let (flushes, items) = rig.writer.group_commits();
    assert_eq!(items, 72);
    assert!(flushes < items, "{flushes} flushes for {items} enqueues");
}

/// The store layer (`store::observed`) measures the embedded store as it does Cassandra: an
/// enqueue's contract calls show in the store-call metrics, by store and method.
#[tokio::test]
async fn the_embedded_stores_calls_are_measured_by_store_and_method() {
    fn count(text: &str, method: &str) -> u64 {
        let key = format!(
            "rebound_store_call_duration_seconds_count{{store=\"embedded\",method=\"{method}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .map_or(0, |v| v.trim().parse().expect("a count"))
    }
    let rig = Rig::new(utc_ms(START)).await;
    rebound_store::metric_definitions::metrics();
    let before = rebound_common::metrics::encode();
    rig.enqueue("svc", "measured", 0).await;
    let after = rebound_common::metrics::encode();
    // The metrics are per process: other tests add to them too, so only growth is checked.
    for method in ["get_states", "put_pointer_groups", "put_states"] {
        assert!(
            count(&after, method) > count(&before, method),
            "{method} not counted:\n{}",
            after
                .lines()
                .filter(|l| l.contains("store_call"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A SUCCEEDED ack whose write fails (its outcome unknown) writes from the delivered state in
/// place: the delivery must go back in flight exactly as it was, so that the ack, made again,
/// settles the retry once, counting its one delivery once.
#[tokio::test]
async fn a_succeeded_ack_whose_write_fails_leaves_its_delivery_as_it_was() {
    let (rig, stalling) = stalling_rig().await;
    let window = rig.writer.first_window(rig.now(), rig.now());
    rig.enqueue("svc", "t1", 0).await;
    let mut sub = rig.subscribe("svc", 10).await;
    rig.clock
        .set(rig.grid.end_ms(window) + rig.config.skew_margin_ms as i64);
    rig.scan().await;
    let d = crate::expect_delivery(&mut sub).await;
    stalling.fail_next_settle();
    let refused = rig
        .ack(&d, rebound_proto::v1::AckOutcome::Succeeded, None)
        .await
        .expect_err("the settle failed");
    assert_eq!(refused.code(), tonic::Code::DeadlineExceeded, "{refused:?}");
    let s = rig.state("svc", "t1").await;
    assert_eq!((s.status, s.delivery_count), (Status::Scheduled, 0));
    // Still in flight, as delivered: acknowledged again, it settles.
    rig.ack(&d, rebound_proto::v1::AckOutcome::Succeeded, None)
        .await
        .expect("the second ack settles");
    let s = rig.state("svc", "t1").await;
    assert_eq!((s.status, s.delivery_count), (Status::Succeeded, 1));
}
