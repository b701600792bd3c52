//! State rows of the layout before schema 0007 (one column per field, no body), against a
//! real Cassandra: read whole, rescheduled and finished in their own layout.

use rebound_integration_tests::{
    rows::{full_req as req, CqlDate},
    test_config, ts_ms, utc_ms, TestNode,
};
use rebound_proto::v1 as pb;

/// A state row written before schema 0007 (one column per field, no body) is read whole,
/// rescheduled and finished in its own layout: its columns stay current and all of them get
/// the terminal TTL, so nothing of it outlives the row. New rows use the 4-cell layout.
#[tokio::test]
async fn a_state_row_of_the_old_layout_is_read_and_kept_in_it() {
    let cfg = test_config("legacyrow");
    let now = utc_ms("2026-11-30 08:20:00.000");
    let (n, _clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();
    let ks = n.ks().to_string();
    let today = CqlDate::from_ymd_opt(2026, 11, 30).unwrap();
    n.cql
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, status, \
                 generation, attempt, payload, attributes, max_attempts, initial_backoff_ms, \
                 max_backoff_ms, multiplier, jitter, max_retry_duration_ms, ack_timeout_ms, \
                 max_deliveries_per_attempt, first_enqueued_at, last_enqueued_at, updated_at, \
                 due_at, last_error, loc_day, loc_window, loc_instance, loc_bucket, \
                 enqueue_count, delivery_count, non_retryable) VALUES ('local', 'default', 'svc', \
                 'old', 'SCHEDULED', 7, 2, 0x6869, {{'k': 'v'}}, 6, 1000, 60000, 2.0, 0.1, 0, \
                 30000, 3, ?, ?, ?, ?, 'timeout', ?, 3, 'node-z-1-0', 0, 1, 0, 'fatal\nbad')"
            ),
            (
                scylla::value::CqlTimestamp(now - 3_600_000),
                scylla::value::CqlTimestamp(now - 3_600_000),
                scylla::value::CqlTimestamp(now - 3_600_000),
                scylla::value::CqlTimestamp(now - 3_594_000),
                today,
            ),
        )
        .await
        .unwrap();
    let get = |c: &mut rebound_proto::v1::retry_service_client::RetryServiceClient<_>| {
        let mut c = c.clone();
        async move {
            c.get_retry(pb::GetRetryRequest {
                service: "svc".into(),
                transaction_id: "old".into(),
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let r = get(&mut c).await;
    assert_eq!(
        (r.status, r.generation, r.attempt, r.payload.as_slice()),
        (pb::RetryStatus::Scheduled as i32, 7, 2, &b"hi"[..])
    );
    assert_eq!(r.attributes.get("k").map(String::as_str), Some("v"));
    let p = r.policy.unwrap();
    assert_eq!(p.max_attempts, Some(6));
    assert_eq!(p.multiplier, Some(2.0));
    assert_eq!(p.non_retryable_error_classes, vec!["fatal", "bad"]);
    assert_eq!(p.max_deliveries_per_attempt, Some(3));
    assert_eq!(r.last_error, "timeout");
    assert_eq!(r.location.as_ref().unwrap().instance, "node-z-1-0");
    assert_eq!(r.enqueue_count, 1);

    // Enqueued again into another window: rescheduled, in the old layout.
    let e = c
        .enqueue_retry(req("svc", "old", 30_000))
        .await
        .unwrap()
        .into_inner();
    assert!(e.deduplicated);
    assert!(e.generation > 7);
    let r = get(&mut c).await;
    assert_eq!(
        (r.enqueue_count, r.attempt, r.generation),
        (2, 2, e.generation)
    );
    assert_eq!(
        ts_ms(r.first_enqueued_at.as_ref().unwrap()),
        now - 3_600_000
    );
    let location = r.location.unwrap();
    let row = |id: &'static str| {
        let (cql, ks) = (&n.cql, ks.clone());
        async move {
            cql.query_unpaged(
                format!(
                    "SELECT body, generation, loc_window, TTL(status), TTL(max_attempts), \
                     TTL(body) FROM {ks}.transactions WHERE region = 'local' \
                     AND cluster = 'default' AND service = 'svc' AND transaction_id = ?"
                ),
                (id,),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row::<(
                Option<Vec<u8>>,
                i64,
                Option<i32>,
                Option<i32>,
                Option<i32>,
                Option<i32>,
            )>()
            .unwrap()
        }
    };
    let (body, generation, window, ..) = row("old").await;
    assert!(body.is_none(), "an old-layout row keeps its layout");
    assert_eq!(generation as u64, e.generation);
    assert_eq!(window, Some(location.window as i32));

    // Finished: every cell of it expires with the terminal TTL.
    let cancel = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "old".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancel.cancelled);
    let (body, _, _, ttl_status, ttl_policy, _) = row("old").await;
    assert!(body.is_none());
    assert!(ttl_status.is_some_and(|t| t > 3_000), "{ttl_status:?}");
    assert!(ttl_policy.is_some_and(|t| t > 3_000), "{ttl_policy:?}");

    // A new retry is written in the 4-cell layout, without a TTL while it is live.
    c.enqueue_retry(req("svc", "new", 0)).await.unwrap();
    let (body, _, window, ttl_status, _, ttl_body) = row("new").await;
    assert!(body.is_some() && window.is_none());
    assert_eq!((ttl_status, ttl_body), (None, None));
    n.finish().await;
}
