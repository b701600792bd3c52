//! The Rust SDK end to end against a real node: the typed client enqueues, the executor
//! runtime receives every due retry, and its handler's outcomes become SUCCEEDED, a retry
//! after a delay, or a dead letter.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use rebound_client::{
    executor::{Executor, Job, Outcome},
    Client, Compensation, ListFilter, RetryPolicy, RetryStatus,
};
use rebound_integration_tests::{
    ack, ack_req, ack_succeeded, credentials_file, dispatch_config, eventually, next_delivery,
    subscribe, TestNode,
};
use rebound_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_enqueues_executes_retries_and_dead_letters() {
    let n = TestNode::with_system_clock(dispatch_config("sdk")).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let client = Client::connect(&addr).await.unwrap();
    for i in 0..20 {
        let out = client
            .enqueue("shipping", format!("ship-{i}"))
            .payload(format!("parcel {i}"))
            .attribute("carrier", "acme")
            .attempt(1)
            .last_error("carrier API 503")
            .delay(Duration::ZERO)
            .send()
            .await
            .unwrap();
        assert!(!out.deduplicated);
    }
    // "sleepy" is snoozed once (no attempt used), then done; "gone" (below) is a RETRY whose
    // class the policy lists as non-retryable, which dead-letters at once although attempts
    // are unlimited.
    for id in ["flaky", "poison", "sleepy"] {
        client
            .enqueue("shipping", id)
            .attempt(1)
            .delay(Duration::ZERO)
            .send()
            .await
            .unwrap();
    }
    client
        .enqueue("shipping", "gone")
        .attempt(1)
        .delay(Duration::ZERO)
        .policy(
            RetryPolicy::new()
                .unlimited_attempts()
                .non_retryable("http.404"),
        )
        .send()
        .await
        .unwrap();

    let attempts: Arc<Mutex<HashMap<String, Vec<u32>>>> = Arc::default();
    let seen = attempts.clone();
    let handler = move |job: Job| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .unwrap()
                .entry(job.transaction_id.clone())
                .or_default()
                .push(job.attempt);
            match job.transaction_id.as_str() {
                "poison" => Outcome::fail("malformed address"),
                "sleepy" if seen.lock().unwrap()["sleepy"].len() == 1 => {
                    Outcome::snooze(Duration::from_secs(1))
                }
                "gone" => Outcome::retry("404 no such parcel").with_error_class("http.404"),
                "sleepy" => Outcome::success(),
                "flaky" if job.attempt == 2 => {
                    Outcome::retry_after(Duration::from_secs(1), "still down")
                }
                _ => {
                    assert_eq!(
                        job.attributes.get("carrier").map(String::as_str),
                        job.transaction_id.starts_with("ship-").then_some("acme")
                    );
                    Outcome::success()
                }
            }
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let executor = tokio::spawn(
        Executor::builder(addr.as_str(), "shipping")
            .executor_id("sdk-test")
            .concurrency(4)
            .run(handler, async move {
                let _ = stop_rx.await;
            }),
    );
    eventually(Duration::from_secs(30), "every retry to finish", || {
        let client = client.clone();
        async move {
            for id in (0..20).map(|i| format!("ship-{i}")).chain([
                "flaky".into(),
                "poison".into(),
                "sleepy".into(),
                "gone".into(),
            ]) {
                if !client
                    .get("shipping", id)
                    .await
                    .unwrap()
                    .status
                    .is_terminal()
                {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let _ = stop_tx.send(());
    executor.await.unwrap().unwrap();

    assert_eq!(
        client.get("shipping", "ship-7").await.unwrap().status,
        RetryStatus::Succeeded
    );
    let flaky = client.get("shipping", "flaky").await.unwrap();
    assert_eq!(flaky.status, RetryStatus::Succeeded);
    assert_eq!(attempts.lock().unwrap()["flaky"], vec![2, 3]);
    let poison = client.get("shipping", "poison").await.unwrap();
    assert_eq!(poison.status, RetryStatus::Dead);
    assert_eq!(poison.last_error.as_deref(), Some("malformed address"));
    let sleepy = client.get("shipping", "sleepy").await.unwrap();
    assert_eq!(sleepy.status, RetryStatus::Succeeded);
    assert_eq!(
        attempts.lock().unwrap()["sleepy"],
        vec![2, 2],
        "a snooze uses no attempt"
    );
    let gone = client.get("shipping", "gone").await.unwrap();
    assert_eq!(gone.status, RetryStatus::Dead);
    assert_eq!(attempts.lock().unwrap()["gone"], vec![2]);
    assert_eq!(gone.policy.unlimited_attempts, Some(true));
    assert_eq!(n.count("dead_letters").await, 2);
    for (id, a) in attempts.lock().unwrap().iter() {
        if id.starts_with("ship-") {
            assert_eq!(a, &vec![2], "{id} was delivered {a:?}");
        }
    }
    n.finish().await;
}

/// `compensation_chain_runs_in_reverse_on_exhaustion` (client-sdk/CONFORMANCE.md): a saga's
/// charge step fails until its 2 attempts are used; its two compensations then run in the
/// order given (the reverse of the steps they undo), each once, each after the one before it
/// succeeded, and `get` shows where the chain stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensation_chain_runs_in_reverse_on_exhaustion() {
    let n = TestNode::with_system_clock(dispatch_config("sdk_saga")).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let client = Client::connect(&addr).await.unwrap();
    client
        .enqueue("saga-orders", "charge-1")
        .attempt(1)
        .policy(
            RetryPolicy::new()
                .max_attempts(2)
                .initial_backoff(Duration::from_millis(100)),
        )
        .delay(Duration::ZERO)
        .compensation(Compensation::new("saga-undo", "refund-1").payload("refund charge-1"))
        .compensation(Compensation::new("saga-undo", "release-1").payload("release stock"))
        .send()
        .await
        .unwrap();
    type Undone = Arc<Mutex<Vec<(String, Vec<u8>)>>>;
    let undone: Undone = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stop = stop_rx.clone();
    let orders = tokio::spawn(
        Executor::builder(addr.as_str(), "saga-orders")
            .executor_id("sdk-saga-orders")
            .run(
                |_job: Job| async { Outcome::retry("card declined") },
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            ),
    );
    let mut stop = stop_rx.clone();
    let seen = undone.clone();
    let undo = tokio::spawn(
        Executor::builder(addr.as_str(), "saga-undo")
            .executor_id("sdk-saga-undo")
            .run(
                move |job: Job| {
                    let seen = seen.clone();
                    async move {
                        seen.lock()
                            .unwrap()
                            .push((job.transaction_id.clone(), job.payload.clone()));
                        Outcome::success()
                    }
                },
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            ),
    );
    eventually(
        Duration::from_secs(40),
        "both compensations to succeed",
        || {
            let client = client.clone();
            async move {
                let chain = client.get("saga-orders", "charge-1").await.unwrap().chain;
                chain.is_some_and(|c| {
                    c.compensations
                        .iter()
                        .all(|m| m.status == Some(RetryStatus::Succeeded))
                })
            }
        },
    )
    .await;
    // Each ran once: nothing more arrives.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop_tx.send(true);
    orders.await.unwrap().unwrap();
    undo.await.unwrap().unwrap();
    let undone = undone.lock().unwrap().clone();
    assert_eq!(
        undone,
        [
            ("refund-1".to_string(), b"refund charge-1".to_vec()),
            ("release-1".to_string(), b"release stock".to_vec()),
        ]
    );
    let step = client.get("saga-orders", "charge-1").await.unwrap();
    assert_eq!(step.status, RetryStatus::Dead);
    assert_eq!(step.attempt, 2);
    let chain = step.chain.unwrap();
    assert_eq!((chain.position, chain.compensations.len()), (0, 2));
    let last = client.get("saga-undo", "release-1").await.unwrap();
    let chain = last.chain.unwrap();
    assert_eq!(
        (
            chain.saga_service.as_str(),
            chain.saga_transaction_id.as_str()
        ),
        ("saga-orders", "charge-1")
    );
    assert_eq!(chain.position, 2);
}

/// `dependency_hold_defers_without_using_attempts` (client-sdk/CONFORMANCE.md): a handler
/// holds the dependency its retry names for 2 s; another retry naming it, in another
/// service, due during the hold, is not delivered before the hold ends; both then arrive with
/// their attempt number unchanged, although their policy allows a single attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependency_hold_defers_without_using_attempts() {
    let n = TestNode::with_system_clock(dispatch_config("sdk_hold")).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let client = Client::connect(&addr).await.unwrap();
    let one_attempt = || RetryPolicy::new().max_attempts(2);
    client
        .enqueue("orders", "charge-1")
        .attempt(1)
        .dependency("payments-gateway")
        .policy(one_attempt())
        .delay(Duration::ZERO)
        .send()
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, u32, std::time::Instant)>>> = Arc::default();
    let handler = |held_once: bool, seen: Arc<Mutex<Vec<(String, u32, std::time::Instant)>>>| {
        move |job: Job| {
            let seen = seen.clone();
            async move {
                let first = {
                    let mut s = seen.lock().unwrap();
                    s.push((
                        job.transaction_id.clone(),
                        job.attempt,
                        std::time::Instant::now(),
                    ));
                    s.len() == 1
                };
                if held_once && first {
                    Outcome::hold(Duration::from_secs(2), "503, Retry-After: 2")
                } else {
                    Outcome::success()
                }
            }
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let run = |service: &'static str, held_once: bool| {
        let mut stop = stop_rx.clone();
        tokio::spawn(
            Executor::builder(addr.as_str(), service)
                .executor_id(format!("sdk-hold-{service}"))
                .run(handler(held_once, seen.clone()), async move {
                    let _ = stop.wait_for(|s| *s).await;
                }),
        )
    };
    let orders = run("orders", true);
    let billing = run("billing", false);
    // The first delivery holds the gateway; then billing's retry naming it is enqueued.
    eventually(Duration::from_secs(20), "the hold", || {
        let seen = seen.clone();
        async move { !seen.lock().unwrap().is_empty() }
    })
    .await;
    let held_at = seen.lock().unwrap()[0].2;
    client
        .enqueue("billing", "invoice-1")
        .attempt(1)
        .dependency("payments-gateway")
        .policy(one_attempt())
        .delay(Duration::ZERO)
        .send()
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "both to succeed", || {
        let client = client.clone();
        async move {
            client.get("orders", "charge-1").await.unwrap().status == RetryStatus::Succeeded
                && client.get("billing", "invoice-1").await.unwrap().status
                    == RetryStatus::Succeeded
        }
    })
    .await;
    let _ = stop_tx.send(true);
    orders.await.unwrap().unwrap();
    billing.await.unwrap().unwrap();
    let seen = seen.lock().unwrap().clone();
    let attempts: Vec<(&str, u32)> = seen.iter().map(|(t, a, _)| (t.as_str(), *a)).collect();
    assert_eq!(
        attempts.iter().filter(|(t, _)| *t == "charge-1").count(),
        2,
        "{attempts:?}"
    );
    assert!(
        attempts.iter().all(|(_, a)| *a == 2),
        "no attempt used: {attempts:?}"
    );
    for (t, _, at) in &seen[1..] {
        assert!(
            at.duration_since(held_at) >= Duration::from_millis(1900),
            "{t} delivered during the hold"
        );
    }
    assert_eq!(n.count("dead_letters").await, 0);
    n.finish().await;
}

/// On a node with credentials, a client sends its token with every call, and an executor
/// started from it sends it to every ring node it subscribes to and acks on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_sends_its_token_to_every_node_it_talks_to() {
    let mut cfg = dispatch_config("sdk_auth");
    cfg.credentials_file = Some(credentials_file(
        "sdk_auth",
        &[("pay", "pay-secret", &["payments"], false)],
    ));
    let n = TestNode::with_system_clock(cfg).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let anonymous = Client::connect(&addr).await.unwrap();
    let e = anonymous
        .enqueue("payments", "p0")
        .delay(Duration::ZERO)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), rebound_client::Code::Unauthenticated, "{e:?}");
    assert!(anonymous.clone().with_token("bad\ntoken").is_err());
    let client = anonymous.with_token("pay-secret").unwrap();
    for i in 0..5 {
        client
            .enqueue("payments", format!("p{i}"))
            .delay(Duration::ZERO)
            .send()
            .await
            .unwrap();
    }
    let e = client
        .enqueue("orders", "o0")
        .delay(Duration::ZERO)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), rebound_client::Code::PermissionDenied, "{e:?}");

    let handled = Arc::new(Mutex::new(Vec::new()));
    let seen = handled.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let executor = tokio::spawn(client.executor("payments").concurrency(2).run(
        move |job: Job| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(job.transaction_id.clone());
                Outcome::success()
            }
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    eventually(Duration::from_secs(30), "every retry to succeed", || {
        let client = client.clone();
        async move {
            for i in 0..5 {
                let r = client.get("payments", format!("p{i}")).await.unwrap();
                if r.status != RetryStatus::Succeeded {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let _ = stop_tx.send(());
    executor.await.unwrap().unwrap();
    let mut handled = handled.lock().unwrap().clone();
    handled.sort();
    handled.dedup();
    assert_eq!(handled.len(), 5, "{handled:?}");
    n.finish().await;
}

/// `overload_is_shed_and_retried` (client-sdk/CONFORMANCE.md): a node whose request byte
/// budget holds about one of these batches at a time sheds the others with
/// RESOURCE_EXHAUSTED and a retry hint; the client waits the hint and calls again, so every
/// batch is accepted in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_shed_and_retried() {
    let mut cfg = dispatch_config("sdk_overload");
    cfg.max_payload_bytes = 16 << 10;
    cfg.max_inflight_bytes = 7_200_000;
    let n = TestNode::with_system_clock(cfg).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let client = Client::connect(&addr).await.unwrap();
    let shed = || {
        rebound_server::metric_definitions::metrics()
            .requests_shed
            .get_or_create(&rebound_server::metric_definitions::ReasonLabels {
                reason: "inflight_bytes",
            })
            .get()
    };
    let before = shed();
    for round in 0..5 {
        let batches = (0..8).map(|b| {
            let client = client.clone();
            async move {
                let items = (0..50).map(|i| {
                    client
                        .enqueue("bulk", format!("r{round}-b{b}-{i}"))
                        .payload(vec![b'x'; 16 << 10])
                        .delay(Duration::from_secs(3600))
                });
                client.enqueue_batch(items).await
            }
        });
        for out in futures::future::join_all(batches).await {
            let out = out.expect("every batch is accepted in the end");
            assert!(out.iter().all(Result::is_ok), "{out:?}");
        }
        let retry = client.get("bulk", format!("r{round}-b7-49")).await.unwrap();
        assert_eq!(retry.status, RetryStatus::Scheduled);
        if shed() > before {
            break;
        }
    }
    assert!(shed() > before, "the node shed some of the batches");
    n.finish().await;
}

/// One meaning of `attempt` from the SDK's enqueue to GetRetry: enqueued with the SDK's
/// default (the call that just failed, attempt 1), a retry is delivered as attempt 2; after a
/// RETRY of it GetRetry shows 2 and the next delivery carries 3; after a SUCCEEDED ack of
/// delivery N GetRetry shows N, for a plain retry and for a saga step (whose end is a
/// conditional write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_attempt_is_delivered_as_2_and_get_shows_the_last_one_run() {
    let n = TestNode::with_system_clock(dispatch_config("sdk_attempt")).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let client = Client::connect(&addr).await.unwrap();
    for id in ["o1", "o2"] {
        client
            .enqueue("orders", id)
            .delay(Duration::ZERO)
            .send()
            .await
            .unwrap();
    }
    client
        .enqueue("orders", "step")
        .delay(Duration::ZERO)
        .compensation(Compensation::new("orders-undo", "step/undo"))
        .send()
        .await
        .unwrap();
    for id in ["o1", "o2", "step"] {
        let r = client.get("orders", id).await.unwrap();
        assert_eq!((r.status, r.attempt), (RetryStatus::Scheduled, 1), "{id}");
    }

    let mut sub = subscribe(&n.channel, "orders", 10).await;
    let mut first = HashMap::new();
    while first.len() < 3 {
        let d = next_delivery(&mut sub, Duration::from_secs(30))
            .await
            .expect("a delivery");
        first.insert(d.transaction_id.clone(), d);
    }
    for (id, d) in &first {
        assert_eq!(d.attempt, 2, "{id}: the SDK's default attempt 1 was made");
    }
    ack_succeeded(&n.channel, &first["o1"]).await;
    ack_succeeded(&n.channel, &first["step"]).await;
    let retry = pb::AckRequest {
        retry_after: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        error: "503".into(),
        ..ack_req(&first["o2"], pb::AckOutcome::Retry)
    };
    ack(&n.channel, retry).await.unwrap();

    let o1 = client.get("orders", "o1").await.unwrap();
    assert_eq!((o1.status, o1.attempt), (RetryStatus::Succeeded, 2));
    let step = client.get("orders", "step").await.unwrap();
    assert_eq!((step.status, step.attempt), (RetryStatus::Succeeded, 2));
    // Waiting for its next delivery: the attempt that ran last.
    let o2 = client.get("orders", "o2").await.unwrap();
    assert_eq!((o2.status, o2.attempt), (RetryStatus::Scheduled, 2));

    let again = next_delivery(&mut sub, Duration::from_secs(30))
        .await
        .expect("the retried delivery");
    assert_eq!((again.transaction_id.as_str(), again.attempt), ("o2", 3));
    ack_succeeded(&n.channel, &again).await;
    let o2 = client.get("orders", "o2").await.unwrap();
    assert_eq!((o2.status, o2.attempt), (RetryStatus::Succeeded, 3));
    n.finish().await;
}

/// list_retries (client-sdk/CONFORMANCE.md): the scheduled retries that match, every page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_and_pages() {
    let n = TestNode::with_system_clock(dispatch_config("sdk_list")).await;
    let addr = format!("http://{}", n.node.as_ref().unwrap().local_addr());
    let client = Client::connect(&addr).await.unwrap();
    for i in 0..7 {
        client
            .enqueue("rslist", format!("l-{i}"))
            .attribute("customer", if i % 2 == 0 { "42" } else { "7" })
            .last_error(if i < 3 {
                "card declined"
            } else {
                "gateway: 503"
            })
            .delay(Duration::from_secs(3600))
            .send()
            .await
            .unwrap();
    }
    let mut pages = client.list_retries(
        "rslist",
        ListFilter {
            page_size: 2,
            ..Default::default()
        },
    );
    let mut all = Vec::new();
    while let Some(page) = pages.next_page().await.unwrap() {
        assert!(page.len() <= 2);
        all.extend(page.into_iter().map(|r| r.transaction_id));
    }
    all.sort();
    assert_eq!(all, (0..7).map(|i| format!("l-{i}")).collect::<Vec<_>>());
    let mine = client
        .list_retries(
            "rslist",
            ListFilter {
                attributes: [("customer".to_string(), "42".to_string())].into(),
                error_contains: "declined".into(),
                ..Default::default()
            },
        )
        .all()
        .await
        .unwrap();
    let mut ids: Vec<_> = mine.iter().map(|r| r.transaction_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["l-0", "l-2"]);
    assert!(mine
        .iter()
        .all(|r| r.status == RetryStatus::Scheduled && r.attempt == 1));
    let refused = client
        .list_retries(
            "rslist",
            ListFilter {
                page_size: 501,
                ..Default::default()
            },
        )
        .all()
        .await;
    assert!(
        matches!(refused, Err(ref e) if e.code() == rebound_client::Code::InvalidArgument),
        "{refused:?}"
    );
}
