//! The lease ring on one shared store: one node takes every slot, a second takes its share
//! after the first hands back its surplus, expired leases change hands, and an old epoch is
//! fenced off.

use std::{collections::BTreeSet, sync::Arc};

use rebound_engine::{
    ownership::Ownership,
    ring::{merge, slot_range, LeaseRing, RingOptions, COMPACTOR_SLOT},
};
use rebound_store::{
    clock::{ManualClock, SharedClock},
    Cas, LeaseChange, LeaseStore, TokenRange,
};
use rebound_store_embedded::EmbeddedStore;

use crate::{clock_now, open_store, utc_ms};

const SLOTS: u32 = 8;
const TTL_MS: i64 = 3_000;

fn ring(store: &Arc<EmbeddedStore>, clock: &ManualClock, node: &str) -> LeaseRing {
    let shared: SharedClock = Arc::new(clock.clone());
    LeaseRing::new(
        store.clone(),
        shared,
        RingOptions {
            node_id: node.into(),
            address: format!("{node}:7000"),
            boot_epoch: clock_now(clock),
            slots: SLOTS,
            lease_ttl_ms: TTL_MS,
            clock_deadband_ms: 100,
        },
    )
}

/// The slots `r` holds now, by their token ranges.
fn slots(r: &LeaseRing) -> BTreeSet<u32> {
    let held: Vec<TokenRange> = r.held().iter().map(|l| l.range).collect();
    (0..SLOTS)
        .filter(|s| held.contains(&slot_range(*s, SLOTS)))
        .collect()
}

#[tokio::test]
async fn one_node_takes_every_slot_and_the_compactor_lease() {
    let clock = ManualClock::new(utc_ms("2026-11-30 15:00:00.000"));
    let (store, _dir) = open_store(&clock).await;
    let a = ring(&store, &clock, "node-a");
    a.cycle().await.unwrap();
    let now = clock_now(&clock);
    assert_eq!(slots(&a).len(), SLOTS as usize);
    let ranges = merge(a.held().into_iter().map(|l| l.range));
    assert_eq!(ranges, vec![TokenRange::FULL]);
    assert!(a.is_compactor(now + TTL_MS / 5));
    assert!(a.still_holds(slot_range(3, SLOTS), now + TTL_MS / 5));
    assert!(a.unowned(now).is_empty());
    let lease = store.read_lease(0).await.unwrap().unwrap();
    assert_eq!((lease.owner.as_str(), lease.epoch), ("node-a", 1));
    assert_eq!(lease.expires_at_ms, now + TTL_MS);
    // Renewal keeps the epoch and pushes the expiry.
    clock.advance(TTL_MS / 3);
    a.cycle().await.unwrap();
    let renewed = store.read_lease(0).await.unwrap().unwrap();
    assert_eq!(renewed.epoch, 1);
    assert_eq!(renewed.expires_at_ms, clock_now(&clock) + TTL_MS);
    let (members, compactor, held) = a.view().await.unwrap().pop().unwrap();
    assert_eq!(members.node_id, "node-a");
    assert!(compactor);
    assert_eq!(held, vec![TokenRange::FULL]);
}

#[tokio::test]
async fn a_second_node_takes_its_share_after_a_rebalance() {
    let clock = ManualClock::new(utc_ms("2026-11-30 15:00:00.000"));
    let (store, _dir) = open_store(&clock).await;
    let a = ring(&store, &clock, "node-a");
    let b = ring(&store, &clock, "node-b");
    a.cycle().await.unwrap();
    // B joins: every slot is validly held, so it takes none yet.
    b.cycle().await.unwrap();
    assert!(slots(&b).is_empty());
    // A sees two live members and hands back its surplus; B takes it.
    clock.advance(TTL_MS / 3);
    a.cycle().await.unwrap();
    assert_eq!(slots(&a).len(), (SLOTS / 2) as usize);
    b.cycle().await.unwrap();
    let (sa, sb) = (slots(&a), slots(&b));
    assert_eq!(sb.len(), (SLOTS / 2) as usize);
    assert!(sa.is_disjoint(&sb), "{sa:?} {sb:?}");
    assert_eq!(sa.union(&sb).count(), SLOTS as usize);
    // A handed-back lease records its release and the next holder's epoch is higher.
    let s = *sb.iter().next().unwrap() as i32;
    let row = store.read_lease(s).await.unwrap().unwrap();
    assert_eq!(
        (row.owner.as_str(), row.epoch, row.released_epoch),
        ("node-b", 2, 1)
    );
    // One compactor.
    let now = clock_now(&clock);
    assert!(a.is_compactor(now) != b.is_compactor(now));
    // Stable: another round on both changes nothing.
    clock.advance(TTL_MS / 3);
    a.cycle().await.unwrap();
    b.cycle().await.unwrap();
    assert_eq!((slots(&a), slots(&b)), (sa, sb));
}

