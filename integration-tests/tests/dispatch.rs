//! Dispatch against a real Cassandra: due retries reach subscribers no earlier than due,
//! acknowledgements resolve them, finished buckets disappear as partitions and the compactor
//! empties the directory; retries back off, exhaust into dead letters, expire and move to
//! another subscriber; a replayed bucket never redelivers a SUCCEEDED item.

use std::{collections::BTreeMap, time::Duration};

use rebound_integration_tests::{
    ack as harness_ack, ack_req, clock_now, dispatch_config, enqueue_req as req, eventually,
    next_delivery, subscribe, ts_ms, utc_ms, TestNode, DIRECTORY_TABLES,
};
use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use tonic::{transport::Channel, Code};

/// An ack of `d` with `outcome`, giving "boom" as the error.
async fn ack(
    ch: &Channel,
    d: &pb::Delivery,
    outcome: pb::AckOutcome,
) -> Result<pb::AckResponse, tonic::Status> {
    let r = pb::AckRequest {
        error: "boom".into(),
        ..ack_req(d, outcome)
    };
    harness_ack(ch, r).await
}

async fn directory_counts(n: &TestNode) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for t in DIRECTORY_TABLES {
        m.insert(*t, n.count(t).await);
    }
    m
}

#[tokio::test]
async fn delivers_when_due_then_empties_the_directory() {
    let cfg = dispatch_config("due");
    // Near midnight, so the day itself ends during the test and Tier 1 can be compacted.
    let start = utc_ms("2026-11-30 23:59:57.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    for i in 0..10 {
        c.enqueue_retry(req("svc", &format!("t{i}"), 1_500))
            .await
            .unwrap();
    }
    // In the same window as svc's.
    c.enqueue_retry(req("other", "o1", 1_500)).await.unwrap();
    let mut sub = subscribe(&n.channel, "svc", 100).await;
    // Due at 23:59:58.600, in window 23:59:58-23:59:59 (not readable by a scan before
    // 23:59:59.200): nothing before the due time, then every one from memory (the timer).
    clock.set(utc_ms("2026-11-30 23:59:58.550"));
    assert!(
        next_delivery(&mut sub, Duration::from_millis(800))
            .await
            .is_none(),
        "delivered before due"
    );
    clock.set(utc_ms("2026-11-30 23:59:58.650"));
    let mut seen = BTreeMap::new();
    while seen.len() < 10 {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("delivery");
        assert_eq!(d.service, "svc");
        assert_eq!(d.attempt, 2);
        assert_eq!(d.payload, d.transaction_id.as_bytes());
        assert_eq!(
            ts_ms(d.due_time.as_ref().unwrap()),
            utc_ms("2026-11-30 23:59:58.600")
        );
        assert!(
            seen.insert(d.transaction_id.clone(), d.clone()).is_none(),
            "delivered twice"
        );
    }
    for d in seen.values() {
        ack(&n.channel, d, pb::AckOutcome::Succeeded).await.unwrap();
    }
    // The scan of the window finds them resolved, and deletes their buckets.
    clock.set(utc_ms("2026-12-01 00:00:00.500"));
    // The other service has no subscriber: its instance stays, which holds its window open.
    eventually(
        Duration::from_secs(15),
        "svc's buckets to be deleted",
        // The Tier-4 row goes right after the Tier-5 partition: wait for both.
        || async {
            n.count("retry_transactions_by_bucket").await == 1
                && n.count("buckets_by_instance").await == 1
        },
    )
    .await;
    assert_eq!(n.count("buckets_by_instance").await, 1);
    assert_eq!(n.count("instances_by_window").await, 1);
    assert_eq!(
        n.count("windows_by_day").await,
        1,
        "Gate 1 keeps the window"
    );
    // Its executor arrives; everything drains and Node-0 compacts the window and the day.
    let mut other = subscribe(&n.channel, "other", 1).await;
    let d = next_delivery(&mut other, Duration::from_secs(10))
        .await
        .expect("other's delivery");
    ack(&n.channel, &d, pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    clock.set(utc_ms("2026-12-01 00:00:02.000"));
    eventually(Duration::from_secs(15), "an empty directory", || async {
        directory_counts(&n).await.values().all(|c| *c == 0)
    })
    .await;
    assert_eq!(n.count("window_low_water").await, 0);
    let r = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "t3".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, pb::RetryStatus::Succeeded as i32);
    // An ack for a finished delivery changes nothing.
    let again = ack(
        &n.channel,
        seen.values().next().unwrap(),
        pb::AckOutcome::Retry,
    )
    .await
    .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    n.finish().await;
}

