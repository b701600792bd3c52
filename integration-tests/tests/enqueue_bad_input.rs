//! Bad input over gRPC, against a real Cassandra: refused with INVALID_ARGUMENT naming the
//! field, and nothing is written. The field-by-field rules of `validate` are unit tests in
//! server/engine/src/validate_tests.rs; here are one of them end to end, and the refusals that need
//! the node's configuration, clock or message limit.

use rebound_integration_tests::{
    rows::full_req as req, test_config, utc_ms, TestNode, DATA_TABLES,
};
use rebound_proto::v1 as pb;
use tonic::Code;

#[tokio::test]
async fn bad_input_is_refused_by_name_and_writes_nothing() {
    let mut cfg = test_config("bad");
    cfg.max_payload_bytes = 1_000;
    cfg.max_delay_seconds = 3_600;
    cfg.max_batch_items = 5;
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:00:00.000")).await;
    let mut c = n.client.clone();
    fn policy(f: &dyn Fn(&mut pb::RetryPolicy)) -> Option<pb::RetryPolicy> {
        let mut p = pb::RetryPolicy::default();
        f(&mut p);
        Some(p)
    }
    fn d(s: i64) -> prost_types::Duration {
        prost_types::Duration {
            seconds: s,
            nanos: 0,
        }
    }
    type Mutation = Box<dyn Fn(&mut pb::EnqueueRetryRequest)>;
    // The rules of `validate` alone are table-driven unit tests (server/engine/src/validate_tests.rs);
    // one of them here proves the way from gRPC: the field is named first.
    let mut r = req("svc", "tx-bad", 0);
    r.service = "my service".into();
    let err = c.enqueue_retry(r).await.expect_err("space in service");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().starts_with("service: "), "{}", err.message());
    // The rules that need the node's configuration, its clock or the resolved policy.
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "delay over max",
            Box::new(|r| r.schedule = Some(pb::enqueue_retry_request::Schedule::Delay(d(3_601)))),
            "REBOUND_MAX_DELAY_SECONDS",
        ),
        (
            "due time too far",
            Box::new(|r| {
                r.schedule = Some(pb::enqueue_retry_request::Schedule::DueTime(
                    prost_types::Timestamp {
                        seconds: utc_ms("2026-12-30 09:00:00.000") / 1000,
                        nanos: 0,
                    },
                ))
            }),
            "due_time",
        ),
        (
            "multiplier below 1",
            Box::new(move |r| r.policy = policy(&|p| p.multiplier = Some(0.5))),
            "policy.multiplier",
        ),
        (
            "jitter above 1",
            Box::new(move |r| r.policy = policy(&|p| p.jitter = Some(1.5))),
            "policy.jitter",
        ),
        (
            "max below initial",
            Box::new(move |r| {
                r.policy = policy(&|p| {
                    p.initial_backoff = Some(d(60));
                    p.max_backoff = Some(d(10));
                })
            }),
            "policy.max_backoff",
        ),
        (
            "attempts exhausted",
            Box::new(move |r| {
                r.attempt = 3;
                r.policy = policy(&|p| p.max_attempts = Some(3));
            }),
            "attempt",
        ),
    ];
    for (name, mutate, needle) in &cases {
        let mut r = req("svc", "tx-bad", 0);
        mutate(&mut r);
        let err = c.enqueue_retry(r).await.expect_err(name);
        assert_eq!(err.code(), Code::InvalidArgument, "{name}: {err:?}");
        assert!(
            err.message().contains(needle),
            "{name}: {:?} lacks {needle:?}",
            err.message()
        );
    }
    // A batch over the item limit is refused whole.
    let err = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..6).map(|i| req("svc", &format!("b{i}"), 0)).collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("requests") && err.message().contains('5'),
        "{}",
        err.message()
    );
    // A message over the node's size limit (4 x the payload cap + 1 MiB) never reaches a
    // handler; it is still INVALID_ARGUMENT naming the payload and its cap, not tonic's
    // OUT_OF_RANGE, for one huge payload and for a batch too large as a whole.
    let mut huge = req("svc", "huge", 0);
    huge.payload = vec![b'x'; 2 << 20];
    let err = c.enqueue_retry(huge).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().starts_with("payload: ") && err.message().contains("1000 bytes"),
        "{}",
        err.message()
    );
    let err = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..4)
                .map(|i| {
                    let mut r = req("svc", &format!("big{i}"), 0);
                    r.payload = vec![b'x'; 400_000];
                    r
                })
                .collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("fewer items per call"),
        "{}",
        err.message()
    );
    // Get and cancel validate too.
    let err = c
        .get_retry(pb::GetRetryRequest {
            service: "bad service".into(),
            transaction_id: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    for table in DATA_TABLES {
        assert_eq!(
            n.count(table).await,
            0,
            "{table} must be empty after refused requests"
        );
    }
    n.finish().await;
}