#[tokio::test]
async fn expired_leases_change_hands_and_an_old_epoch_is_fenced_off() {
    let clock = ManualClock::new(utc_ms("2026-11-30 15:00:00.000"));
    let (store, _dir) = open_store(&clock).await;
    let a = ring(&store, &clock, "node-a");
    let b = ring(&store, &clock, "node-b");
    a.cycle().await.unwrap();
    b.cycle().await.unwrap();
    clock.advance(TTL_MS / 3);
    a.cycle().await.unwrap();
    b.cycle().await.unwrap();
    let a_slots = slots(&a);
    assert_eq!(a_slots.len(), (SLOTS / 2) as usize);
    let slot = *a_slots.iter().next().unwrap() as i32;
    let old = store.read_lease(slot).await.unwrap().unwrap();
    assert_eq!(old.owner, "node-a");

    // A stops renewing (a paused process). Until its leases expire, B takes nothing of them.
    clock.advance(TTL_MS - 1);
    b.cycle().await.unwrap();
    assert_eq!(slots(&b).len(), (SLOTS / 2) as usize);
    // Past A's expiry, A itself no longer counts them as held (its own fencing)...
    clock.advance(1 + TTL_MS / 3);
    let now = clock_now(&clock);
    assert!(slots(&a).is_empty());
    assert!(!a.still_holds(slot_range(slot as u32, SLOTS), now));
    // ... and B, finding A's heartbeat stale, takes every slot and the compactor lease.
    b.cycle().await.unwrap();
    assert_eq!(slots(&b).len(), SLOTS as usize);
    assert!(b.is_compactor(now));
    assert!(!a.is_compactor(now));
    let taken = store.read_lease(slot).await.unwrap().unwrap();
    assert_eq!(
        (taken.owner.as_str(), taken.epoch),
        ("node-b", old.epoch + 1)
    );

    // Fencing: a write under A's old epoch is rejected and changes nothing.
    let stale = rebound_store::LeaseRow {
        expires_at_ms: now + TTL_MS,
        ..old.clone()
    };
    match store
        .replace_lease(&stale, old.epoch, LeaseChange::Renew)
        .await
        .unwrap()
    {
        Cas::Rejected(Some(row)) => assert_eq!(row.epoch, old.epoch + 1),
        other => panic!("an old epoch's renewal was {other:?}"),
    }
    assert_eq!(store.read_lease(slot).await.unwrap().unwrap(), taken);
    let compactor = store.read_lease(COMPACTOR_SLOT).await.unwrap().unwrap();
    assert_eq!(compactor.owner, "node-b");

    // A wakes up: its renewals are rejected, it holds nothing, and takes its share back only
    // once B hands it over.
    a.cycle().await.unwrap();
    assert!(slots(&a).is_empty());
    clock.advance(TTL_MS / 3);
    b.cycle().await.unwrap();
    a.cycle().await.unwrap();
    let (sa, sb) = (slots(&a), slots(&b));
    assert_eq!(
        (sa.len(), sb.len()),
        ((SLOTS / 2) as usize, (SLOTS / 2) as usize)
    );
    assert!(sa.is_disjoint(&sb));
}
