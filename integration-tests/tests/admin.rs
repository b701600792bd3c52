//! Issue 5 against a real node and Cassandra: service policies (non-retryable classes,
//! explicit unlimited attempts), snooze, pause/resume, purge, limits, fairness, dead letters
//! (list, page, filter, redrive, purge), GetStats and InspectWindow; every bad input is
//! refused with INVALID_ARGUMENT naming the field, and changes nothing.

use std::{collections::BTreeSet, time::Duration};

use rebound_integration_tests::{
    ack, ack_req, assert_invalid as invalid, dispatch_config, enqueue_req as req, eventually,
    get_retry, next_delivery, secs, subscribe, ts, ts_ms, utc_ms, TestNode,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient,
};
use tonic::{transport::Channel, Code};

fn admin(n: &TestNode) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(n.channel.clone())
}

async fn deliveries(
    sub: &mut tonic::Streaming<pb::Delivery>,
    count: usize,
    within: Duration,
) -> Vec<pb::Delivery> {
    let mut out = Vec::new();
    while out.len() < count {
        match next_delivery(sub, within).await {
            Some(d) => out.push(d),
            None => panic!("only {} of {count} deliveries arrived", out.len()),
        }
    }
    out
}

#[tokio::test]
async fn service_policy_is_stored_listed_and_applied_to_new_enqueues() {
    let n = TestNode::with_system_clock(dispatch_config("policy")).await;
    let mut a = admin(&n);
    let policy = pb::RetryPolicy {
        max_attempts: Some(2),
        initial_backoff: Some(secs(3)),
        non_retryable_error_classes: vec!["http.404".into(), "auth/denied".into()],
        ..Default::default()
    };
    // Bad input first: each is refused, and nothing is stored.
    let bad = |p: pb::RetryPolicy| pb::SetServicePolicyRequest {
        service: "payments".into(),
        policy: Some(p),
    };
    invalid(
        a.set_service_policy(bad(pb::RetryPolicy {
            jitter: Some(2.0),
            ..Default::default()
        }))
        .await,
        "policy.jitter",
    );
    invalid(
        a.set_service_policy(bad(pb::RetryPolicy {
            max_attempts: Some(3),
            unlimited_attempts: Some(true),
            ..Default::default()
        }))
        .await,
        "policy.max_attempts",
    );
    invalid(
        a.set_service_policy(bad(pb::RetryPolicy {
            non_retryable_error_classes: vec!["has space".into()],
            ..Default::default()
        }))
        .await,
        "policy.non_retryable_error_classes",
    );
    invalid(
        a.set_service_policy(bad(pb::RetryPolicy {
            max_backoff: Some(secs(1)),
            initial_backoff: Some(secs(5)),
            ..Default::default()
        }))
        .await,
        "policy.max_backoff",
    );
    invalid(
        a.set_service_policy(pb::SetServicePolicyRequest {
            service: "bad name".into(),
            policy: Some(policy.clone()),
        })
        .await,
        "service",
    );
    let e = a
        .get_service(pb::GetServiceRequest {
            service: "payments".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // Every call about one service's data answers NOT_FOUND for a service that was never
    // enqueued to nor configured (a typo must not read as an empty service) and creates none.
    let unknown = |r: Result<_, tonic::Status>, call: &str| {
        let e = r
            .err()
            .unwrap_or_else(|| panic!("{call} on an unknown service succeeded"));
        assert_eq!(e.code(), Code::NotFound, "{call}: {e:?}");
        assert!(e.message().contains("\"payments\""), "{call}: {e:?}");
    };
    let svc = || "payments".to_string();
    unknown(
        a.get_stats(pb::GetStatsRequest {
            service: svc(),
            ..Default::default()
        })
        .await
        .map(drop),
        "GetStats",
    );
    unknown(
        a.list_dead_letters(pb::ListDeadLettersRequest {
            service: svc(),
            ..Default::default()
        })
        .await
        .map(drop),
        "ListDeadLetters",
    );
    unknown(
        a.redrive_dead_letters(pb::RedriveDeadLettersRequest {
            service: svc(),
            ..Default::default()
        })
        .await
        .map(drop),
        "RedriveDeadLetters",
    );
    unknown(
        a.purge_dead_letters(pb::PurgeDeadLettersRequest {
            service: svc(),
            ..Default::default()
        })
        .await
        .map(drop),
        "PurgeDeadLetters",
    );
    unknown(
        a.purge_service(pb::PurgeServiceRequest {
            service: svc(),
            ..Default::default()
        })
        .await
        .map(drop),
        "PurgeService",
    );
    // A bad name is still INVALID_ARGUMENT, checked first.
    invalid(
        a.get_stats(pb::GetStatsRequest {
            service: "bad name".into(),
            ..Default::default()
        })
        .await,
        "service",
    );
    assert!(a
        .list_services(pb::ListServicesRequest {})
        .await
        .unwrap()
        .into_inner()
        .services
        .is_empty());

    let set = a
        .set_service_policy(pb::SetServicePolicyRequest {
            service: "payments".into(),
            policy: Some(policy.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.policy.as_ref(), Some(&policy));
    let eff = set.effective_policy.unwrap();
    assert_eq!(eff.max_attempts, Some(2));
    assert_eq!(eff.multiplier, Some(2.0), "node default fills the rest");

    // Enqueue without a policy: the service's. With one: its fields win, the rest stays.
    let mut c = n.client.clone();
    c.enqueue_retry(req("payments", "p1", 5_000)).await.unwrap();
    let mut over = req("payments", "p2", 5_000);
    over.policy = Some(pb::RetryPolicy {
        max_attempts: Some(4),
        ..Default::default()
    });
    c.enqueue_retry(over).await.unwrap();
    let mut unlimited = req("payments", "p3", 5_000);
    unlimited.policy = Some(pb::RetryPolicy {
        unlimited_attempts: Some(true),
        max_retry_duration: Some(secs(3600)),
        ..Default::default()
    });
    c.enqueue_retry(unlimited).await.unwrap();
    c.enqueue_retry(req("orders", "o1", 5_000)).await.unwrap();

    let p1 = get_retry(&n.channel, "payments", "p1")
        .await
        .policy
        .unwrap();
    assert_eq!(p1.max_attempts, Some(2));
    assert_eq!(p1.initial_backoff, Some(secs(3)));
    assert_eq!(
        p1.non_retryable_error_classes,
        vec!["http.404".to_string(), "auth/denied".to_string()]
    );
    let p2 = get_retry(&n.channel, "payments", "p2")
        .await
        .policy
        .unwrap();
    assert_eq!(p2.max_attempts, Some(4));
    assert_eq!(p2.initial_backoff, Some(secs(3)));
    let p3 = get_retry(&n.channel, "payments", "p3")
        .await
        .policy
        .unwrap();
    assert_eq!(p3.unlimited_attempts, Some(true));
    assert_eq!(p3.max_attempts, None);
    let o1 = get_retry(&n.channel, "orders", "o1").await.policy.unwrap();
    assert_eq!(
        o1.max_attempts,
        Some(5),
        "another service keeps the default"
    );
    assert!(o1.non_retryable_error_classes.is_empty());

    let listed = a
        .list_services(pb::ListServicesRequest {})
        .await
        .unwrap()
        .into_inner()
        .services;
    let names: Vec<&str> = listed.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(names, ["orders", "payments"], "enqueues register services");
    let payments = &listed[1];
    assert_eq!(payments.policy.as_ref(), Some(&policy));
    assert!(!payments.paused);
    let got = a
        .get_service(pb::GetServiceRequest {
            service: "payments".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&got, payments);
    n.finish().await;
}

#[tokio::test]
async fn non_retryable_classes_dead_letter_and_snooze_uses_no_attempt() {
    let start = utc_ms("2026-11-30 10:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(dispatch_config("snooze"), start).await;
    admin(&n)
        .set_service_policy(pb::SetServicePolicyRequest {
            service: "svc".into(),
            policy: Some(pb::RetryPolicy {
                max_attempts: Some(3),
                initial_backoff: Some(secs(4)),
                max_backoff: Some(secs(60)),
                jitter: Some(0.0),
                non_retryable_error_classes: vec!["http.404".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let mut c = n.client.clone();
    for id in ["gone", "busy"] {
        let mut r = req("svc", id, 0);
        r.attempt = 0;
        c.enqueue_retry(r).await.unwrap();
    }
    let mut sub = subscribe(&n.channel, "svc", 10).await;
    clock.set(start + 2_500);
    let got = deliveries(&mut sub, 2, Duration::from_secs(10)).await;
    let by = |id: &str| got.iter().find(|d| d.transaction_id == id).unwrap().clone();
    let (gone, busy) = (by("gone"), by("busy"));

    // Bad acks are refused and leave the delivery in flight.
    let mut bad = ack_req(&busy, pb::AckOutcome::Succeeded);
    bad.snooze = true;
    invalid(ack(&n.channel, bad).await, "snooze");
    let mut bad = ack_req(&busy, pb::AckOutcome::Retry);
    bad.snooze = true;
    invalid(ack(&n.channel, bad).await, "retry_after");
    let mut bad = ack_req(&busy, pb::AckOutcome::Retry);
    bad.error_class = "no spaces allowed".into();
    invalid(ack(&n.channel, bad).await, "error_class");

    // A RETRY whose class is non-retryable dead-letters at once.
    let mut r = ack_req(&gone, pb::AckOutcome::Retry);
    r.error = "404 from upstream".into();
    r.error_class = "http.404".into();
    let resp = ack(&n.channel, r).await.unwrap();
    assert!(resp.dead_lettered);
    let g = get_retry(&n.channel, "svc", "gone").await;
    assert_eq!(g.status, pb::RetryStatus::Dead as i32);
    assert!(g.last_error.contains("non-retryable"), "{}", g.last_error);

    // Snoozed five times, more than max_attempts: no attempt used, nothing dead.
    let mut d = busy;
    let mut now = start + 2_500;
    for round in 0..5 {
        assert_eq!(d.attempt, 1, "round {round}: snoozes do not count");
        let mut r = ack_req(&d, pb::AckOutcome::Retry);
        r.snooze = true;
        r.retry_after = Some(secs(2));
        r.error_class = "http.404".into(); // ignored for a snooze: not a failure
        let resp = ack(&n.channel, r).await.unwrap();
        assert!(resp.snoozed && !resp.dead_lettered);
        let due = ts_ms(resp.next_due_time.as_ref().unwrap());
        assert!(
            due >= now + 2_000 && due <= now + 3_000,
            "due {due} now {now}"
        );
        assert_eq!(get_retry(&n.channel, "svc", "busy").await.attempt, 0);
        now = due + 500;
        clock.set(now);
        d = deliveries(&mut sub, 1, Duration::from_secs(10))
            .await
            .remove(0);
    }
    // A real failure now: the first backoff (4 s), not one grown by the snoozes.
    let mut r = ack_req(&d, pb::AckOutcome::Retry);
    r.error = "503".into();
    let resp = ack(&n.channel, r).await.unwrap();
    assert!(!resp.snoozed);
    let due = ts_ms(resp.next_due_time.as_ref().unwrap());
    assert!(
        due >= now + 4_000 && due <= now + 5_000,
        "backoff after snoozes: {} ms",
        due - now
    );
    assert_eq!(get_retry(&n.channel, "svc", "busy").await.attempt, 1);
    n.finish().await;
}

#[tokio::test]
async fn pause_stops_dispatch_keeps_enqueue_and_resume_delivers() {
    let start = utc_ms("2026-11-30 11:00:00.100");
    let mut cfg = dispatch_config("pause");
    cfg.settings_refresh_ms = 100;
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    let mut a = admin(&n);
    c.enqueue_retry(req("svc", "first", 0)).await.unwrap();
    let mut sub = subscribe(&n.channel, "svc", 10).await;
    clock.set(start + 2_500);
    let first = deliveries(&mut sub, 1, Duration::from_secs(10))
        .await
        .remove(0);

    invalid(
        a.pause_service(pb::PauseServiceRequest {
            service: String::new(),
        })
        .await,
        "service",
    );
    let paused = a
        .pause_service(pb::PauseServiceRequest {
            service: "svc".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .service
        .unwrap();
    assert!(paused.paused && paused.paused_at.is_some());
    // Enqueue keeps working; the delivery in flight may still be acknowledged.
    for i in 0..5 {
        c.enqueue_retry(req("svc", &format!("p{i}"), 0))
            .await
            .unwrap();
    }
    ack(&n.channel, ack_req(&first, pb::AckOutcome::Succeeded))
        .await
        .unwrap();
    clock.set(start + 5_000);
    assert!(
        next_delivery(&mut sub, Duration::from_millis(1_500))
            .await
            .is_none(),
        "delivered while paused"
    );
    let stats = a
        .get_stats(pb::GetStatsRequest {
            service: "svc".into(),
            local_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(stats.services[0].paused);
    assert_eq!(stats.services[0].bands.unwrap().overdue, 5);

    let resumed = a
        .resume_service(pb::ResumeServiceRequest {
            service: "svc".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .service
        .unwrap();
    assert!(!resumed.paused);
    let got = deliveries(&mut sub, 5, Duration::from_secs(10)).await;
    let ids: BTreeSet<String> = got.iter().map(|d| d.transaction_id.clone()).collect();
    assert_eq!(ids.len(), 5);
    n.finish().await;
}

#[tokio::test]
async fn purge_cancels_pending_retries_bucket_by_bucket_and_keeps_later_ones() {
    let start = utc_ms("2026-11-30 12:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(dispatch_config("purge"), start).await;
    let mut c = n.client.clone();
    let mut a = admin(&n);
    // 12 retries over a few windows and buckets (bucket size 3, 2 lanes), and another
    // service's 2.
    for i in 0..12u64 {
        c.enqueue_retry(req("svc", &format!("t{i}"), 1_000 * (i % 3)))
            .await
            .unwrap();
    }
    c.enqueue_retry(req("other", "o1", 0)).await.unwrap();
    c.enqueue_retry(req("other", "o2", 0)).await.unwrap();
    let before = start + 1;
    // One scheduled after `before`, in a bucket of its own window: it must survive.
    clock.set(start + 1_000);
    c.enqueue_retry(req("svc", "late", 30_000)).await.unwrap();
    let svc_pointers = || async {
        n.select::<(String,)>("SELECT service FROM {ks}.retry_transactions_by_bucket")
            .await
            .into_iter()
            .filter(|(s,)| s == "svc")
            .count()
    };
    assert_eq!(svc_pointers().await, 13);

    invalid(
        a.purge_service(pb::PurgeServiceRequest {
            service: "svc".into(),
            before: None,
            max_buckets: 10_001,
        })
        .await,
        "max_buckets",
    );
    assert_eq!(svc_pointers().await, 13, "a refused purge changes nothing");

    let (mut cancelled, mut deleted, mut calls) = (0, 0, 0);
    loop {
        let r = a
            .purge_service(pb::PurgeServiceRequest {
                service: "svc".into(),
                before: Some(ts(before)),
                max_buckets: 1,
            })
            .await
            .unwrap()
            .into_inner();
        calls += 1;
        cancelled += r.cancelled;
        deleted += r.buckets_deleted;
        if r.done {
            break;
        }
        assert!(calls < 50, "purge does not finish");
    }
    assert_eq!(cancelled, 12);
    assert!(calls > 2, "bounded: one bucket per call, {calls} calls");
    assert!(deleted >= 4, "{deleted} partitions deleted");
    for i in 0..12 {
        let r = get_retry(&n.channel, "svc", &format!("t{i}")).await;
        assert_eq!(r.status, pb::RetryStatus::Cancelled as i32, "t{i}");
    }
    assert_eq!(
        get_retry(&n.channel, "svc", "late").await.status,
        pb::RetryStatus::Scheduled as i32
    );
    assert_eq!(
        svc_pointers().await,
        1,
        "only the later retry's pointer is left"
    );
    // Buckets kept with nothing to cancel in them do not use up a call's budget: purging
    // again over two of them (with one bucket a call) finishes at once, where it used to
    // answer done = false for ever.
    c.enqueue_retry(req("svc", "late2", 60_000)).await.unwrap();
    let r = a
        .purge_service(pb::PurgeServiceRequest {
            service: "svc".into(),
            before: Some(ts(before)),
            max_buckets: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.done, r.cancelled, r.buckets_kept), (true, 0, 2), "{r:?}");

    // Nothing purged is delivered; the other service and the later retry are.
    let mut sub = subscribe(&n.channel, "svc", 10).await;
    let mut other = subscribe(&n.channel, "other", 10).await;
    clock.set(start + 40_000);
    let o = deliveries(&mut other, 2, Duration::from_secs(10)).await;
    assert_eq!(o.len(), 2);
    let d = deliveries(&mut sub, 1, Duration::from_secs(10))
        .await
        .remove(0);
    assert_eq!(d.transaction_id, "late");
    assert!(next_delivery(&mut sub, Duration::from_millis(1_000))
        .await
        .is_none());
    // A purged id can be enqueued again as a new retry.
    let again = c
        .enqueue_retry(req("svc", "t0", 0))
        .await
        .unwrap()
        .into_inner();
    assert!(!again.deduplicated);
    n.finish().await;
}

#[tokio::test]
async fn limits_cap_concurrency_and_dispatch_rate() {
    let mut cfg = dispatch_config("limits");
    cfg.settings_refresh_ms = 100;
    let n = TestNode::with_system_clock(cfg).await;
    let mut a = admin(&n);
    let limits = |l: pb::ServiceLimits| pb::SetServiceLimitsRequest {
        service: "svc".into(),
        limits: Some(l),
    };
    invalid(
        a.set_service_limits(limits(pb::ServiceLimits {
            max_dispatch_per_second: Some(0.0),
            ..Default::default()
        }))
        .await,
        "limits.max_dispatch_per_second",
    );
    invalid(
        a.set_service_limits(limits(pb::ServiceLimits {
            max_dispatch_per_second: Some(f64::NAN),
            ..Default::default()
        }))
        .await,
        "limits.max_dispatch_per_second",
    );
    invalid(
        a.set_service_limits(limits(pb::ServiceLimits {
            dispatch_burst: Some(5),
            ..Default::default()
        }))
        .await,
        "limits.dispatch_burst",
    );
    invalid(
        a.set_service_limits(limits(pb::ServiceLimits {
            max_concurrent: Some(0),
            ..Default::default()
        }))
        .await,
        "limits.max_concurrent",
    );
    let set = a
        .set_service_limits(limits(pb::ServiceLimits {
            max_concurrent: Some(2),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.limits.unwrap().max_concurrent, Some(2));

    let mut c = n.client.clone();
    for i in 0..8 {
        c.enqueue_retry(req("svc", &format!("c{i}"), 0))
            .await
            .unwrap();
    }
    // The stream asks for 100, the service allows 2 at once (one node: the whole share).
    let mut sub = subscribe(&n.channel, "svc", 100).await;
    let two = deliveries(&mut sub, 2, Duration::from_secs(10)).await;
    assert!(
        next_delivery(&mut sub, Duration::from_millis(1_500))
            .await
            .is_none(),
        "a third delivery while two are unacknowledged"
    );
    ack(&n.channel, ack_req(&two[0], pb::AckOutcome::Succeeded))
        .await
        .unwrap();
    let third = deliveries(&mut sub, 1, Duration::from_secs(10)).await;
    assert!(next_delivery(&mut sub, Duration::from_millis(800))
        .await
        .is_none());
    for d in two.iter().skip(1).chain(third.iter()) {
        ack(&n.channel, ack_req(d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
    }
    // The rest, acked as they come, all arrive.
    let mut rest = 0;
    while rest < 5 {
        let d = deliveries(&mut sub, 1, Duration::from_secs(10))
            .await
            .remove(0);
        ack(&n.channel, ack_req(&d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
        rest += 1;
    }

    // A rate of 4 per second with a burst of 1: 12 deliveries take about 3 s, and never come
    // faster than the bucket allows.
    a.set_service_limits(limits(pb::ServiceLimits {
        max_dispatch_per_second: Some(4.0),
        dispatch_burst: Some(1),
        max_concurrent: None,
    }))
    .await
    .unwrap();
    for i in 0..12 {
        c.enqueue_retry(req("svc", &format!("r{i}"), 0))
            .await
            .unwrap();
    }
    let mut times = Vec::new();
    while times.len() < 12 {
        let d = deliveries(&mut sub, 1, Duration::from_secs(10))
            .await
            .remove(0);
        times.push(std::time::Instant::now());
        ack(&n.channel, ack_req(&d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
    }
    let span = times[11].duration_since(times[0]);
    assert!(
        span >= Duration::from_millis(2_400),
        "12 deliveries at 4/s (burst 1) came within {span:?}"
    );
    n.finish().await;
}

#[tokio::test]
async fn a_huge_backlog_does_not_starve_a_small_service() {
    let start = utc_ms("2026-11-30 13:00:00.100");
    let mut cfg = dispatch_config("fair");
    cfg.bucket_size = 100;
    cfg.max_batch_items = 1_000;
    let (n, clock) = TestNode::with_manual_clock(cfg, start).await;
    let mut c = n.client.clone();
    // 3,000 retries of "big" and 10 of "small", all due in the same window.
    for b in 0..3 {
        c.enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..1_000)
                .map(|i| req("big", &format!("b{b}-{i}"), 0))
                .collect(),
        })
        .await
        .unwrap();
    }
    for i in 0..10 {
        c.enqueue_retry(req("small", &format!("s{i}"), 0))
            .await
            .unwrap();
    }
    // big's executor is slow: 4 at a time, 20 ms each.
    let mut big = subscribe(&n.channel, "big", 4).await;
    let mut small = subscribe(&n.channel, "small", 10).await;
    clock.set(start + 2_500);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let big_worker = {
        let ch = n.channel.clone();
        let done = done.clone();
        tokio::spawn(async move {
            while let Ok(Some(d)) = big.message().await {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = ExecutorServiceClient::new(ch.clone())
                    .ack(ack_req(&d, pb::AckOutcome::Succeeded))
                    .await;
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let got = deliveries(&mut small, 10, Duration::from_secs(15)).await;
    let big_done = done.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(got.len(), 10);
    assert!(
        big_done < 1_000,
        "small's 10 waited for {big_done} of big's 3,000"
    );
    big_worker.abort();
    n.finish().await;
}

#[tokio::test]
async fn dead_letters_are_listed_paged_filtered_redriven_and_purged() {
    let start = utc_ms("2026-11-30 14:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(dispatch_config("dlq"), start).await;
    let mut c = n.client.clone();
    let mut a = admin(&n);
    for i in 0..7 {
        c.enqueue_retry(req("svc", &format!("d{i}"), 0))
            .await
            .unwrap();
    }
    let mut sub = subscribe(&n.channel, "svc", 10).await;
    clock.set(start + 2_500);
    let mut got = deliveries(&mut sub, 7, Duration::from_secs(10)).await;
    got.sort_by(|a, b| a.transaction_id.cmp(&b.transaction_id));
    for (i, d) in got.iter().enumerate() {
        let mut r = ack_req(d, pb::AckOutcome::Failed);
        r.error = if i < 4 { "db timeout" } else { "bad payload" }.into();
        assert!(ack(&n.channel, r).await.unwrap().dead_lettered);
        clock.advance(10);
    }
    // A DEAD row (and its payload) lives as long as its letter, not the 1 h terminal TTL.
    let ttl: Vec<(Option<i32>,)> = n
        .select(
            "SELECT TTL(status) FROM {ks}.transactions WHERE region = 'local' \
             AND cluster = 'default' AND service = 'svc' AND transaction_id = 'd0'",
        )
        .await;
    let ttl = ttl[0].0.unwrap();
    assert!(ttl > 14 * 86_400 - 600, "DEAD row TTL {ttl}s");
    let list =
        |page_size: u32, token: &str, filter: &str, redriven: bool| pb::ListDeadLettersRequest {
            service: "svc".into(),
            page_size,
            page_token: token.into(),
            error_contains: filter.into(),
            include_redriven: redriven,
            ..Default::default()
        };
    // Three pages of 3, 3 and 1, in dead_at order, with every field.
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let p = a
            .list_dead_letters(list(3, &token, "", false))
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        seen.extend(p.dead_letters);
        if p.next_page_token.is_empty() {
            break;
        }
        token = p.next_page_token;
    }
    assert_eq!(pages, 3);
    let ids: Vec<&str> = seen.iter().map(|l| l.transaction_id.as_str()).collect();
    assert_eq!(ids, ["d0", "d1", "d2", "d3", "d4", "d5", "d6"]);
    assert_eq!(seen[0].attempt, 2);
    assert_eq!(seen[0].last_error, "db timeout");
    assert!(ts_ms(seen[0].dead_at.as_ref().unwrap()) >= start + 2_500);
    let timeouts = a
        .list_dead_letters(list(100, "", "timeout", false))
        .await
        .unwrap()
        .into_inner()
        .dead_letters;
    assert_eq!(timeouts.len(), 4);
    let early = a
        .list_dead_letters(pb::ListDeadLettersRequest {
            service: "svc".into(),
            to: Some(ts(start)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(early.dead_letters.is_empty());
    let stats = a
        .get_stats(pb::GetStatsRequest {
            service: "svc".into(),
            local_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.services[0].dead_lettered, 7);

    // Bad input, refused.
    invalid(
        a.list_dead_letters(list(1_001, "", "", false)).await,
        "page_size",
    );
    invalid(
        a.list_dead_letters(list(3, "junk", "", false)).await,
        "page_token",
    );
    invalid(
        a.list_dead_letters(list(3, "", &"x".repeat(1_025), false))
            .await,
        "error_contains",
    );
    invalid(
        a.list_dead_letters(pb::ListDeadLettersRequest {
            service: "svc".into(),
            from: Some(ts(start)),
            to: Some(ts(start)),
            ..Default::default()
        })
        .await,
        "from",
    );
    invalid(
        a.list_dead_letters(pb::ListDeadLettersRequest::default())
            .await,
        "service",
    );
    let redrive = |max_items: u32| pb::RedriveDeadLettersRequest {
        service: "svc".into(),
        error_contains: "timeout".into(),
        max_items,
        max_per_second: 1_000,
        ..Default::default()
    };
    invalid(a.redrive_dead_letters(redrive(100_001)).await, "max_items");
    let mut far = redrive(1);
    far.delay = Some(secs(400 * 86_400));
    invalid(a.redrive_dead_letters(far).await, "delay");
    assert_eq!(
        get_retry(&n.channel, "svc", "d0").await.status,
        pb::RetryStatus::Dead as i32,
        "refused redrives change nothing"
    );

    // Redrive the timeouts, two per call.
    let r1 = a
        .redrive_dead_letters(redrive(2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r1.redriven, r1.done), (2, false));
    let r2 = a
        .redrive_dead_letters(redrive(2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r2.redriven, r2.skipped), (2, 0));
    let r3 = a
        .redrive_dead_letters(redrive(2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r3.redriven, r3.done), (0, true));
    let left = a
        .list_dead_letters(list(100, "", "", false))
        .await
        .unwrap()
        .into_inner()
        .dead_letters;
    assert_eq!(left.len(), 3);
    let all = a
        .list_dead_letters(list(100, "", "", true))
        .await
        .unwrap()
        .into_inner()
        .dead_letters;
    assert_eq!(all.len(), 7);
    assert_eq!(all.iter().filter(|l| l.redriven_at.is_some()).count(), 4);
    let d0 = get_retry(&n.channel, "svc", "d0").await;
    assert_eq!(d0.status, pb::RetryStatus::Scheduled as i32);
    assert_eq!(d0.attempt, 0, "attempts reset");
    // They come back, as first attempts.
    clock.advance(3_000);
    let back = deliveries(&mut sub, 4, Duration::from_secs(10)).await;
    for d in &back {
        assert!(d.transaction_id.as_str() < "d4");
        assert_eq!(d.attempt, 1);
        ack(&n.channel, ack_req(d, pb::AckOutcome::Succeeded))
            .await
            .unwrap();
    }

    // Purge: every letter of the service goes, redriven or not.
    let purged = a
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            service: "svc".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(purged.purged, 7);
    assert!(a
        .list_dead_letters(list(100, "", "", true))
        .await
        .unwrap()
        .into_inner()
        .dead_letters
        .is_empty());
    n.finish().await;
}

#[tokio::test]
async fn stats_bands_in_flight_nodes_and_window_inspection() {
    let start = utc_ms("2026-11-30 15:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(dispatch_config("stats"), start).await;
    let mut c = n.client.clone();
    let mut a = admin(&n);
    for i in 0..5 {
        c.enqueue_retry(req("svc", &format!("now{i}"), 0))
            .await
            .unwrap();
    }
    for i in 0..3 {
        c.enqueue_retry(req("svc", &format!("soon{i}"), 30 * 60_000))
            .await
            .unwrap();
    }
    for i in 0..2 {
        c.enqueue_retry(req("svc", &format!("later{i}"), 2 * 86_400_000))
            .await
            .unwrap();
    }
    c.enqueue_retry(req("other", "o", 0)).await.unwrap();
    clock.set(start + 5_000);
    let s = a
        .get_stats(pb::GetStatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let svc = s.services.iter().find(|x| x.service == "svc").unwrap();
    assert_eq!(svc.pending, 10);
    let b = svc.bands.unwrap();
    assert_eq!(
        (
            b.overdue,
            b.within_minute,
            b.within_hour,
            b.within_day,
            b.later
        ),
        (5, 0, 3, 0, 2)
    );
    let age = svc.oldest_due_age.unwrap();
    assert!((3..=6).contains(&age.seconds), "{age:?}");
    assert_eq!(svc.windows.len(), 3);
    assert_eq!(svc.windows.iter().map(|w| w.pending).sum::<u64>(), 10);
    assert_eq!(
        s.services
            .iter()
            .find(|x| x.service == "other")
            .unwrap()
            .pending,
        1
    );
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.nodes[0].node_id, "node-a");
    assert!(s.nodes[0].reachable);

    // Two in flight on a stream of two.
    let mut sub = subscribe(&n.channel, "svc", 2).await;
    deliveries(&mut sub, 2, Duration::from_secs(10)).await;
    eventually(Duration::from_secs(5), "2 in flight", || async {
        let s = admin(&n)
            .get_stats(pb::GetStatsRequest {
                service: "svc".into(),
                local_only: false,
            })
            .await
            .unwrap()
            .into_inner();
        s.services.len() == 1 && s.services[0].in_flight == 2 && s.nodes[0].subscribers == 1
    })
    .await;

    // The window of the five due ones, tier by tier.
    let loc = get_retry(&n.channel, "svc", "now0").await.location.unwrap();
    let w = a
        .inspect_window(pb::InspectWindowRequest {
            day: loc.day.clone(),
            window: loc.window,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(w.day_listed && w.window_listed && w.readable);
    assert_eq!(w.window_seconds, 1);
    let svc_instances: Vec<_> = w.instances.iter().filter(|i| i.service == "svc").collect();
    let pointers: u64 = svc_instances
        .iter()
        .flat_map(|i| i.buckets.iter().map(|b| b.pointers))
        .sum();
    assert_eq!(pointers, 5);
    assert!(w.instances.iter().any(|i| i.service == "other"));
    invalid(
        a.inspect_window(pb::InspectWindowRequest {
            day: "2026-13-01".into(),
            window: 0,
        })
        .await,
        "day",
    );
    invalid(
        a.inspect_window(pb::InspectWindowRequest {
            day: loc.day,
            window: 86_400,
        })
        .await,
        "window",
    );
    invalid(
        a.get_stats(pb::GetStatsRequest {
            service: "no spaces please".into(),
            local_only: false,
        })
        .await,
        "service",
    );
    n.finish().await;
}

/// Push targets through AdminService on an in-process node on the embedded store (no
/// Cassandra needed): admin credential required, bad input refused naming the field before
/// anything is written (a metadata address among it), set / get / list answered with secrets
/// and header values masked (no header value in clear), the masked form sent back refused,
/// NOT_FOUND without a target, clear once.
#[tokio::test]
async fn push_target_is_set_shown_masked_and_cleared() {
    use rebound_integration_tests::{credentials_file, with_token};

    const OPS: &str = "ops-secret";
    const PAY: &str = "pay-secret";
    let dir = tempfile::tempdir().unwrap();
    let config = rebound_server::config::Config {
        store: rebound_server::config::StoreKind::Embedded,
        data_dir: Some(dir.path().join("data")),
        listen: "127.0.0.1:0".parse().unwrap(),
        node_id: "push-node".into(),
        window_seconds: 1,
        skew_margin_ms: 250,
        lease_ttl_ms: 2_000,
        clock_sync: false,
        shutdown_grace_ms: 1_000,
        credentials_file: Some(credentials_file(
            "admin_push_target",
            &[
                ("pay", PAY, &["payments"], false),
                ("ops", OPS, &["*"], true),
            ],
        )),
        ..rebound_server::config::Config::default()
    };
    let node = rebound_server::node::Node::start(
        config,
        std::sync::Arc::new(rebound_store::clock::SystemClock),
    )
    .await
    .unwrap();
    let ch = Channel::from_shared(format!("http://{}", node.local_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut a = AdminServiceClient::new(ch);
    fn ops<T>(m: T) -> tonic::Request<T> {
        with_token(m, Some(OPS))
    }

    let secret = |b: u8, n: usize| {
        // The base64 of n bytes of value b, by hand: 3 bytes of b are 4 characters.
        assert_eq!(n % 3, 0);
        let quad: String = {
            let v = u32::from(b) << 16 | u32::from(b) << 8 | u32::from(b);
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            (0..4)
                .map(|i| A[((v >> (18 - 6 * i)) & 63) as usize] as char)
                .collect()
        };
        format!("whsec_{}", quad.repeat(n / 3))
    };
    let target = pb::PushTarget {
        url: "https://hooks.example.com/rebound".into(),
        headers: [
            ("X-Tenant".to_string(), "7".to_string()),
            (
                "Authorization".to_string(),
                "Bearer tok_9f8e7d6c5b4a".to_string(),
            ),
        ]
        .into(),
        signing_secrets: vec![secret(1, 24), secret(2, 33)],
        ..Default::default()
    };
    // What no answer may hold: a header value or a secret in clear.
    let in_clear = |t: &pb::PushTarget| {
        let shown = format!("{t:?}");
        shown.contains("tok_9f8e7d")
            || shown.contains("\"7\"")
            || shown.contains(&secret(1, 24)[6..20])
    };
    let set = |service: &str, t: pb::PushTarget| pb::SetPushTargetRequest {
        service: service.into(),
        target: Some(t),
    };
    let get = |service: &str| pb::GetPushTargetRequest {
        service: service.into(),
    };

    // Admin calls: no token, or a credential without admin, is refused.
    let e = a
        .set_push_target(set("orders", target.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = a
        .set_push_target(with_token(set("payments", target.clone()), Some(PAY)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = a
        .get_push_target(with_token(get("payments"), Some(PAY)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // Bad input names the field, and writes nothing: the service stays unknown.
    for (t, field) in [
        (
            pb::PushTarget {
                url: "https://u:p@hooks.example.com/".into(),
                ..target.clone()
            },
            "target.url",
        ),
        (
            pb::PushTarget {
                url: "ftp://hooks.example.com/".into(),
                ..target.clone()
            },
            "target.url",
        ),
        (
            pb::PushTarget {
                timeout: Some(secs(0)),
                ..target.clone()
            },
            "target.timeout",
        ),
        (
            pb::PushTarget {
                timeout: Some(secs(31 * 60)),
                ..target.clone()
            },
            "target.timeout",
        ),
        (
            pb::PushTarget {
                signing_secrets: vec![secret(1, 24), secret(3, 21)],
                ..target.clone()
            },
            "target.signing_secrets[1]",
        ),
        (
            pb::PushTarget {
                signing_secrets: vec![secret(1, 24), secret(2, 24), secret(3, 24)],
                ..target.clone()
            },
            "target.signing_secrets",
        ),
        (
            pb::PushTarget {
                headers: [("Webhook-Id".to_string(), "x".to_string())].into(),
                ..target.clone()
            },
            "target.headers[\"Webhook-Id\"]",
        ),
        (
            pb::PushTarget {
                max_concurrent: Some(0),
                ..target.clone()
            },
            "target.max_concurrent",
        ),
        (
            pb::PushTarget {
                url: "http://169.254.169.254/latest/meta-data".into(),
                ..target.clone()
            },
            "target.url",
        ),
    ] {
        invalid(a.set_push_target(ops(set("orders", t))).await, field);
    }
    invalid(
        a.set_push_target(ops(pb::SetPushTargetRequest {
            service: "orders".into(),
            target: None,
        }))
        .await,
        "target",
    );
    invalid(
        a.set_push_target(ops(set("bad name", target.clone())))
            .await,
        "service",
    );
    invalid(a.get_push_target(ops(get(""))).await, "service");
    let e = a
        .get_service(ops(pb::GetServiceRequest {
            service: "orders".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "refused calls made no row: {e:?}");
    let e = a.get_push_target(ops(get("orders"))).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("has no push target"), "{e:?}");
    let cleared = a
        .clear_push_target(ops(pb::ClearPushTargetRequest {
            service: "orders".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(!cleared.cleared);

    // Set: answered as stored, with the defaults, secrets masked.
    let before = chrono::Utc::now().timestamp();
    let stored = a
        .set_push_target(ops(set("orders", target.clone())))
        .await
        .unwrap()
        .into_inner()
        .target
        .unwrap();
    assert_eq!(stored.url, target.url);
    assert_eq!(stored.timeout, Some(secs(30)));
    assert_eq!(stored.max_concurrent, Some(64));
    // Header values masked like the secrets: the last 4 characters of a long one only.
    assert_eq!(
        stored.headers,
        [
            ("X-Tenant".to_string(), "…".to_string()),
            ("Authorization".to_string(), "…5b4a".to_string()),
        ]
        .into()
    );
    assert!(!in_clear(&stored), "{stored:?}");
    let masked: Vec<String> = target
        .signing_secrets
        .iter()
        .map(|s| format!("whsec_…{}", &s[s.len() - 4..]))
        .collect();
    assert_eq!(stored.signing_secrets, masked);
    assert!(stored.updated_at.unwrap().seconds >= before);
    // Get and the service listing show the same.
    let got = a
        .get_push_target(ops(get("orders")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, stored);
    let info = a
        .get_service(ops(pb::GetServiceRequest {
            service: "orders".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.push_target, Some(stored.clone()));
    let listed = a
        .list_services(ops(pb::ListServicesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.services.len(), 1);
    assert_eq!(listed.services[0].push_target, Some(stored.clone()));
    assert!(!in_clear(&got), "{got:?}");

    // The masked target sent back as it was answered (an "edit") is refused, naming the
    // masked field, and the stored target stays.
    let e = a
        .set_push_target(ops(set("orders", got.clone())))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with("target.headers[\"") && e.message().contains("masked value"),
        "{e:?}"
    );
    let e = a
        .set_push_target(ops(set(
            "orders",
            pb::PushTarget {
                headers: target.headers.clone(),
                ..got.clone()
            },
        )))
        .await
        .unwrap_err();
    assert!(
        e.message().starts_with("target.signing_secrets[0]:")
            && e.message().contains("masked secret"),
        "{e:?}"
    );
    assert_eq!(
        a.get_push_target(ops(get("orders")))
            .await
            .unwrap()
            .into_inner(),
        stored
    );

    // Replaced as a whole; a pause is another setting and stays.
    a.pause_service(ops(pb::PauseServiceRequest {
        service: "orders".into(),
    }))
    .await
    .unwrap();
    let replaced = a
        .set_push_target(ops(set(
            "orders",
            pb::PushTarget {
                url: "http://hooks.example.com:8080/v2".into(),
                timeout: Some(secs(120)),
                headers: Default::default(),
                signing_secrets: vec![secret(9, 48)],
                max_concurrent: Some(8),
                updated_at: None,
            },
        )))
        .await
        .unwrap()
        .into_inner()
        .target
        .unwrap();
    assert_eq!(
        (
            replaced.url.as_str(),
            replaced.timeout,
            replaced.max_concurrent
        ),
        ("http://hooks.example.com:8080/v2", Some(secs(120)), Some(8))
    );
    assert!(replaced.headers.is_empty());
    assert_eq!(replaced.signing_secrets.len(), 1);
    let info = a
        .get_service(ops(pb::GetServiceRequest {
            service: "orders".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(info.paused);
    assert_eq!(info.push_target, Some(replaced));

    // Cleared, once.
    let clear = || {
        ops(pb::ClearPushTargetRequest {
            service: "orders".into(),
        })
    };
    assert!(
        a.clear_push_target(clear())
            .await
            .unwrap()
            .into_inner()
            .cleared
    );
    assert!(
        !a.clear_push_target(clear())
            .await
            .unwrap()
            .into_inner()
            .cleared
    );
    let e = a.get_push_target(ops(get("orders"))).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let info = a
        .get_service(ops(pb::GetServiceRequest {
            service: "orders".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(info.paused && info.push_target.is_none());

    tokio::time::timeout(Duration::from_secs(10), node.shutdown())
        .await
        .expect("node stops within 10 s")
        .expect("node stops cleanly");
}
