//! ListRetries of SUCCEEDED and CANCELLED retries: read from the finished log in the order
//! they finished, each once, filtered, while the terminal TTL keeps them.

use std::collections::BTreeSet;

use rebound_proto::v1 as pb;

use crate::{expect_delivery, input, utc_ms, Rig};

const START: &str = "2026-12-06 09:00:00.100";

async fn all_pages(rig: &Rig, r: pb::ListRetriesRequest) -> Vec<pb::RetrySummary> {
    crate::list::all_pages(rig, r).await.0
}

fn of(statuses: &[pb::RetryStatus], page_size: u32) -> pb::ListRetriesRequest {
    pb::ListRetriesRequest {
        service: "svc".into(),
        statuses: statuses.iter().map(|s| *s as i32).collect(),
        page_size,
        ..Default::default()
    }
}

fn ids(rows: &[pb::RetrySummary]) -> Vec<&str> {
    rows.iter().map(|r| r.transaction_id.as_str()).collect()
}

#[tokio::test]
async fn finished_retries_are_listed_in_the_order_they_finished() {
    let rig = Rig::new(utc_ms(START)).await;
    let mut sub = rig.subscribe("svc", 20).await;
    // Ten due at once, customers 42 (even) and 7 (odd); acked SUCCEEDED one a second, in
    // reverse id order, except t3 and t4, which are cancelled instead (t4 while in flight,
    // so its SUCCEEDED ack loses to the cancel).
    for i in 0..10 {
        let mut inp = input("svc", &format!("t{i}"), 500);
        let c = if i % 2 == 0 { "42" } else { "7" };
        inp.attributes.insert("customer".into(), c.into());
        rig.writer.enqueue(inp).await.unwrap();
    }
    rig.writer.cancel("svc", "t3").await.unwrap();
    rig.clock.advance(600);
    rig.dispatcher.fire_due();
    let mut got = Vec::new();
    for _ in 0..9 {
        got.push(expect_delivery(&mut sub).await);
    }
    got.sort_by(|a, b| b.transaction_id.cmp(&a.transaction_id));
    for d in &got {
        rig.clock.advance(1_000);
        if d.transaction_id == "t4" {
            rig.writer.cancel("svc", "t4").await.unwrap();
        }
        rig.ack(d, pb::AckOutcome::Succeeded, None).await.unwrap();
    }
    // One more, still scheduled, is listed in neither.
    rig.enqueue("svc", "later", 3_600_000).await;
    let succeeded = all_pages(&rig, of(&[pb::RetryStatus::Succeeded], 100)).await;
    assert_eq!(
        ids(&succeeded),
        ["t9", "t8", "t7", "t6", "t5", "t2", "t1", "t0"]
    );
    assert!(succeeded
        .iter()
        .all(|r| r.status == pb::RetryStatus::Succeeded as i32 && r.delivery_count == 1));
    let cancelled = all_pages(&rig, of(&[pb::RetryStatus::Cancelled], 100)).await;
    assert_eq!(ids(&cancelled), ["t3", "t4"]);
    // Pages of two cover the same rows once; with other statuses, after them.
    for size in [1, 2, 3] {
        let rows = all_pages(&rig, of(&[pb::RetryStatus::Succeeded], size)).await;
        assert_eq!(ids(&rows), ids(&succeeded), "pages of {size}");
    }
    let all = all_pages(
        &rig,
        of(
            &[
                pb::RetryStatus::Cancelled,
                pb::RetryStatus::Scheduled,
                pb::RetryStatus::Succeeded,
            ],
            2,
        ),
    )
    .await;
    assert_eq!(
        ids(&all),
        ["later", "t9", "t8", "t7", "t6", "t5", "t2", "t1", "t0", "t3", "t4"]
    );
    // Filters apply to the row.
    let r = pb::ListRetriesRequest {
        attributes: [("customer".to_string(), "42".to_string())].into(),
        ..of(
            &[pb::RetryStatus::Succeeded, pb::RetryStatus::Cancelled],
            100,
        )
    };
    assert_eq!(
        ids(&all_pages(&rig, r).await),
        ["t8", "t6", "t2", "t0", "t4"]
    );
    // A token of the finished part is refused by a listing of other statuses.
    let first = rig
        .executor
        .handle
        .list_retries(&of(&[pb::RetryStatus::Succeeded], 2), None)
        .await
        .unwrap();
    assert!(first.next_page_token.starts_with("s1."));
    let e = rig
        .executor
        .handle
        .list_retries(
            &pb::ListRetriesRequest {
                page_token: first.next_page_token,
                ..of(&[pb::RetryStatus::Cancelled], 2)
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("page_token:"), "{e}");
}

#[tokio::test]
async fn a_cancelled_retry_started_again_is_listed_where_it_stands() {
    let rig = Rig::new(utc_ms(START)).await;
    let mut sub = rig.subscribe("svc", 20).await;
    rig.enqueue("svc", "again", 500).await;
    rig.writer.cancel("svc", "again").await.unwrap();
    rig.clock.advance(1_000);
    // A fresh start after the cancel: scheduled, no longer listed as cancelled.
    rig.enqueue("svc", "again", 500).await;
    assert!(all_pages(&rig, of(&[pb::RetryStatus::Cancelled], 10))
        .await
        .is_empty());
    rig.clock.advance(600);
    rig.dispatcher.fire_due();
    let d = expect_delivery(&mut sub).await;
    rig.clock.advance(1_000);
    rig.ack(&d, pb::AckOutcome::Succeeded, None).await.unwrap();
    let rows = all_pages(
        &rig,
        of(
            &[pb::RetryStatus::Succeeded, pb::RetryStatus::Cancelled],
            10,
        ),
    )
    .await;
    assert_eq!(ids(&rows), ["again"]);
    assert_eq!(rows[0].status, pb::RetryStatus::Succeeded as i32);
    // Once the terminal TTL has passed, neither the row nor its entry is kept.
    rig.clock
        .advance(i64::from(crate::config().terminal_ttl_seconds) * 1000 + 5_000);
    let unique: BTreeSet<String> = all_pages(&rig, of(&[pb::RetryStatus::Succeeded], 10))
        .await
        .into_iter()
        .map(|r| r.transaction_id)
        .collect();
    assert!(unique.is_empty(), "{unique:?}");
}
