//! The compactor: Gate 1 (no Tier-3 row left), Gate 2 (ended plus the margin), the low-water
//! mark, and a directory that ends empty.

use rebound_proto::v1 as pb;
use rebound_store::{window::WindowId, DirectoryStore};

use crate::{eventually, expect_delivery, utc_ms, Rig};

/// The compactor's Gate-2 margin: twice the skew margin (as `node.rs` sets it).
fn margin(rig: &Rig) -> i64 {
    2 * rig.config.skew_margin_ms as i64
}

#[tokio::test]
async fn gate_1_keeps_a_window_that_still_has_instances() {
    let rig = Rig::new(utc_ms("2026-11-30 14:00:00.100")).await;
    let w = rig.writer.first_window(rig.now(), rig.now());
    rig.enqueue("nobody-listens", "x", 0).await;
    // Long past Gate 2, but its instance is still there: nobody has delivered it.
    rig.clock.set(rig.grid.end_ms(w) + 60_000);
    let report = rig.compactor.compact().await.unwrap();
    assert!(report.windows_deleted.is_empty(), "{report:?}");
    assert_eq!(report.blocked_by_instances, vec![w]);
    assert!(rig.store.window_listed(w).await.unwrap());
    // The low-water mark stops at the blocked window, so scans still read it.
    assert_eq!(rig.store.low_water(w.day).await.unwrap(), w.index);
    assert_eq!(rig.window_rows(w).await.2, 1, "the pointer is untouched");
}

#[tokio::test]
async fn gate_2_keeps_a_window_until_its_end_plus_the_margin() {
    let rig = Rig::new(utc_ms("2026-11-30 14:00:00.100")).await;
    // An empty window (no Tier-3 row) of the current day.
    let w = WindowId {
        day: rig.grid.window_of(rig.now()).day,
        index: rig.grid.window_of(rig.now()).index + 10,
    };
    rig.store.put_day(w.year(), w.day).await.unwrap();
    rig.store.put_window(w).await.unwrap();
    for now in [
        rig.now(),
        rig.grid.end_ms(w) - 1,
        rig.grid.end_ms(w),
        rig.grid.end_ms(w) + margin(&rig) - 1,
    ] {
        rig.clock.set(now);
        let report = rig.compactor.compact().await.unwrap();
        assert!(report.windows_deleted.is_empty(), "at {now}: {report:?}");
        assert!(rig.store.window_listed(w).await.unwrap());
        // Never past a window a writer may still write to.
        let open = rig.grid.window_of(now - margin(&rig));
        assert!(rig.store.low_water(w.day).await.unwrap() <= open.index);
    }
    rig.clock.set(rig.grid.end_ms(w) + margin(&rig));
    let report = rig.compactor.compact().await.unwrap();
    assert_eq!(report.windows_deleted, vec![w]);
    assert!(!rig.store.window_listed(w).await.unwrap());
    assert_eq!(rig.store.low_water(w.day).await.unwrap(), w.index + 1);
    // The day has not ended: its row stays.
    assert!(report.days_deleted.is_empty());
    assert!(rig.store.day_listed(w.year(), w.day).await.unwrap());
}

#[tokio::test]
async fn a_drained_day_is_compacted_window_by_window_until_the_directory_is_empty() {
    // Near midnight, so the day itself ends during the test.
    let rig = Rig::new(utc_ms("2026-11-30 23:59:58.100")).await;
    let day = rig.grid.window_of(rig.now()).day;
    rig.enqueue("svc", "a", 0).await; // 23:59:58, the current window (near-term)
    rig.enqueue("svc", "b", 1_000).await; // 23:59:59, the day's last window
    let w1 = rig.location("svc", "a").await.window;
    let w2 = rig.location("svc", "b").await.window;
    assert_eq!((w1.day, w2.day), (day, day));
    assert_eq!(w2.index, w1.index + 1);
    let mut sub = rig.subscribe("svc", 10).await;
    // Both windows readable by the dispatcher (end + skew margin), w2 not yet by Gate 2.
    rig.clock
        .set(rig.grid.end_ms(w2) + rig.config.skew_margin_ms as i64);
    let report = rig.compactor.compact().await.unwrap();
    assert_eq!(report.blocked_by_instances, vec![w1], "{report:?}");
    rig.scan().await;
    for _ in 0..2 {
        let d = expect_delivery(&mut sub).await;
        rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    }
    eventually("both windows drained", || async {
        rig.window_rows(w1).await == (0, 0, 0) && rig.window_rows(w2).await == (0, 0, 0)
    })
    .await;
    let report = rig.compactor.compact().await.unwrap();
    assert_eq!(
        report.windows_deleted,
        vec![w1],
        "Gate 2 keeps w2: {report:?}"
    );
    assert!(report.days_deleted.is_empty());
    assert_eq!(rig.store.low_water(day).await.unwrap(), w2.index);
    assert_eq!(
        rig.store.list_windows_from(day, 0).await.unwrap(),
        vec![w2.index]
    );
    // Gate 2 passes for w2 and for the day itself.
    rig.clock.set(rig.grid.end_ms(w2) + margin(&rig));
    let report = rig.compactor.compact().await.unwrap();
    assert_eq!(report.windows_deleted, vec![w2], "{report:?}");
    assert_eq!(report.days_deleted, vec![day]);
    // Nothing is left: no year, day, window, low water.
    assert!(rig.store.list_years().await.unwrap().is_empty());
    assert!(rig.store.list_days(w1.year()).await.unwrap().is_empty());
    assert!(rig
        .store
        .list_windows_from(day, 0)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(rig.store.low_water(day).await.unwrap(), 0);
    // A pass over an empty directory does nothing.
    assert_eq!(rig.compactor.compact().await.unwrap(), Default::default());
}
