//! The lease ring (compare-and-set by epoch), its members' heartbeats, the store's clock.

use std::time::Duration;

use super::fixture::Fixture;
use crate::{Cas, LeaseChange, LeaseRow, Member};

pub async fn server_time_follows_the_store_clock(f: &dyn Fixture) {
    let s = f.store();
    let before = f.now_ms();
    let t = s.server_time_ms().await.unwrap();
    let after = f.now_ms();
    assert!(
        before - 2_000 <= t && t <= after + 2_000,
        "{before} <= {t} <= {after}"
    );
}

fn member(node: &str, address: &str, heartbeat_at_ms: i64) -> Member {
    Member {
        node_id: node.to_string(),
        address: address.to_string(),
        boot_epoch: 1_700_000_000_000,
        heartbeat_at_ms,
        written_at_ms: 0,
    }
}

/// The members as written: `written_at_ms` is the store's, checked apart.
fn as_written(ms: &[Member]) -> Vec<Member> {
    ms.iter()
        .map(|m| Member {
            written_at_ms: 0,
            ..m.clone()
        })
        .collect()
}

pub async fn members_heartbeat_are_listed_and_expire(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(s.list_members().await.unwrap(), vec![]);
    let before = f.now_ms();
    s.heartbeat(&member("node-b", "10.0.0.2:1", 100), 2)
        .await
        .unwrap();
    s.heartbeat(&member("node-a", "10.0.0.1:1", 200), 60)
        .await
        .unwrap();
    // A second heartbeat replaces the first, TTL included.
    s.heartbeat(&member("node-a", "10.0.0.1:2", 300), 60)
        .await
        .unwrap();
    s.heartbeat(&member("node-c", "10.0.0.3:1", 400), 2)
        .await
        .unwrap();
    s.heartbeat(&member("node-c", "10.0.0.3:1", 500), 60)
        .await
        .unwrap();
    let after = f.now_ms();
    let got = s.list_members().await.unwrap();
    // By node id.
    assert_eq!(
        as_written(&got),
        vec![
            member("node-a", "10.0.0.1:2", 300),
            member("node-b", "10.0.0.2:1", 100),
            member("node-c", "10.0.0.3:1", 500),
        ]
    );
    // Written at the store's time, whatever the member's own clock said.
    for m in &got {
        assert!(
            before - 2_000 <= m.written_at_ms && m.written_at_ms <= after + 2_000,
            "{m:?} written outside {before}..{after}"
        );
    }
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(
        as_written(&s.list_members().await.unwrap()),
        vec![
            member("node-a", "10.0.0.1:2", 300),
            member("node-c", "10.0.0.3:1", 500),
        ]
    );
}

fn lease(slot: i32, owner: &str, epoch: i64, expires_at_ms: i64) -> LeaseRow {
    LeaseRow {
        slot,
        owner: owner.to_string(),
        epoch,
        expires_at_ms,
        address: format!("{owner}:7000"),
        taken_at_ms: 0,
        released_at_ms: 0,
        released_epoch: 0,
    }
}

/// The fields a rejected `create_lease` reports of the current row: owner, epoch, expiry,
/// address (the times of taking and release are not part of the answer).
fn cas_view(l: &LeaseRow) -> (i32, &str, i64, i64, &str) {
    (l.slot, &l.owner, l.epoch, l.expires_at_ms, &l.address)
}

/// What a rejected `replace_lease` reports of the current row: its epoch only (Cassandra
/// answers a failed `IF epoch = ?` with the condition's column; owner, expiry and address
/// may be empty). Callers decide on the epoch, or re-read with `read_lease`.
fn epoch_view(l: &LeaseRow) -> (i32, i64) {
    (l.slot, l.epoch)
}

fn rejected(c: &Cas) -> &LeaseRow {
    match c {
        Cas::Rejected(Some(row)) => row,
        other => panic!("expected a rejection with the current row, got {other:?}"),
    }
}

pub async fn leases_are_created_once_read_and_peeked(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(s.read_lease(1).await.unwrap(), None);
    assert_eq!(s.peek_leases(&[1, 2]).await.unwrap(), vec![]);
    assert_eq!(s.peek_leases(&[]).await.unwrap(), vec![]);
    let first = LeaseRow {
        taken_at_ms: 5_000,
        ..lease(1, "n1", 1, 10_000)
    };
    assert_eq!(s.create_lease(&first).await.unwrap(), Cas::Applied);
    assert_eq!(s.read_lease(1).await.unwrap(), Some(first.clone()));
    // A slot is created once.
    let second = lease(1, "n2", 1, 20_000);
    let c = s.create_lease(&second).await.unwrap();
    assert_eq!(cas_view(rejected(&c)), cas_view(&first));
    assert_eq!(s.read_lease(1).await.unwrap(), Some(first.clone()));

    let third = lease(3, "n3", 4, 30_000);
    assert_eq!(s.create_lease(&third).await.unwrap(), Cas::Applied);
    let mut peeked = s.peek_leases(&[3, 2, 1]).await.unwrap();
    peeked.sort_by_key(|l| l.slot);
    // Full rows; slots without a lease are left out.
    assert_eq!(peeked, vec![first, third]);
}

