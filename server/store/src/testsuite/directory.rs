//! The directory: days, windows, Tier-3 instances, buckets, Tier-5 pointers, low water.

use futures::{stream, StreamExt};

use super::fixture::{ids, loc, pointer, pointers_of, state, window, Fixture, SVC};
use crate::{InstanceRow, Pointer, TokenRange};

const DAY: i32 = 20_400;

pub async fn days_are_listed_ascending_by_year(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(s.list_years().await.unwrap(), Vec::<i32>::new());
    assert_eq!(s.list_days(2026).await.unwrap(), Vec::<i32>::new());
    for (year, day) in [
        (2026, 20_455),
        (2027, 20_500),
        (2026, 20_090),
        (2025, 20_000),
        (2026, 20_455),
        (2026, 20_200),
    ] {
        s.put_day(year, day).await.unwrap();
    }
    assert_eq!(s.list_years().await.unwrap(), vec![2025, 2026, 2027]);
    assert_eq!(
        s.list_days(2026).await.unwrap(),
        vec![20_090, 20_200, 20_455]
    );
    assert_eq!(s.list_days(2024).await.unwrap(), Vec::<i32>::new());
    assert!(s.day_listed(2026, 20_200).await.unwrap());
    assert!(!s.day_listed(2026, 20_201).await.unwrap());
    // A day is listed under the year it was put with, not under another.
    assert!(!s.day_listed(2025, 20_200).await.unwrap());

    s.delete_day(2026, 20_200).await.unwrap();
    assert!(!s.day_listed(2026, 20_200).await.unwrap());
    assert_eq!(s.list_days(2026).await.unwrap(), vec![20_090, 20_455]);
    assert_eq!(s.list_days(2025).await.unwrap(), vec![20_000]);
    // Deleting a day that is not there is harmless.
    s.delete_day(2026, 20_200).await.unwrap();
    // A year whose last day is deleted is no longer listed.
    s.delete_day(2025, 20_000).await.unwrap();
    assert_eq!(s.list_years().await.unwrap(), vec![2026, 2027]);
}

pub async fn windows_are_listed_ascending_from_a_window(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(
        s.list_windows_from(DAY, 0).await.unwrap(),
        Vec::<u32>::new()
    );
    for w in [7, 3, 10, 0, 3, 86_399] {
        s.put_window(window(DAY, w)).await.unwrap();
    }
    s.put_window(window(DAY + 1, 1)).await.unwrap();
    s.put_window(window(DAY - 1, 5)).await.unwrap();
    assert_eq!(
        s.list_windows_from(DAY, 0).await.unwrap(),
        vec![0, 3, 7, 10, 86_399]
    );
    // `from` itself is included.
    assert_eq!(
        s.list_windows_from(DAY, 3).await.unwrap(),
        vec![3, 7, 10, 86_399]
    );
    assert_eq!(s.list_windows_from(DAY, 8).await.unwrap(), vec![10, 86_399]);
    assert_eq!(
        s.list_windows_from(DAY, 86_400).await.unwrap(),
        Vec::<u32>::new()
    );
    assert!(s.window_listed(window(DAY, 7)).await.unwrap());
    assert!(!s.window_listed(window(DAY, 8)).await.unwrap());
    assert!(!s.window_listed(window(DAY + 1, 7)).await.unwrap());

    s.delete_window(window(DAY, 3)).await.unwrap();
    assert!(!s.window_listed(window(DAY, 3)).await.unwrap());
    assert_eq!(
        s.list_windows_from(DAY, 0).await.unwrap(),
        vec![0, 7, 10, 86_399]
    );
    assert_eq!(s.list_windows_from(DAY + 1, 0).await.unwrap(), vec![1]);
    assert_eq!(s.list_windows_from(DAY - 1, 0).await.unwrap(), vec![5]);
}