#[tokio::test]
async fn retry_backs_off_then_succeeds_and_exhaustion_dead_letters() {
    let cfg = dispatch_config("retry");
    let start = utc_ms("2026-11-30 10:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    c.enqueue_retry(req("svc", "flaky", 0)).await.unwrap();
    let mut limited = req("svc", "doomed", 0);
    limited.policy = Some(pb::RetryPolicy {
        max_attempts: Some(3),
        ..Default::default()
    });
    c.enqueue_retry(limited).await.unwrap();
    c.enqueue_retry(req("svc", "fatal", 0)).await.unwrap();
    let mut sub = subscribe(&n.channel, "svc", 10).await;
    clock.set(start + 2_500);
    let mut got = BTreeMap::new();
    for _ in 0..3 {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("delivery");
        got.insert(d.transaction_id.clone(), d);
    }
    // flaky: RETRY with retry_after 5 s -> rescheduled, attempt 2 done.
    let r = ExecutorServiceClient::new(n.channel.clone())
        .ack(pb::AckRequest {
            delivery_id: got["flaky"].delivery_id.clone(),
            outcome: pb::AckOutcome::Retry as i32,
            retry_after: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            error: "timeout".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let next_due = ts_ms(r.next_due_time.as_ref().unwrap());
    assert!(next_due >= start + 2_000 + 5_000, "next due {next_due}");
    assert!(!r.dead_lettered);
    // doomed: attempt 2 of 3 fails -> rescheduled; attempt 3 fails -> dead.
    let r = ack(&n.channel, &got["doomed"], pb::AckOutcome::Retry)
        .await
        .unwrap();
    assert!(!r.dead_lettered);
    // fatal: FAILED -> dead at once.
    let r = ack(&n.channel, &got["fatal"], pb::AckOutcome::Failed)
        .await
        .unwrap();
    assert!(r.dead_lettered);
    // Nothing more is due until the clock moves.
    assert!(next_delivery(&mut sub, Duration::from_millis(500))
        .await
        .is_none());
    clock.set(start + 10_000);
    let mut second = BTreeMap::new();
    for _ in 0..2 {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("redelivery");
        second.insert(d.transaction_id.clone(), d);
    }
    assert_eq!(second["flaky"].attempt, 3);
    assert_eq!(second["flaky"].last_error, "timeout");
    ack(&n.channel, &second["flaky"], pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    let r = ack(&n.channel, &second["doomed"], pb::AckOutcome::Retry)
        .await
        .unwrap();
    assert!(
        r.dead_lettered,
        "third attempt of three exhausts the policy"
    );

    let status = |t: &'static str| {
        let mut c = n.client.clone();
        async move {
            c.get_retry(pb::GetRetryRequest {
                service: "svc".into(),
                transaction_id: t.into(),
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    assert_eq!(
        status("flaky").await.status,
        pb::RetryStatus::Succeeded as i32
    );
    let doomed = status("doomed").await;
    assert_eq!(doomed.status, pb::RetryStatus::Dead as i32);
    assert_eq!(doomed.attempt, 3);
    assert_eq!(status("fatal").await.status, pb::RetryStatus::Dead as i32);
    let letters = n.rows("dead_letters", "transaction_id, attempt").await;
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert!(
        letters
            .iter()
            .any(|l| l.contains("doomed") && l.contains("\"attempt\": 3")),
        "{letters:?}"
    );
    assert!(letters.iter().any(|l| l.contains("fatal")), "{letters:?}");
    n.finish().await;
}

#[tokio::test]
async fn flow_control_sharing_and_redelivery_after_the_deadline() {
    let cfg = dispatch_config("flow");
    let start = utc_ms("2026-11-30 11:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    for i in 0..12 {
        let mut r = req("svc", &format!("t{i}"), 0);
        r.policy = Some(pb::RetryPolicy {
            ack_timeout: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            ..Default::default()
        });
        c.enqueue_retry(r).await.unwrap();
    }
    let mut a = subscribe(&n.channel, "svc", 3).await;
    let mut b = subscribe(&n.channel, "svc", 3).await;
    clock.set(start + 2_500);
    // Each stream gets exactly its max_in_flight and no more while nothing is acknowledged.
    let mut got_a = Vec::new();
    let mut got_b = Vec::new();
    while let Some(d) = next_delivery(&mut a, Duration::from_millis(1_500)).await {
        got_a.push(d);
    }
    while let Some(d) = next_delivery(&mut b, Duration::from_millis(300)).await {
        got_b.push(d);
    }
    assert_eq!(
        (got_a.len(), got_b.len()),
        (3, 3),
        "max_in_flight respected and load shared"
    );
    // An ack frees one slot: exactly one more arrives on that stream.
    ack(&n.channel, &got_a[0], pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    let more = next_delivery(&mut a, Duration::from_secs(5))
        .await
        .expect("one more");
    assert!(next_delivery(&mut a, Duration::from_millis(500))
        .await
        .is_none());
    // Extending a deadline keeps that delivery; the rest of b's expire and move to a.
    let ext = ExecutorServiceClient::new(n.channel.clone())
        .extend_deadline(pb::ExtendDeadlineRequest {
            delivery_id: got_b[0].delivery_id.clone(),
            extension: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ts_ms(ext.ack_deadline.as_ref().unwrap()) >= start + 62_000);
    // A malformed id is refused by name; an unknown one is not in flight.
    for (id, code) in [
        (String::new(), Code::InvalidArgument),
        ("x".repeat(129), Code::InvalidArgument),
        ("no-such-delivery".to_string(), Code::NotFound),
    ] {
        let e = ExecutorServiceClient::new(n.channel.clone())
            .extend_deadline(pb::ExtendDeadlineRequest {
                delivery_id: id,
                extension: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        if code == Code::InvalidArgument {
            assert!(e.message().contains("delivery_id"), "{e}");
        }
    }
    for d in got_a[1..].iter().chain(std::iter::once(&more)) {
        ack(&n.channel, d, pb::AckOutcome::Succeeded).await.unwrap();
    }
    clock.set(start + 8_000); // past b's 5 s deadlines (delivered at +2 s)
                              // Expired deliveries come again, preferably on the other stream.
    let mut redelivered = Vec::new();
    let mut moved_to_a = 0;
    loop {
        let mut any = false;
        for (name, stream) in [("a", &mut a), ("b", &mut b)] {
            while let Some(d) = next_delivery(stream, Duration::from_millis(700)).await {
                any = true;
                if got_b[1..]
                    .iter()
                    .any(|x| x.transaction_id == d.transaction_id)
                {
                    redelivered.push(d.transaction_id.clone());
                    moved_to_a += usize::from(name == "a");
                }
                if let Err(e) = ack(&n.channel, &d, pb::AckOutcome::Succeeded).await {
                    // Read after its deadline had passed: it was redelivered since.
                    assert_eq!(e.code(), Code::NotFound);
                    assert!(
                        ts_ms(d.ack_deadline.as_ref().unwrap()) <= start + 8_000,
                        "{e:?}"
                    );
                }
            }
        }
        if !any {
            break;
        }
    }
    redelivered.sort();
    redelivered.dedup();
    let mut expected: Vec<String> = got_b[1..]
        .iter()
        .map(|d| d.transaction_id.clone())
        .collect();
    expected.sort();
    assert_eq!(
        redelivered, expected,
        "expired deliveries are delivered again"
    );
    assert!(
        moved_to_a > 0,
        "an expired delivery moves to the other subscriber"
    );
    // The expired delivery ids are dead; the extended one is still valid.
    let stale = ack(&n.channel, &got_b[1], pb::AckOutcome::Succeeded)
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::NotFound);
    ack(&n.channel, &got_b[0], pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    // Bad input on the executor API.
    let mut ex = ExecutorServiceClient::new(n.channel.clone());
    let err = ex
        .subscribe(pb::SubscribeRequest {
            service: "svc".into(),
            executor_id: String::new(),
            max_in_flight: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("max_in_flight"));
    let err = ex
        .ack(pb::AckRequest {
            delivery_id: "x".into(),
            outcome: 0,
            retry_after: None,
            error: String::new(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("outcome"));
    n.finish().await;
}

#[tokio::test]
async fn a_closed_stream_hands_its_items_to_another() {
    let cfg = dispatch_config("closed");
    let start = utc_ms("2026-11-30 12:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    for i in 0..4 {
        c.enqueue_retry(req("svc", &format!("t{i}"), 0))
            .await
            .unwrap();
    }
    let mut a = subscribe(&n.channel, "svc", 10).await;
    clock.set(start + 2_500);
    let mut first = Vec::new();
    while let Some(d) = next_delivery(&mut a, Duration::from_millis(1_500)).await {
        first.push(d.transaction_id);
    }
    assert_eq!(first.len(), 4);
    drop(a);
    let mut b = subscribe(&n.channel, "svc", 10).await;
    let mut second = Vec::new();
    while let Some(d) = next_delivery(&mut b, Duration::from_millis(2_000)).await {
        second.push(d.transaction_id.clone());
        ack(&n.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
    }
    first.sort();
    second.sort();
    assert_eq!(first, second);
    n.finish().await;
}

#[tokio::test]
async fn restart_mid_bucket_delivers_the_rest_and_never_a_succeeded_item() {
    let mut cfg = dispatch_config("crash");
    cfg.bucket_size = 50;
    cfg.lanes = 1;
    let start = utc_ms("2026-11-30 13:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg.clone(), start).await;
    let mut c = n.client.clone();
    for i in 0..20 {
        c.enqueue_retry(req("svc", &format!("t{i:02}"), 0))
            .await
            .unwrap();
    }
    let mut sub = subscribe(&n.channel, "svc", 20).await;
    clock.set(start + 2_500);
    let mut acked = Vec::new();
    let mut unacked = Vec::new();
    for k in 0..20 {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("delivery");
        if k % 2 == 0 {
            ack(&n.channel, &d, pb::AckOutcome::Succeeded)
                .await
                .unwrap();
            acked.push(d.transaction_id);
        } else {
            unacked.push(d.transaction_id);
        }
    }
    // The node goes away mid-bucket: its bucket must stay whole.
    let keyspace = n.config.keyspace.clone();
    let mut n = n;
    n.node.take().unwrap().shutdown().await.unwrap();
    assert_eq!(
        n.count("retry_transactions_by_bucket").await,
        20,
        "an unfinished bucket is kept"
    );
    // A new process replays the bucket: only the unacknowledged half comes back.
    let mut cfg2 = cfg.clone();
    cfg2.keyspace = keyspace;
    let (n2, clock2) = TestNode::with_manual_clock(cfg2, start + 3_000).await;
    let mut sub2 = subscribe(&n2.channel, "svc", 50).await;
    clock2.set(start + 3_000);
    let mut replayed = Vec::new();
    while let Some(d) = next_delivery(&mut sub2, Duration::from_secs(3)).await {
        assert!(
            !acked.contains(&d.transaction_id),
            "{} succeeded and was delivered again",
            d.transaction_id
        );
        ack(&n2.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
        replayed.push(d.transaction_id);
    }
    replayed.sort();
    unacked.sort();
    assert_eq!(replayed, unacked);
    eventually(
        Duration::from_secs(10),
        "the bucket to be deleted",
        || async { n2.count("retry_transactions_by_bucket").await == 0 },
    )
    .await;
    n2.finish().await;
    let _ = n; // keyspace already dropped by n2
}

#[tokio::test]
async fn compactor_refuses_windows_with_instances_or_not_ended() {
    let mut cfg = dispatch_config("gates");
    cfg.compaction_interval_ms = 60_000; // driven by hand below
    let start = utc_ms("2026-11-30 14:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    c.enqueue_retry(req("nobody-listens", "x", 0))
        .await
        .unwrap(); // window +1
    c.enqueue_retry(req("nobody-listens", "y", 4_000))
        .await
        .unwrap(); // window +4
    let compactor = n.node.as_ref().unwrap().engine().compactor().clone();
    // Now: both windows are in the future (Gate 2) and have instances (Gate 1).
    n.wait_for_compactor_lease(clock_now(&clock)).await;
    let report = compactor.compact().await.unwrap();
    assert!(report.windows_deleted.is_empty(), "{report:?}");
    // Later: the first window has ended but still has its instance (no subscriber).
    clock.set(start + 3_000);
    n.wait_for_compactor_lease(clock_now(&clock)).await;
    let report = compactor.compact().await.unwrap();
    assert!(report.windows_deleted.is_empty(), "{report:?}");
    assert_eq!(report.blocked_by_instances.len(), 1, "{report:?}");
    assert_eq!(n.count("windows_by_day").await, 2);
    // An empty window that has not ended is kept too (Gate 2).
    n.cql
        .query_unpaged(
            format!(
                "INSERT INTO {}.windows_by_day (region, cluster, day, window) VALUES ('local', 'default', '2026-11-30', 50450)",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap();
    n.wait_for_compactor_lease(clock_now(&clock)).await;
    let report = compactor.compact().await.unwrap();
    assert!(report.windows_deleted.is_empty(), "{report:?}");
    // Once drained and ended, both go.
    let mut sub = subscribe(&n.channel, "nobody-listens", 5).await;
    clock.set(start + 8_000);
    for _ in 0..2 {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("delivery");
        ack(&n.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(10), "instances gone", || async {
        n.count("instances_by_window").await == 0
    })
    .await;
    n.wait_for_compactor_lease(clock_now(&clock)).await;
    let report = compactor.compact().await.unwrap();
    assert_eq!(report.windows_deleted.len(), 2, "{report:?}");
    assert_eq!(
        n.count("windows_by_day").await,
        1,
        "the future window stays"
    );
    n.finish().await;
}

#[tokio::test]
async fn a_backlog_over_three_past_days_drains_oldest_day_first() {
    let mut cfg = dispatch_config("backlog");
    cfg.max_delay_seconds = 10 * 86_400;
    let d0 = utc_ms("2026-11-27 09:00:00.000");
    let (n, clock) = TestNode::with_manual_clock(cfg, d0).await;
    let mut c = n.client.clone();
    for day in 0..3 {
        clock.set(d0 + day * 86_400_000);
        for i in 0..4 {
            c.enqueue_retry(req("svc", &format!("d{day}-{i}"), 0))
                .await
                .unwrap();
        }
    }
    // The node was "down" for days; now it is three days later.
    clock.set(d0 + 3 * 86_400_000);
    let mut sub = subscribe(&n.channel, "svc", 1).await;
    let mut order = Vec::new();
    while order.len() < 12 {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("delivery");
        order.push(d.transaction_id[1..2].parse::<u32>().unwrap());
        ack(&n.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
    }
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "days drained out of order: {order:?}");
    eventually(
        Duration::from_secs(15),
        "the old days to be compacted",
        || async { n.count("days_by_year").await == 0 },
    )
    .await;
    n.finish().await;
}

#[tokio::test]
async fn a_late_state_write_is_not_lost_and_an_old_orphan_is_dropped() {
    let cfg = dispatch_config("orphan");
    let start = utc_ms("2026-11-30 15:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    c.enqueue_retry(req("svc", "real", 0)).await.unwrap();
    let loc = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "real".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .location
        .unwrap();
    // Two pointers in the same bucket whose state rows are missing: one written just now (its
    // state write may still land), one written long ago (its enqueue failed).
    for (txid, at) in [("ghost", start), ("old-ghost", start - 600_000)] {
        n.cql
            .query_unpaged(
                format!(
                    "INSERT INTO {}.retry_transactions_by_bucket (region, cluster, day, window, service, \
                     instance, bucket, transaction_id, generation, attempt, enqueued_at) \
                     VALUES ('local', 'default', ?, ?, 'svc', ?, ?, ?, 42, 1, ?)",
                    n.ks()
                ),
                (
                    chrono::NaiveDate::parse_from_str(&loc.day, "%Y-%m-%d").unwrap(),
                    loc.window as i32,
                    &loc.instance,
                    loc.bucket as i32,
                    txid,
                    scylla::value::CqlTimestamp(at),
                ),
            )
            .await
            .unwrap();
    }
    let mut sub = subscribe(&n.channel, "svc", 10).await;
    clock.set(start + 2_500);
    let d = next_delivery(&mut sub, Duration::from_secs(10))
        .await
        .expect("delivery");
    assert_eq!(d.transaction_id, "real");
    ack(&n.channel, &d, pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        n.count("retry_transactions_by_bucket").await,
        3,
        "a young orphan keeps its bucket"
    );
    // The late state row lands: the pointer is live after all and is delivered.
    n.cql
        .query_unpaged(
            format!(
                "INSERT INTO {}.transactions (region, cluster, service, transaction_id, status, generation, \
                 attempt, payload, max_attempts, ack_timeout_ms, first_enqueued_at, due_at) \
                 VALUES ('local', 'default', 'svc', 'ghost', 'SCHEDULED', 42, 1, 0x01, 5, 30000, ?, ?)",
                n.ks()
            ),
            (scylla::value::CqlTimestamp(start), scylla::value::CqlTimestamp(start + 2_000)),
        )
        .await
        .unwrap();
    let d = next_delivery(&mut sub, Duration::from_secs(10))
        .await
        .expect("late delivery");
    assert_eq!(d.transaction_id, "ghost");
    ack(&n.channel, &d, pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    // Past the grace, the old orphan is skipped and the bucket goes.
    clock.set(start + 10_000);
    eventually(
        Duration::from_secs(10),
        "the bucket to be deleted",
        || async { n.count("retry_transactions_by_bucket").await == 0 },
    )
    .await;
    assert!(next_delivery(&mut sub, Duration::from_millis(300))
        .await
        .is_none());
    n.finish().await;
}

#[tokio::test]
async fn max_retry_duration_stops_retries_before_max_attempts() {
    let cfg = dispatch_config("duration");
    let start = utc_ms("2026-11-30 16:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    let mut r = req("svc", "slow-burn", 0);
    r.policy = Some(pb::RetryPolicy {
        max_attempts: Some(100),
        max_retry_duration: Some(prost_types::Duration {
            seconds: 4,
            nanos: 0,
        }),
        ..Default::default()
    });
    c.enqueue_retry(r).await.unwrap();
    let mut sub = subscribe(&n.channel, "svc", 5).await;
    clock.set(start + 2_500);
    let d = next_delivery(&mut sub, Duration::from_secs(10))
        .await
        .expect("delivery");
    // The next attempt would start 5 s from now, past the 4 s budget: dead now, not later.
    let resp = ExecutorServiceClient::new(n.channel.clone())
        .ack(pb::AckRequest {
            delivery_id: d.delivery_id,
            outcome: pb::AckOutcome::Retry as i32,
            retry_after: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            error: "still failing".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.dead_lettered);
    let retry = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "slow-burn".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retry.status, pb::RetryStatus::Dead as i32);
    assert!(
        retry.last_error.contains("max_retry_duration"),
        "{}",
        retry.last_error
    );
    assert_eq!(n.count("dead_letters").await, 1);
    n.finish().await;
}

/// A cancel and an ack of the same transaction on one node are serialised, so neither undoes
/// the other: 200 RETRY acks race 200 cancels of the same retries. Whichever comes first, the
/// cancel answers `cancelled` and the retry ends CANCELLED; the ack either recorded its
/// attempt (before the cancel) or was refused as stale (after it) and changed nothing.
#[tokio::test]
async fn a_cancel_racing_an_ack_is_never_undone() {
    const N: usize = 200;
    let cfg = dispatch_config("cancelack");
    let (n, clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 10:00:00.100")).await;
    let mut c = n.client.clone();
    let requests = (0..N).map(|i| req("svc", &format!("t{i}"), 0)).collect();
    c.enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
        .await
        .unwrap();
    let mut sub = subscribe(&n.channel, "svc", N as u32).await;
    clock.advance(3_000);
    let mut deliveries = Vec::new();
    while deliveries.len() < N {
        let d = next_delivery(&mut sub, Duration::from_secs(10))
            .await
            .expect("delivery");
        deliveries.push(d);
    }
    let races: Vec<_> = deliveries
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let (ch, mut c) = (n.channel.clone(), n.client.clone());
            tokio::spawn(async move {
                let cancel = pb::CancelRetryRequest {
                    service: "svc".into(),
                    transaction_id: d.transaction_id.clone(),
                };
                // Half the races send the cancel first.
                let (acked, cancelled) = if i % 2 == 0 {
                    tokio::join!(ack(&ch, &d, pb::AckOutcome::Retry), c.cancel_retry(cancel))
                } else {
                    let (k, a) =
                        tokio::join!(c.cancel_retry(cancel), ack(&ch, &d, pb::AckOutcome::Retry));
                    (a, k)
                };
                (d.transaction_id, acked, cancelled.unwrap().into_inner())
            })
        })
        .collect();
    let (mut acked_first, mut stale) = (0, 0);
    for race in races {
        let (tx, acked, cancelled) = race.await.unwrap();
        match &acked {
            Ok(_) => acked_first += 1,
            Err(e) if e.code() == Code::FailedPrecondition => stale += 1,
            Err(e) => panic!("ack of {tx}: {e}"),
        }
        assert!(cancelled.cancelled, "cancel of {tx} found it finished");
        let retry = c
            .get_retry(pb::GetRetryRequest {
                service: "svc".into(),
                transaction_id: tx.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            retry.status,
            pb::RetryStatus::Cancelled as i32,
            "{tx}: the cancel answered cancelled, then the ack ({acked:?}) wrote it back"
        );
    }
    eprintln!("{acked_first} acks came first, {stale} were refused as stale");
    n.finish().await;
}

/// Memory stays bounded whatever executors ask for (server/engine/src/dispatch/hub.rs; docs/operations.md,
/// "Memory per node"). A node refuses streams beyond `max_subscribers` with RESOURCE_EXHAUSTED, and
/// holds at most `max_in_flight_bytes` of unacknowledged payload: further deliveries wait for acks
/// even though the stream asked for more.
#[tokio::test]
async fn streams_and_bytes_in_flight_are_bounded_node_wide() {
    let mut cfg = dispatch_config("bounds");
    cfg.max_subscribers = 2;
    cfg.max_in_flight_bytes = 1 << 20;
    let start = utc_ms("2026-11-30 12:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    // 200 KiB each: five fit in the 1 MiB budget, a sixth does not.
    for i in 0..8 {
        let mut r = req("svc", &format!("t{i}"), 0);
        r.payload = vec![b'p'; 200 << 10];
        c.enqueue_retry(r).await.unwrap();
    }
    let open = |service: &'static str| {
        let ch = n.channel.clone();
        async move {
            ExecutorServiceClient::new(ch)
                .subscribe(pb::SubscribeRequest {
                    service: service.into(),
                    executor_id: "test".into(),
                    max_in_flight: 10,
                })
                .await
                .map(|r| r.into_inner())
        }
    };
    let mut a = open("svc").await.unwrap();
    let b = open("other").await.unwrap();
    let e = open("third").await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("REBOUND_MAX_SUBSCRIBERS"), "{e:?}");

    clock.set(start + 2_500);
    let mut held = Vec::new();
    while let Some(d) = next_delivery(&mut a, Duration::from_millis(1_500)).await {
        assert_eq!(d.payload.len(), 200 << 10);
        held.push(d);
    }
    assert_eq!(
        held.len(),
        5,
        "the byte budget holds 5 of the 8 due deliveries"
    );
    // Two acks make room for two more, not for three.
    let mut seen: Vec<String> = held.iter().map(|d| d.transaction_id.clone()).collect();
    for d in held.drain(..2) {
        ack(&n.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
    }
    while let Some(d) = next_delivery(&mut a, Duration::from_millis(1_500)).await {
        seen.push(d.transaction_id.clone());
        held.push(d);
    }
    assert_eq!(held.len(), 5, "still at the budget after two acks");
    assert_eq!(seen.len(), 7);
    for d in std::mem::take(&mut held) {
        ack(&n.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
    }
    let last = next_delivery(&mut a, Duration::from_secs(10))
        .await
        .expect("the eighth delivery once the budget frees");
    seen.push(last.transaction_id.clone());
    ack(&n.channel, &last, pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    seen.sort();
    let deliveries = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), 8, "every retry delivered: {seen:?}");
    assert_eq!(deliveries, 8, "and each once");

    // A closed stream frees its place.
    drop(b);
    let started = std::time::Instant::now();
    let third = loop {
        match open("third").await {
            Ok(s) => break s,
            Err(e) => {
                assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "no stream slot 10 s after a close"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    drop(third);
    n.finish().await;
}

/// A node whose own clock runs 5 s ahead still never delivers early: it runs on Cassandra's
/// clock (`REBOUND_CLOCK_SYNC`). Without the sync it would place the retry from its fast
/// clock and read windows 5 s early, delivering a retry due in 3 s about 2 s before it is due.
#[tokio::test]
async fn a_node_with_a_fast_clock_runs_on_cassandras_time() {
    use rebound_store::clock::{Clock, SystemClock};
    #[derive(Debug)]
    struct Fast(i64);
    impl Clock for Fast {
        fn now_ms(&self) -> i64 {
            SystemClock.now_ms() + self.0
        }
    }
    let mut cfg = dispatch_config("skew");
    cfg.clock_sync = true;
    let n = TestNode::start(cfg, std::sync::Arc::new(Fast(5_000))).await;
    let mut s = subscribe(&n.channel, "svc", 10).await;
    let due = SystemClock.now_ms() + 3_000;
    let mut r = req("svc", "t", 0);
    r.schedule = Some(pb::enqueue_retry_request::Schedule::DueTime(
        prost_types::Timestamp {
            seconds: due / 1000,
            nanos: ((due % 1000) * 1_000_000) as i32,
        },
    ));
    let resp = n
        .client
        .clone()
        .enqueue_retry(r)
        .await
        .unwrap()
        .into_inner();
    let window_end = ts_ms(resp.due_time.as_ref().unwrap());
    assert!(
        (due..due + 1_500).contains(&window_end),
        "due {due}, placed in the window ending {window_end}: not on Cassandra's time"
    );
    let d = next_delivery(&mut s, Duration::from_secs(15))
        .await
        .expect("the retry is delivered");
    let delivered = SystemClock.now_ms();
    assert!(
        delivered >= due,
        "delivered {} ms before it was due",
        due - delivered
    );
    ack(&n.channel, &d, pb::AckOutcome::Succeeded)
        .await
        .unwrap();
    // Operators see the correction in GetStats.
    let stats = rebound_proto::v1::admin_service_client::AdminServiceClient::new(n.channel.clone())
        .get_stats(pb::GetStatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let offset = stats.nodes[0]
        .clock_offset_ms
        .expect("an offset is reported");
    assert!((-5_300..=-4_700).contains(&offset), "offset {offset} ms");
    n.finish().await;
}

/// Lookback without a horizon (issue 14, defect 6): retries left 400 days ago (two calendar
/// years back) are found and delivered, and the directory is compacted down to today's day.
#[tokio::test]
async fn a_backlog_400_days_old_is_found_drained_and_compacted() {
    let start = utc_ms("2026-12-01 07:00:00.000");
    let (n, clock) = TestNode::with_manual_clock(dispatch_config("lookback"), start).await;
    let mut c = n.client.clone();
    for i in 0..5 {
        c.enqueue_retry(req("svc", &format!("old-{i}"), 0))
            .await
            .unwrap();
    }
    clock.advance(400 * 86_400_000);
    n.wait_for_compactor_lease(start + 400 * 86_400_000).await;
    let mut s = subscribe(&n.channel, "svc", 10).await;
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 5 {
        let d = next_delivery(&mut s, Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("only {seen:?} of the 400-day-old retries delivered"));
        ack(&n.channel, &d, pb::AckOutcome::Succeeded)
            .await
            .unwrap();
        seen.insert(d.transaction_id);
    }
    eventually(
        Duration::from_secs(20),
        "old directory compacted",
        || async { n.count("windows_by_day").await == 0 && n.count("days_by_year").await == 0 },
    )
    .await;
    n.finish().await;
}