pub async fn leases_are_renewed_taken_and_released_by_epoch(f: &dyn Fixture) {
    let s = f.store();
    // No row: nothing to compare against.
    assert_eq!(
        s.replace_lease(&lease(7, "n1", 2, 1), 1, LeaseChange::Take)
            .await
            .unwrap(),
        Cas::Rejected(None)
    );
    assert_eq!(s.read_lease(7).await.unwrap(), None);

    let created = LeaseRow {
        taken_at_ms: 1_000,
        ..lease(7, "n1", 1, 10_000)
    };
    assert_eq!(s.create_lease(&created).await.unwrap(), Cas::Applied);

    // Renew: owner, epoch, expiry and address; taken_at stays.
    let renewed = LeaseRow {
        taken_at_ms: 999_999,
        ..lease(7, "n1", 1, 20_000)
    };
    assert_eq!(
        s.replace_lease(&renewed, 1, LeaseChange::Renew)
            .await
            .unwrap(),
        Cas::Applied
    );
    assert_eq!(
        s.read_lease(7).await.unwrap(),
        Some(LeaseRow {
            taken_at_ms: 1_000,
            ..lease(7, "n1", 1, 20_000)
        })
    );

    // Take: a new epoch, with taken_at.
    let taken = LeaseRow {
        taken_at_ms: 25_000,
        ..lease(7, "n2", 2, 30_000)
    };
    assert_eq!(
        s.replace_lease(&taken, 1, LeaseChange::Take).await.unwrap(),
        Cas::Applied
    );
    assert_eq!(s.read_lease(7).await.unwrap(), Some(taken.clone()));

    // A stale epoch is refused with the row as it is.
    let c = s
        .replace_lease(&lease(7, "n1", 2, 40_000), 1, LeaseChange::Renew)
        .await
        .unwrap();
    assert_eq!(epoch_view(rejected(&c)), epoch_view(&taken));
    assert_eq!(s.read_lease(7).await.unwrap(), Some(taken.clone()));

    // Release: expiry 0, with released_at and released_epoch; taken_at stays.
    let released = LeaseRow {
        expires_at_ms: 0,
        released_at_ms: 35_000,
        released_epoch: 2,
        taken_at_ms: 0,
        ..lease(7, "n2", 2, 0)
    };
    assert_eq!(
        s.replace_lease(&released, 2, LeaseChange::Release)
            .await
            .unwrap(),
        Cas::Applied
    );
    assert_eq!(
        s.read_lease(7).await.unwrap(),
        Some(LeaseRow {
            taken_at_ms: 25_000,
            ..released.clone()
        })
    );
    // Taking it again from the released epoch keeps the release on record.
    let retaken = LeaseRow {
        taken_at_ms: 40_000,
        ..lease(7, "n3", 3, 50_000)
    };
    assert_eq!(
        s.replace_lease(&retaken, 2, LeaseChange::Take)
            .await
            .unwrap(),
        Cas::Applied
    );
    assert_eq!(
        s.read_lease(7).await.unwrap(),
        Some(LeaseRow {
            released_at_ms: 35_000,
            released_epoch: 2,
            ..retaken
        })
    );
}

const CONTENDERS: usize = 6;

pub async fn concurrent_create_lease_exactly_one_wins(f: &dyn Fixture) {
    let s = f.store();
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let l = lease(5, &format!("n{i}"), 1, 10_000 + i as i64);
                (l.clone(), s.create_lease(&l).await.unwrap())
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let winners: Vec<&LeaseRow> = outcomes
        .iter()
        .filter(|(_, c)| *c == Cas::Applied)
        .map(|(l, _)| l)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let winner = winners[0].clone();
    for (_, c) in outcomes.iter().filter(|(_, c)| *c != Cas::Applied) {
        assert_eq!(cas_view(rejected(c)), cas_view(&winner));
    }
    assert_eq!(s.read_lease(5).await.unwrap(), Some(winner));
}

pub async fn concurrent_replace_lease_exactly_one_wins(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(
        s.create_lease(&lease(9, "n-old", 1, 1_000)).await.unwrap(),
        Cas::Applied
    );
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let l = LeaseRow {
                    taken_at_ms: 2_000 + i as i64,
                    ..lease(9, &format!("n{i}"), 2, 10_000 + i as i64)
                };
                (
                    l.clone(),
                    s.replace_lease(&l, 1, LeaseChange::Take).await.unwrap(),
                )
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let winners: Vec<&LeaseRow> = outcomes
        .iter()
        .filter(|(_, c)| *c == Cas::Applied)
        .map(|(l, _)| l)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let winner = winners[0].clone();
    // Every other one is rejected with the winner's epoch.
    for (_, c) in outcomes.iter().filter(|(_, c)| *c != Cas::Applied) {
        assert_eq!(epoch_view(rejected(c)), epoch_view(&winner));
    }
    assert_eq!(s.read_lease(9).await.unwrap(), Some(winner));
}
