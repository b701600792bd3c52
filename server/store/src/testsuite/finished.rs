//! The finished log: every SUCCEEDED or CANCELLED state-row write logged under the second it
//! finished, read in order after a position (`StateStore::list_finished`).

use super::fixture::{state, Fixture, SVC};
use crate::{FinishedAt, Status, TxState};

/// The second the test's rows finish around.
const BASE: i64 = 1_800_000_000;

/// Reads the whole finished log of `status` before `until`, call after call, `limit` at a
/// time: (second, transaction id, generation) in log order.
async fn finished_log(
    s: &dyn crate::RetryStore,
    service: &str,
    status: Status,
    until: i64,
    limit: usize,
) -> Vec<(i64, String, i64)> {
    let mut out = Vec::new();
    // Near the test's rows: a store may read a bounded number of days per call.
    let mut from = FinishedAt::start(BASE - 10);
    for _ in 0..1000 {
        let page = s
            .list_finished(service, status, from, until, limit)
            .await
            .unwrap();
        assert!(page.entries.len() <= limit);
        for e in page.entries {
            assert!(e.at >= from, "{e:?} before {from:?}");
            out.push((e.at.second, e.transaction_id, e.generation));
        }
        match page.next {
            Some(next) => from = next,
            None => return out,
        }
    }
    panic!("the finished log never ended");
}

/// Every write of a SUCCEEDED or CANCELLED row (plain, settle, cancel, conditional) is logged
/// under the second of its `updated_at_ms`; no other status is; reads go in log order (by
/// second; within one, an order of the store's that stays the same), from the place given and
/// before `until_second`, and pages of any size cover the log exactly once.
pub async fn finished_rows_are_logged_in_the_order_they_finished(f: &dyn Fixture) {
    let s = f.store();
    let base = BASE;
    let at = |id: &str, generation: i64, status: Status, second: i64| TxState {
        status,
        updated_at_ms: (base + second) * 1000 + 123,
        ..state(SVC, id, generation)
    };
    s.put_state(&at("b", 2, Status::Succeeded, 0), Some(3600))
        .await
        .unwrap();
    s.put_state(&at("a", 1, Status::Succeeded, 0), Some(3600))
        .await
        .unwrap();
    s.put_state(&at("c", 3, Status::Succeeded, 2), Some(3600))
        .await
        .unwrap();
    // A settle of a row read back.
    s.put_state(&state(SVC, "d", 4), None).await.unwrap();
    let read = s.get_state(SVC, "d").await.unwrap().unwrap();
    let settled = TxState {
        status: Status::Succeeded,
        updated_at_ms: (base + 1) * 1000,
        ..read
    };
    s.settle_states(vec![(settled, 3600)])
        .await
        .into_iter()
        .for_each(|r| r.unwrap());
    s.cancel_state(&at("e", 5, Status::Cancelled, 1), 3600, 7200)
        .await
        .unwrap();
    // The conditional writes of a saga step.
    s.put_state(&state(SVC, "f", 6), None).await.unwrap();
    assert!(s
        .cancel_state_if(&at("f", 6, Status::Cancelled, 3), 3600, 7200)
        .await
        .unwrap());
    s.put_state(&state(SVC, "g", 7), None).await.unwrap();
    assert!(s
        .put_state_if(&at("g", 8, Status::Succeeded, 3), Some(3600), 7)
        .await
        .unwrap());
    // Not logged: other statuses, and other services' rows are theirs.
    s.put_state(&at("h", 9, Status::Dead, 1), Some(3600))
        .await
        .unwrap();
    s.put_state(&at("i", 10, Status::Scheduled, 1), None)
        .await
        .unwrap();
    let other = TxState {
        service: "other".to_string(),
        ..at("a", 11, Status::Succeeded, 0)
    };
    s.put_state(&other, Some(3600)).await.unwrap();

    // A row heavier than a batch may be (Cassandra refuses batches over 50 KiB) is logged too.
    let big = TxState {
        service: "heavy".to_string(),
        payload: vec![b'p'; 200 << 10],
        ..at("big", 12, Status::Succeeded, 4)
    };
    s.put_state(&big, Some(3600)).await.unwrap();
    let e = |second: i64, id: &str, g: i64| (base + second, id.to_string(), g);
    let until = base + 100;
    let sorted = |mut v: Vec<(i64, String, i64)>| {
        v.sort();
        v
    };
    let all = finished_log(&*s, SVC, Status::Succeeded, until, 100).await;
    assert!(
        all.windows(2).all(|p| p[0].0 <= p[1].0),
        "by second: {all:?}"
    );
    assert_eq!(
        sorted(all.clone()),
        vec![
            e(0, "a", 1),
            e(0, "b", 2),
            e(1, "d", 4),
            e(2, "c", 3),
            e(3, "g", 8)
        ]
    );
    for limit in [1, 2, 3] {
        assert_eq!(
            finished_log(&*s, SVC, Status::Succeeded, until, limit).await,
            all,
            "limit {limit}"
        );
    }
    assert_eq!(
        finished_log(&*s, SVC, Status::Cancelled, until, 100).await,
        vec![e(1, "e", 5), e(3, "f", 6)]
    );
    assert_eq!(
        finished_log(&*s, "other", Status::Succeeded, until, 100).await,
        vec![e(0, "a", 11)]
    );
    assert_eq!(
        finished_log(&*s, "heavy", Status::Succeeded, until, 100).await,
        vec![e(4, "big", 12)]
    );
    assert!(finished_log(&*s, SVC, Status::Dead, until, 100)
        .await
        .is_empty());
    // From a place; before `until_second`.
    let first = s
        .list_finished(SVC, Status::Succeeded, FinishedAt::start(base), until, 1)
        .await
        .unwrap();
    let rest = s
        .list_finished(SVC, Status::Succeeded, first.next.unwrap(), base + 2, 100)
        .await
        .unwrap();
    let ids: Vec<&str> = first
        .entries
        .iter()
        .chain(&rest.entries)
        .map(|e| e.transaction_id.as_str())
        .collect();
    let mut ids_sorted = ids.clone();
    ids_sorted.sort();
    assert_eq!(ids_sorted, ["a", "b", "d"]);
    assert_eq!(rest.next, None);
    let page = s
        .list_finished(
            SVC,
            Status::Succeeded,
            FinishedAt::start(base + 1),
            until,
            100,
        )
        .await
        .unwrap();
    assert_eq!(page.entries.first().map(|e| e.at.second), Some(base + 1));
}