pub async fn low_water_defaults_to_zero_and_is_a_plain_upsert(f: &dyn Fixture) {
    let s = f.store();
    assert_eq!(s.low_water(DAY).await.unwrap(), 0);
    s.set_low_water(DAY, 5).await.unwrap();
    assert_eq!(s.low_water(DAY).await.unwrap(), 5);
    // Not a maximum: a lower value overwrites.
    s.set_low_water(DAY, 2).await.unwrap();
    assert_eq!(s.low_water(DAY).await.unwrap(), 2);
    s.set_low_water(DAY + 1, 9).await.unwrap();
    assert_eq!(s.low_water(DAY - 1).await.unwrap(), 0);
    s.delete_low_water(DAY).await.unwrap();
    assert_eq!(s.low_water(DAY).await.unwrap(), 0);
    assert_eq!(s.low_water(DAY + 1).await.unwrap(), 9);
    // Deleting what is not there is harmless.
    s.delete_low_water(DAY).await.unwrap();
}

fn instance(token: i64, service: &str, instance: &str) -> InstanceRow {
    InstanceRow {
        instance_token: token,
        service: service.to_string(),
        instance: instance.to_string(),
    }
}

pub async fn instances_are_read_in_token_order_within_an_inclusive_range(f: &dyn Fixture) {
    let s = f.store();
    let w = window(DAY, 10);
    assert_eq!(s.list_instances(w, TokenRange::FULL).await.unwrap(), vec![]);
    let rows = [
        instance(200, "a", "i1"),
        instance(0, "b", "i1"),
        instance(i64::MAX, "a", "i1"),
        instance(-100, "a", "i1"),
        instance(0, "a", "i2"),
        instance(i64::MIN, "a", "i1"),
        instance(100, "a", "i1"),
        instance(0, "a", "i1"),
        instance(101, "a", "i1"),
    ];
    for r in &rows {
        s.put_instance(w, r).await.unwrap();
    }
    // Putting a row twice makes one row.
    s.put_instance(w, &rows[0]).await.unwrap();
    // Neighbouring windows hold rows of their own.
    s.put_instance(window(DAY, 11), &instance(50, "a", "n1"))
        .await
        .unwrap();
    s.put_instance(window(DAY + 1, 10), &instance(50, "a", "n2"))
        .await
        .unwrap();

    // Token order; rows of one token by service, then instance.
    let mut sorted = rows.to_vec();
    sorted.sort_by(|x, y| {
        (x.instance_token, &x.service, &x.instance).cmp(&(
            y.instance_token,
            &y.service,
            &y.instance,
        ))
    });
    assert_eq!(s.list_instances(w, TokenRange::FULL).await.unwrap(), sorted);
    let range = |start, end| TokenRange { start, end };
    // Both ends are included.
    assert_eq!(
        s.list_instances(w, range(0, 100)).await.unwrap(),
        vec![
            instance(0, "a", "i1"),
            instance(0, "a", "i2"),
            instance(0, "b", "i1"),
            instance(100, "a", "i1"),
        ]
    );
    assert_eq!(
        s.list_instances(w, range(1, 101)).await.unwrap(),
        vec![instance(100, "a", "i1"), instance(101, "a", "i1")]
    );
    assert_eq!(s.list_instances(w, range(-99, -1)).await.unwrap(), vec![]);
    assert_eq!(
        s.list_instances(w, range(i64::MIN, i64::MIN))
            .await
            .unwrap(),
        vec![instance(i64::MIN, "a", "i1")]
    );
    assert_eq!(
        s.list_instances(w, range(201, i64::MAX)).await.unwrap(),
        vec![instance(i64::MAX, "a", "i1")]
    );
    // An empty range (start above end) reads nothing.
    assert_eq!(s.list_instances(w, range(100, 0)).await.unwrap(), vec![]);
    assert_eq!(
        s.list_instances(window(DAY, 11), TokenRange::FULL)
            .await
            .unwrap(),
        vec![instance(50, "a", "n1")]
    );
}

