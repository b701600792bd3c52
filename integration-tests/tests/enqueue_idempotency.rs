//! Enqueuing one transaction again, against a real Cassandra: a re-enqueue in the same
//! window is confirmed, another due time reschedules under a new generation, concurrent
//! enqueues leave one live pointer, cancel and late duplicates of a finished retry change
//! nothing; an enqueue that waits for its transaction's lock reads the clock after the wait.

use std::time::Duration;

use rebound_integration_tests::{
    clock_now,
    rows::{full_req as req, pointers, states},
    test_config, ts_ms, utc_ms, TestNode,
};
use rebound_proto::v1 as pb;
use tonic::Code;

#[tokio::test]
async fn re_enqueue_is_idempotent() {
    let cfg = test_config("idem");
    let now = utc_ms("2026-11-30 08:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();

    // Same transaction, same window: confirmed, same generation, one pointer.
    let a = c
        .enqueue_retry(req("svc", "tx", 3_000))
        .await
        .unwrap()
        .into_inner();
    assert!(!a.deduplicated);
    clock.advance(100);
    let b = c
        .enqueue_retry(req("svc", "tx", 3_000))
        .await
        .unwrap()
        .into_inner();
    assert!(b.deduplicated);
    assert_eq!(b.generation, a.generation);
    assert_eq!(b.due_time, a.due_time);
    assert_eq!(pointers(&n).await.len(), 1);

    // A different due time: rescheduled under a new generation; the old pointer is stale.
    let d = c
        .enqueue_retry(req("svc", "tx", 30_000))
        .await
        .unwrap()
        .into_inner();
    assert!(d.deduplicated);
    assert!(d.generation > a.generation);
    let ptrs = pointers(&n).await;
    assert_eq!(ptrs.len(), 2);
    let st = states(&n).await;
    let (status, generation, ..) = &st[&("svc".to_string(), "tx".to_string())];
    assert_eq!(status, "SCHEDULED");
    assert_eq!(*generation as u64, d.generation);
    assert_eq!(
        ptrs.iter().filter(|p| p.generation == *generation).count(),
        1
    );
    let retry = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "tx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retry.enqueue_count, 3);
    assert_eq!(retry.status, pb::RetryStatus::Scheduled as i32);

    // Many concurrent enqueues of one transaction: exactly one live pointer.
    let mut handles = Vec::new();
    for i in 0..16u64 {
        let mut c = n.client.clone();
        handles.push(tokio::spawn(async move {
            c.enqueue_retry(req("svc", "race", 2_000 + i * 2_000))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let st = states(&n).await;
    let (_, live, ..) = &st[&("svc".to_string(), "race".to_string())];
    let race: Vec<_> = pointers(&n)
        .await
        .into_iter()
        .filter(|p| p.transaction_id == "race")
        .collect();
    assert!(!race.is_empty());
    assert_eq!(
        race.iter().filter(|p| p.generation == *live).count(),
        1,
        "{race:?}"
    );

    // Cancel: the state becomes CANCELLED; a second cancel reports it was already finished.
    let cancel = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "tx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancel.cancelled);
    assert_eq!(cancel.status, pb::RetryStatus::Cancelled as i32);
    let again = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "tx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.cancelled);
    // The terminal row carries a TTL.
    let (ttl,): (Option<i32>,) = n
        .cql
        .query_unpaged(
            format!(
                "SELECT TTL(status) FROM {}.transactions WHERE region = 'local' AND cluster = 'default' \
                 AND service = 'svc' AND transaction_id = 'tx'",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert!(ttl.is_some_and(|t| t > 3_000 && t <= 3_600), "ttl {ttl:?}");
    // A cancelled transaction may be enqueued again: a new retry.
    let e = c
        .enqueue_retry(req("svc", "tx", 0))
        .await
        .unwrap()
        .into_inner();
    assert!(!e.deduplicated);

    // A transaction that already succeeded is not run again by a late duplicate. The
    // success is written above the row's write time: the node numbers its writes itself
    // (store-cassandra's write clock), so a write left to the coordinator's clock a
    // millisecond later could land below it and lose.
    let (written,) = n
        .cql
        .query_unpaged(
            format!(
                "SELECT WRITETIME(status) FROM {}.transactions WHERE region = 'local' \
                 AND cluster = 'default' AND service = 'svc' AND transaction_id = 'tx'",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row::<(Option<i64>,)>()
        .unwrap();
    n.cql
        .query_unpaged(
            format!(
                "UPDATE {}.transactions USING TIMESTAMP {} SET status = 'SUCCEEDED' \
                 WHERE region = 'local' AND cluster = 'default' AND service = 'svc' \
                 AND transaction_id = 'tx'",
                n.ks(),
                written.expect("a write time") + 10_000
            ),
            (),
        )
        .await
        .unwrap();
    let before = pointers(&n).await.len();
    let err = c.enqueue_retry(req("svc", "tx", 0)).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert_eq!(pointers(&n).await.len(), before);

    // Unknown transactions.
    let err = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    n.finish().await;
}

/// An enqueue that waits for the lock of its transaction chooses its window from the clock
/// after the wait. A batch of 500 new services holds the lock of one transaction while it
/// writes them; a single enqueue of that transaction waits behind it, and the clock moves on
/// 10 minutes meanwhile: the single is scheduled from the moved clock, not confirmed in the
/// window the clock gave before the wait.
#[tokio::test]
async fn an_enqueue_behind_the_transaction_lock_reads_the_clock_after_the_wait() {
    let cfg = test_config("lockclock");
    let (n, clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:00:00.100")).await;
    // A round only counts when the batch took the lock first and still held it well after
    // the clock moved; a box too busy for that gets another round.
    for round in 0..5 {
        let before = clock_now(&clock);
        let requests = (0..500)
            .map(|i| req(&format!("r{round}-s{i:03}"), "t", 3_000))
            .collect();
        let mut bc = n.client.clone();
        let batch = tokio::spawn(async move {
            bc.enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut sc = n.client.clone();
        let service = format!("r{round}-s000");
        let single = tokio::spawn(async move { sc.enqueue_retry(req(&service, "t", 3_000)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(600_000);
        let moved_at = std::time::Instant::now();
        let b = batch.await.unwrap().unwrap().into_inner();
        let held = moved_at.elapsed();
        let s = single.await.unwrap().unwrap().into_inner();
        // A batch whose state rows landed ten clock-minutes after its pointers answers that
        // their outcome is unknown (see `Writer::write_schedule`): no conclusion this round.
        let Some(pb::enqueue_retry_result::Result::Response(first)) = &b.results[0].result else {
            eprintln!(
                "round {round} inconclusive: batch item 0 {:?}",
                b.results[0]
            );
            continue;
        };
        // The batch must have taken the lock first (the single found its row) and held it
        // well after the clock moved. (Its own items may have been placed again after the
        // move: a pointer that lands after its window ended is re-placed.)
        if first.deduplicated || held < Duration::from_millis(100) {
            eprintln!(
                "round {round} inconclusive: single first {}, batch done {held:?} after the clock moved",
                first.deduplicated
            );
            continue;
        }
        let due_single = ts_ms(s.due_time.as_ref().unwrap());
        assert!(s.deduplicated);
        assert!(
            due_single >= before + 600_000 + 3_000,
            "the single was due at {due_single}, chosen from the clock before the wait ({before}); \
             the moved clock puts it at {} or later",
            before + 603_000
        );
        // A later generation, or the same one when the batch's item was placed again after the
        // move into the window the single then chose (the single only confirms it).
        assert!(s.generation >= first.generation);
        n.finish().await;
        return;
    }
    panic!("in 5 rounds the batch never held the lock long enough to test the wait");
}
