//! What is particular to the embedded store; the behaviour both stores share is pinned by
//! the conformance suite (`rebound_store::testsuite`, run by tests/conformance.rs).

use std::sync::Arc;

use super::*;
use rebound_store::{
    clock::ManualClock, window::WindowId, DirectoryStore, LeaseStore, Member, StateStore,
};

fn open(dir: &Path, clock: &ManualClock) -> StoreResult<EmbeddedStore> {
    EmbeddedStore::open(dir, "r", "c", Arc::new(clock.clone()))
}

#[tokio::test]
async fn a_second_open_of_one_directory_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let first = open(dir.path(), &clock).unwrap();
    let err = open(dir.path(), &clock).unwrap_err().to_string();
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains("REBOUND_DATA_DIR"), "{err}");
    drop(first);
    open(dir.path(), &clock).unwrap();
}

#[tokio::test]
async fn rows_persist_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let w = WindowId {
        day: 20_000,
        index: 7,
    };
    {
        let s = open(dir.path(), &clock).unwrap();
        s.put_window(w).await.unwrap();
        s.set_low_water(20_000, 3).await.unwrap();
    }
    let s = open(dir.path(), &clock).unwrap();
    assert!(s.window_listed(w).await.unwrap());
    assert_eq!(s.low_water(20_000).await.unwrap(), 3);
}

#[tokio::test]
async fn expired_rows_read_as_gone_at_once_and_the_sweeper_deletes_them() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let s = open(dir.path(), &clock).unwrap();
    let m = Member {
        node_id: "n1".into(),
        address: "a:1".into(),
        boot_epoch: 1,
        heartbeat_at_ms: 999_000,
        written_at_ms: 0,
    };
    s.heartbeat(&m, 10).await.unwrap();
    let listed = s.list_members().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].written_at_ms, 1_000_000,
        "the store's clock writes"
    );
    clock.advance(9_999);
    assert_eq!(s.list_members().await.unwrap().len(), 1);
    assert_eq!(s.sweep().await.unwrap(), 0);
    clock.advance(1);
    assert!(s.list_members().await.unwrap().is_empty());
    // A row rewritten with a later expiry is not swept by its old index entry.
    s.heartbeat(&m, 10).await.unwrap();
    assert_eq!(s.sweep().await.unwrap(), 0);
    assert_eq!(s.list_members().await.unwrap().len(), 1);
    clock.advance(10_000);
    assert_eq!(s.sweep().await.unwrap(), 1);
    assert!(s.get_state("svc", "none").await.unwrap().is_none());
}

#[tokio::test]
async fn a_newer_layout_is_refused() {
    use rebound_store::MigrationStore;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let s = open(dir.path(), &clock).unwrap();
    assert_eq!(s.migrate(0).await.unwrap(), vec![1]);
    assert!(s.migrate(0).await.unwrap().is_empty());
    let key = Key::ns(Table::Meta, "", "").str("layout");
    s.put_row(key, Enc::new().u32(99).into_bytes(), None)
        .await
        .unwrap();
    let err = s.migrate(0).await.unwrap_err().to_string();
    assert!(err.contains("newer than this build"), "{err}");
}

#[tokio::test]
async fn a_mass_expiry_is_swept_in_batches_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let s = open(dir.path(), &clock).unwrap();
    let n = 2 * SWEEP_BATCH + 5;
    let rows: Vec<_> = (0..n)
        .map(|i| (s.key(Table::LowWater).i32(i as i32), Vec::new()))
        .collect();
    for (k, v) in rows {
        s.put_row(k, v, Some(1)).await.unwrap();
    }
    clock.advance(1_000);
    assert_eq!(s.sweep().await.unwrap(), n);
    assert_eq!(s.sweep().await.unwrap(), 0);
}