pub async fn window_instances_delete_leaves_other_windows_alone(f: &dyn Fixture) {
    let s = f.store();
    let (w, next, next_day) = (window(DAY, 10), window(DAY, 11), window(DAY + 1, 10));
    assert!(!s.window_has_instances(w).await.unwrap());
    let (a, b) = (instance(-5, SVC, "i1"), instance(7, SVC, "i2"));
    s.put_instance(w, &a).await.unwrap();
    s.put_instance(w, &b).await.unwrap();
    s.put_instance(next, &a).await.unwrap();
    s.put_instance(next_day, &a).await.unwrap();
    assert!(s.window_has_instances(w).await.unwrap());
    assert!(!s.window_has_instances(window(DAY, 9)).await.unwrap());

    // One row.
    s.delete_instance(w, &a).await.unwrap();
    assert_eq!(
        s.list_instances(w, TokenRange::FULL).await.unwrap(),
        vec![b.clone()]
    );
    assert!(s.window_has_instances(w).await.unwrap());
    // A row that is not there: harmless.
    s.delete_instance(w, &a).await.unwrap();
    s.put_instance(w, &a).await.unwrap();

    // The whole window.
    s.delete_window_instances(w).await.unwrap();
    assert_eq!(s.list_instances(w, TokenRange::FULL).await.unwrap(), vec![]);
    assert!(!s.window_has_instances(w).await.unwrap());
    for other in [next, next_day] {
        assert!(s.window_has_instances(other).await.unwrap());
        assert_eq!(
            s.list_instances(other, TokenRange::FULL).await.unwrap(),
            vec![a.clone()]
        );
    }
}

pub async fn buckets_are_listed_ascending_and_deleted_one_by_one(f: &dyn Fixture) {
    let s = f.store();
    let w = window(DAY, 4);
    assert_eq!(
        s.list_buckets(w, SVC, "i1").await.unwrap(),
        Vec::<u32>::new()
    );
    for b in [3, 0, 12, 3, 1000] {
        s.put_bucket(w, SVC, "i1", b).await.unwrap();
    }
    s.put_bucket(w, SVC, "i2", 5).await.unwrap();
    s.put_bucket(w, "other", "i1", 6).await.unwrap();
    s.put_bucket(window(DAY, 5), SVC, "i1", 7).await.unwrap();
    assert_eq!(
        s.list_buckets(w, SVC, "i1").await.unwrap(),
        vec![0, 3, 12, 1000]
    );
    s.delete_bucket(w, SVC, "i1", 3).await.unwrap();
    assert_eq!(
        s.list_buckets(w, SVC, "i1").await.unwrap(),
        vec![0, 12, 1000]
    );
    s.delete_bucket(w, SVC, "i1", 3).await.unwrap();
    assert_eq!(s.list_buckets(w, SVC, "i2").await.unwrap(), vec![5]);
    assert_eq!(s.list_buckets(w, "other", "i1").await.unwrap(), vec![6]);
    assert_eq!(
        s.list_buckets(window(DAY, 5), SVC, "i1").await.unwrap(),
        vec![7]
    );
}

pub async fn pointers_are_upserts_streamed_in_transaction_order(f: &dyn Fixture) {
    let s = f.store();
    let l = loc(window(DAY, 8), "i1", 2);
    assert_eq!(pointers_of(&*s, SVC, &l).await, vec![]);
    assert_eq!(s.count_pointers(SVC, &l).await.unwrap(), 0);
    s.put_pointer(SVC, &l, &pointer("tx-m", 1)).await.unwrap();
    s.put_pointers(
        SVC,
        &l,
        &[
            pointer("tx-z", 2),
            pointer("tx-a", 3),
            pointer("tx-q", 4),
            pointer("tx-b", 5),
        ],
    )
    .await
    .unwrap();
    let got = pointers_of(&*s, SVC, &l).await;
    assert_eq!(ids(&got), ["tx-a", "tx-b", "tx-m", "tx-q", "tx-z"]);
    assert_eq!(got[0], pointer("tx-a", 3));
    assert_eq!(got[2], pointer("tx-m", 1));
    assert_eq!(s.count_pointers(SVC, &l).await.unwrap(), 5);

    // One row per transaction: a later pointer replaces the earlier one.
    let newer = Pointer {
        attempt: 7,
        ..pointer("tx-m", 9)
    };
    s.put_pointer(SVC, &l, &newer).await.unwrap();
    // Two pointers of one transaction in one call: the last one wins.
    s.put_pointers(SVC, &l, &[pointer("tx-q", 10), pointer("tx-q", 11)])
        .await
        .unwrap();
    // No pointers: nothing written.
    s.put_pointers(SVC, &l, &[]).await.unwrap();
    let got = pointers_of(&*s, SVC, &l).await;
    assert_eq!(ids(&got), ["tx-a", "tx-b", "tx-m", "tx-q", "tx-z"]);
    assert_eq!(got[2], newer);
    assert_eq!(got[3], pointer("tx-q", 11));
    assert_eq!(s.count_pointers(SVC, &l).await.unwrap(), 5);
}

