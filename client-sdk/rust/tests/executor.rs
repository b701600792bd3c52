//! The executor runtime against an in-process fake `ExecutorService`, scripted per test.
//!
//! The fake records every call as an [`Event`], so the tests assert what the runtime sent:
//! subscriptions, acks and deadline extensions. `GetRing` is answered as scripted (by default
//! `UNIMPLEMENTED`, so that the executor subscribes to the address it is given) and only
//! counted; the ring tests run several fakes, one per node.

mod common;

use common::*;

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use rebound_client::{executor::Executor, proto as pb, Code, HandlerError, Job, Outcome};
use tokio::{
    sync::{mpsc, oneshot},
    time::{sleep, timeout},
};
use tonic::Status;

#[tokio::test]
async fn acks_each_outcome() {
    let mut h = Harness::start().await;
    let tx = h.stream();
    let handler = |job: Job| async move {
        match std::str::from_utf8(&job.payload).unwrap() {
            "ok" => Ok(Outcome::success()),
            "later" => Ok(Outcome::retry_after(Duration::from_secs(7), "rate limited")),
            "fail" => Err(HandlerError::fail("bad order")),
            // Any std error converts into a retryable HandlerError.
            "io" => {
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream timed out").into())
            }
            "panic" => panic!("handler bug"),
            "snooze" => Ok(Outcome::snooze(Duration::from_secs(90))),
            "404" => Err(HandlerError::retry("not found").with_error_class("http.404")),
            other => panic!("unexpected payload {other}"),
        }
    };
    let (stop, run) = spawn_executor(&h, 8, handler);

    let sub = h.next_subscribe().await;
    assert_eq!(
        sub,
        pb::SubscribeRequest {
            service: "orders".into(),
            executor_id: "test-executor".into(),
            max_in_flight: 8,
        }
    );
    let ack_timeout = Duration::from_secs(30);
    for (id, payload) in [
        ("1", "ok"),
        ("2", "later"),
        ("3", "fail"),
        ("4", "io"),
        ("5", "panic"),
        ("7", "snooze"),
        ("8", "404"),
    ] {
        tx.send(Ok(delivery(id, payload, ack_timeout))).unwrap();
    }
    // A delivery the runtime cannot decode is acked as a retry, not run.
    tx.send(Ok(pb::Delivery {
        ack_deadline: None,
        ..delivery("6", "ok", ack_timeout)
    }))
    .unwrap();

    let mut acks = HashMap::new();
    for _ in 0..8 {
        let ack = h.next_ack().await;
        acks.insert(ack.delivery_id.clone(), ack);
    }
    assert_eq!(outcome_of(&acks["1"]), pb::AckOutcome::Succeeded);
    assert_eq!(acks["1"].error, "");
    assert_eq!(outcome_of(&acks["2"]), pb::AckOutcome::Retry);
    assert_eq!(
        acks["2"].retry_after,
        Some(prost_types::Duration {
            seconds: 7,
            nanos: 0
        })
    );
    assert_eq!(acks["2"].error, "rate limited");
    assert_eq!(outcome_of(&acks["3"]), pb::AckOutcome::Failed);
    assert_eq!(acks["3"].error, "bad order");
    assert_eq!(outcome_of(&acks["4"]), pb::AckOutcome::Retry);
    assert_eq!(acks["4"].retry_after, None);
    assert_eq!(acks["4"].error, "upstream timed out");
    assert_eq!(outcome_of(&acks["5"]), pb::AckOutcome::Retry);
    assert_eq!(acks["5"].error, "handler panicked: handler bug");
    assert_eq!(outcome_of(&acks["6"]), pb::AckOutcome::Retry);
    assert!(acks["6"].error.contains("ack_deadline"), "{:?}", acks["6"]);
    assert!(acks.values().all(|a| a.snooze == (a.delivery_id == "7")));
    assert!(acks
        .values()
        .all(|a| a.error_class.is_empty() == (a.delivery_id != "8")));
    assert_eq!(outcome_of(&acks["7"]), pb::AckOutcome::Retry);
    assert_eq!(
        acks["7"].retry_after,
        Some(prost_types::Duration {
            seconds: 90,
            nanos: 0
        })
    );
    assert_eq!(acks["7"].error, "");
    assert_eq!(outcome_of(&acks["8"]), pb::AckOutcome::Retry);
    assert_eq!(acks["8"].retry_after, None);
    assert_eq!(acks["8"].error, "not found");
    assert_eq!(acks["8"].error_class, "http.404");

    // Fast handlers need no deadline extension, and nothing is acked twice.
    h.assert_quiet(Duration::from_millis(300)).await;
    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn runs_at_most_concurrency_handlers() {
    let mut h = Harness::start().await;
    let tx = h.stream();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (running, most) = (Arc::clone(&running), Arc::clone(&most));
        move |_job: Job| {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                sleep(Duration::from_millis(100)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Outcome::success()
            }
        }
    };
    let (stop, run) = spawn_executor(&h, 3, handler);
    assert_eq!(h.next_subscribe().await.max_in_flight, 3);

    // The fake ignores max_in_flight and sends everything at once: the runtime itself must
    // hold the excess back.
    for i in 0..10 {
        tx.send(Ok(delivery(&i.to_string(), "", Duration::from_secs(30))))
            .unwrap();
    }
    let mut acked = HashSet::new();
    while acked.len() < 10 {
        let ack = h.next_ack().await;
        assert_eq!(outcome_of(&ack), pb::AckOutcome::Succeeded);
        assert!(acked.insert(ack.delivery_id), "acked twice");
    }
    assert_eq!(most.load(Ordering::SeqCst), 3);
    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn extends_the_deadline_of_a_slow_handler() {
    let mut h = Harness::start().await;
    let tx = h.stream();
    let handler = |_job: Job| async {
        sleep(Duration::from_millis(2_500)).await;
        Outcome::success()
    };
    let (stop, run) = spawn_executor(&h, 1, handler);
    h.next_subscribe().await;

    let ack_timeout = Duration::from_secs(2);
    tx.send(Ok(delivery("slow", "", ack_timeout))).unwrap();
    let started = tokio::time::Instant::now();
    let mut extensions = Vec::new();
    let ack = loop {
        match h.next().await {
            Event::Extend(r) => {
                assert_eq!(r.delivery_id, "slow");
                extensions.push((
                    started.elapsed(),
                    Duration::try_from(r.extension.unwrap()).unwrap(),
                ));
            }
            Event::Ack(ack) => break ack,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(outcome_of(&ack), pb::AckOutcome::Succeeded);
    // Half of the 2 s timeout in, then half of the extended one: at about 1 s and 2 s.
    assert!(
        (1..=4).contains(&extensions.len()),
        "extensions: {extensions:?}"
    );
    let (first_at, _) = extensions[0];
    assert!(
        first_at >= Duration::from_millis(800) && first_at < Duration::from_millis(1_900),
        "first extension at {first_at:?}"
    );
    for (_, by) in &extensions {
        // The ack timeout as observed on arrival: 2 s less the delivery's travel time.
        assert!(
            *by > Duration::from_millis(1_500) && *by <= ack_timeout,
            "extended by {by:?}"
        );
    }
    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn reconnects_after_the_stream_ends_or_fails() {
    let mut h = Harness::start().await;
    let first = h.stream();
    h.reject_subscribe(Status::unavailable("node starting"));
    let second = h.stream();
    let third = h.stream();
    let handler = |_job: Job| async { Outcome::success() };
    let (stop, run) = spawn_executor(&h, 2, handler);

    h.next_subscribe().await;
    first
        .send(Ok(delivery("a", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(h.next_ack().await.delivery_id, "a");
    // The server ends the stream cleanly (e.g. on its own shutdown)...
    drop(first);
    h.next_subscribe().await; // rejected as UNAVAILABLE: retried after a backoff
    h.next_subscribe().await;
    second
        .send(Ok(delivery("b", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(h.next_ack().await.delivery_id, "b");
    // ...or the stream fails.
    second.send(Err(Status::internal("stream reset"))).unwrap();
    h.next_subscribe().await;
    third
        .send(Ok(delivery("c", "", Duration::from_secs(30))))
        .unwrap();
    let ack = h.next_ack().await;
    assert_eq!(ack.delivery_id, "c");
    assert_eq!(outcome_of(&ack), pb::AckOutcome::Succeeded);

    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn resends_acks_after_transient_errors_only() {
    let mut h = Harness::start().await;
    let tx = h.stream();
    let handler = |_job: Job| async { Outcome::success() };
    let (stop, run) = spawn_executor(&h, 1, handler);
    h.next_subscribe().await;

    h.ack_reply(Err(Status::unavailable("store down")));
    h.ack_reply(Err(Status::deadline_exceeded("slow store")));
    h.ack_reply(Ok(pb::AckResponse::default()));
    tx.send(Ok(delivery("1", "", Duration::from_secs(30))))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(h.next_ack().await.delivery_id, "1");
    }

    // Unknown and stale deliveries are dropped after one try.
    h.ack_reply(Err(Status::not_found("no such delivery")));
    tx.send(Ok(delivery("2", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(h.next_ack().await.delivery_id, "2");
    h.ack_reply(Err(Status::failed_precondition("superseded")));
    tx.send(Ok(delivery("3", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(h.next_ack().await.delivery_id, "3");
    h.assert_quiet(Duration::from_millis(500)).await;

    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_lets_running_handlers_finish_and_ack() {
    let mut h = Harness::start().await;
    let tx = h.stream();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = move |job: Job| {
        let _ = started_tx.send(job.delivery_id.clone());
        async {
            sleep(Duration::from_millis(500)).await;
            Outcome::success()
        }
    };
    let (stop, run) = spawn_executor(&h, 1, handler);
    h.next_subscribe().await;

    tx.send(Ok(delivery("running", "", Duration::from_secs(30))))
        .unwrap();
    tx.send(Ok(delivery("queued", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(
        timeout(WAIT, started.recv()).await.unwrap().unwrap(),
        "running"
    );
    stop.send(()).unwrap();

    let ack = h.next_ack().await;
    assert_eq!(ack.delivery_id, "running");
    assert_eq!(outcome_of(&ack), pb::AckOutcome::Succeeded);
    // The stream stayed open until the ack, so the server still had the delivery assigned.
    assert!(!tx.is_closed());
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
    // Then it closed, handing the queued delivery back, which never started.
    timeout(WAIT, tx.closed()).await.unwrap();
    assert!(started.recv().await.is_none());
    h.assert_quiet(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn drain_timeout_aborts_stuck_handlers() {
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    let mut h = Harness::start().await;
    let tx = h.stream();
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = {
        let dropped = Arc::clone(&dropped);
        move |_job: Job| {
            let guard = SetOnDrop(Arc::clone(&dropped));
            let _ = started_tx.send(());
            async move {
                let _guard = guard;
                std::future::pending::<Outcome>().await
            }
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(
        Executor::builder(h.addr.as_str(), "orders")
            .drain_timeout(Duration::from_millis(200))
            .run(handler, stopped),
    );
    h.next_subscribe().await;
    tx.send(Ok(delivery("stuck", "", Duration::from_secs(30))))
        .unwrap();
    timeout(WAIT, started.recv()).await.unwrap().unwrap();
    stop.send(()).unwrap();

    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler was not aborted"
    );
    timeout(WAIT, tx.closed()).await.unwrap();
    h.assert_quiet(Duration::from_millis(200)).await; // no ack
}

#[tokio::test]
async fn unfixable_subscribe_errors_end_the_run() {
    let mut h = Harness::start().await;
    h.reject_subscribe(Status::unimplemented("no executor API here"));
    let handler = |_job: Job| async { Outcome::success() };
    let (_stop, run) = spawn_executor(&h, 1, handler);
    h.next_subscribe().await;
    let e = timeout(WAIT, run).await.unwrap().unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.to_string().contains("no executor API here"), "{e}");
}