pub async fn pointer_groups_land_in_their_own_buckets(f: &dyn Fixture) {
    let s = f.store();
    let w = window(DAY, 10);
    let (a, b, c) = (loc(w, "i1", 0), loc(w, "i2", 0), loc(w, "i1", 1));
    s.put_pointer_groups(&[
        (
            SVC.to_string(),
            a.clone(),
            vec![pointer("tx-1", 1), pointer("tx-2", 2)],
        ),
        (SVC.to_string(), b.clone(), vec![pointer("tx-3", 3)]),
        ("other".to_string(), c.clone(), vec![pointer("tx-4", 4)]),
    ])
    .await
    .unwrap();
    assert_eq!(
        pointers_of(&*s, SVC, &a).await,
        vec![pointer("tx-1", 1), pointer("tx-2", 2)]
    );
    assert_eq!(pointers_of(&*s, SVC, &b).await, vec![pointer("tx-3", 3)]);
    assert_eq!(
        pointers_of(&*s, "other", &c).await,
        vec![pointer("tx-4", 4)]
    );
    assert_eq!(pointers_of(&*s, SVC, &c).await, vec![]);
    // One group is put_pointers; none writes nothing.
    s.put_pointer_groups(&[(SVC.to_string(), c.clone(), vec![pointer("tx-5", 5)])])
        .await
        .unwrap();
    s.put_pointer_groups(&[]).await.unwrap();
    assert_eq!(pointers_of(&*s, SVC, &c).await, vec![pointer("tx-5", 5)]);
}

pub async fn pointers_stream_to_the_end_over_many_pages(f: &dyn Fixture) {
    let s = f.store();
    let l = loc(window(DAY, 9), "i1", 0);
    let n = 2 * f.page_size() + 7;
    let all: Vec<Pointer> = (0..n)
        .map(|i| pointer(&format!("tx-{i:06}"), i as i64))
        .collect();
    // Written in an order other than the read order.
    let mut chunks: Vec<&[Pointer]> = all.chunks(100).collect();
    chunks.reverse();
    let results: Vec<_> = stream::iter(chunks)
        .map(|c| {
            let s = s.clone();
            let l = l.clone();
            async move { s.put_pointers(SVC, &l, c).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let got = pointers_of(&*s, SVC, &l).await;
    assert_eq!(got.len(), n);
    assert!(got == all, "every pointer once, in transaction order");
    assert_eq!(s.count_pointers(SVC, &l).await.unwrap(), n as u64);
}

pub async fn pointer_partition_delete_leaves_neighbours_alone(f: &dyn Fixture) {
    let s = f.store();
    let w = window(DAY, 20);
    let target = loc(w, "i1", 1);
    let neighbours = [
        (SVC, loc(w, "i1", 0)),
        (SVC, loc(w, "i1", 2)),
        (SVC, loc(w, "i2", 1)),
        (SVC, loc(window(DAY, 21), "i1", 1)),
        (SVC, loc(window(DAY + 1, 20), "i1", 1)),
        ("other", target.clone()),
    ];
    let three = [pointer("a", 1), pointer("b", 2), pointer("c", 3)];
    s.put_pointers(SVC, &target, &three).await.unwrap();
    for (svc, l) in &neighbours {
        s.put_pointers(svc, l, &three).await.unwrap();
    }
    s.delete_pointer_partition(SVC, &target).await.unwrap();
    assert_eq!(pointers_of(&*s, SVC, &target).await, vec![]);
    assert_eq!(s.count_pointers(SVC, &target).await.unwrap(), 0);
    for (svc, l) in &neighbours {
        assert_eq!(
            pointers_of(&*s, svc, l).await,
            three.to_vec(),
            "{svc} {l:?}"
        );
        assert_eq!(s.count_pointers(svc, l).await.unwrap(), 3);
    }
    // A partition is written again after its delete.
    s.put_pointer(SVC, &target, &pointer("d", 4)).await.unwrap();
    assert_eq!(pointers_of(&*s, SVC, &target).await, vec![pointer("d", 4)]);
    // Deleting a partition that is not there is harmless.
    s.delete_pointer_partition(SVC, &loc(w, "nobody", 9))
        .await
        .unwrap();
}

pub async fn late_pointer_delete_removes_one_row_only(f: &dyn Fixture) {
    let s = f.store();
    let l = loc(window(DAY, 30), "i1", 4);
    let next = loc(window(DAY, 30), "i1", 5);
    let three = [pointer("a", 1), pointer("b", 2), pointer("c", 3)];
    s.put_pointers(SVC, &l, &three).await.unwrap();
    s.put_pointers(SVC, &next, &three).await.unwrap();
    s.delete_late_pointer(SVC, &l, "b").await.unwrap();
    assert_eq!(
        pointers_of(&*s, SVC, &l).await,
        vec![pointer("a", 1), pointer("c", 3)]
    );
    assert_eq!(s.count_pointers(SVC, &l).await.unwrap(), 2);
    assert_eq!(pointers_of(&*s, SVC, &next).await, three.to_vec());
    // A pointer, or a bucket, that is not there: harmless.
    s.delete_late_pointer(SVC, &l, "b").await.unwrap();
    s.delete_late_pointer(SVC, &loc(window(DAY, 31), "x", 0), "a")
        .await
        .unwrap();
    assert_eq!(s.count_pointers(SVC, &l).await.unwrap(), 2);
}

/// Two stores on one database in different `ns` see nothing of each other.
pub async fn namespaces_do_not_see_each_other(f: &dyn Fixture) {
    let Some(b) = f.other_ns() else {
        return;
    };
    let a = f.store();
    let w = window(DAY, 3);
    let l = loc(w, "i1", 0);
    a.put_day(2026, DAY).await.unwrap();
    a.put_window(w).await.unwrap();
    a.put_instance(w, &instance(1, SVC, "i1")).await.unwrap();
    a.put_bucket(w, SVC, "i1", 0).await.unwrap();
    a.put_pointer(SVC, &l, &pointer("t", 1)).await.unwrap();
    a.set_low_water(DAY, 4).await.unwrap();
    a.put_state(&state(SVC, "t", 1), None).await.unwrap();
    a.touch_service(SVC, 1).await.unwrap();

    assert_eq!(b.list_years().await.unwrap(), Vec::<i32>::new());
    assert!(!b.day_listed(2026, DAY).await.unwrap());
    assert!(!b.window_listed(w).await.unwrap());
    assert!(!b.window_has_instances(w).await.unwrap());
    assert_eq!(
        b.list_buckets(w, SVC, "i1").await.unwrap(),
        Vec::<u32>::new()
    );
    assert_eq!(b.count_pointers(SVC, &l).await.unwrap(), 0);
    assert_eq!(b.low_water(DAY).await.unwrap(), 0);
    assert_eq!(b.get_state(SVC, "t").await.unwrap(), None);
    assert_eq!(b.list_services().await.unwrap(), vec![]);

    // And a whole-partition delete in one leaves the other's partition alone.
    b.delete_pointer_partition(SVC, &l).await.unwrap();
    b.delete_window_instances(w).await.unwrap();
    assert_eq!(a.count_pointers(SVC, &l).await.unwrap(), 1);
    assert!(a.window_has_instances(w).await.unwrap());
    assert_eq!(a.list_years().await.unwrap(), vec![2026]);
}
