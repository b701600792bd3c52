//! The executor runtime against several fake nodes: following the ring `GetRing` answers.
//! The fake and the helpers are in `common`.

mod common;

use common::*;

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use rebound_client::{proto as pb, Code, Job, Outcome};
use tokio::{
    sync::{mpsc, Semaphore},
    time::{sleep, timeout},
};

#[tokio::test]
async fn subscribes_to_every_ring_node_and_acks_where_delivered() {
    // The given address only answers GetRing (like a load balancer in front of the nodes);
    // the ring lists two nodes, each with its own stream.
    let mut seed = Harness::start().await;
    let mut a = Harness::start().await;
    let mut b = Harness::start().await;
    seed.set_ring(&[&a, &b]);
    let a_tx = a.stream();
    let b_tx = b.stream();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (running, most) = (Arc::clone(&running), Arc::clone(&most));
        move |job: Job| {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let work = if job.payload == b"slow" { 1_500 } else { 100 };
                sleep(Duration::from_millis(work)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Outcome::success()
            }
        }
    };
    let (stop, run) = spawn_executor(&seed, 2, handler);

    // Each stream may have the full concurrency in flight...
    assert_eq!(a.next_subscribe().await.max_in_flight, 2);
    assert_eq!(b.next_subscribe().await.max_in_flight, 2);
    assert!(seed.ring_calls() >= 1);
    for i in 0..3 {
        let ack_timeout = Duration::from_secs(30);
        a_tx.send(Ok(delivery(&format!("a{i}"), "", ack_timeout)))
            .unwrap();
        b_tx.send(Ok(delivery(&format!("b{i}"), "", ack_timeout)))
            .unwrap();
    }
    // ...and each delivery is acked on the node that sent it.
    for (node, prefix) in [(&mut a, "a"), (&mut b, "b")] {
        let mut acked = HashSet::new();
        while acked.len() < 3 {
            let ack = node.next_ack().await;
            assert!(ack.delivery_id.starts_with(prefix), "{ack:?}");
            assert_eq!(outcome_of(&ack), pb::AckOutcome::Succeeded);
            assert!(acked.insert(ack.delivery_id), "acked twice");
        }
    }
    // ...but one concurrency limit holds across both streams.
    assert_eq!(most.load(Ordering::SeqCst), 2);

    // Deadline extensions also go to the node that sent the delivery.
    b_tx.send(Ok(delivery("b-slow", "slow", Duration::from_secs(2))))
        .unwrap();
    let mut extended = false;
    loop {
        match b.next().await {
            Event::Extend(r) => {
                assert_eq!(r.delivery_id, "b-slow");
                extended = true;
            }
            Event::Ack(ack) => {
                assert_eq!(ack.delivery_id, "b-slow");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(extended, "the slow delivery's deadline was not extended");
    a.assert_quiet(Duration::from_millis(100)).await;
    // Nothing subscribed to the given address: the ring's addresses are authoritative.
    seed.assert_quiet(Duration::ZERO).await;

    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
    timeout(WAIT, a_tx.closed()).await.unwrap();
    timeout(WAIT, b_tx.closed()).await.unwrap();
}

#[tokio::test]
async fn follows_ring_changes() {
    let mut seed = Harness::start().await;
    let mut a = Harness::start().await;
    let mut b = Harness::start().await;
    let mut c = Harness::start().await;
    seed.set_ring(&[&a, &b]);
    let a_tx = a.stream();
    let b_tx = b.stream();
    let c_tx = c.stream();
    let gate = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = {
        let gate = Arc::clone(&gate);
        move |job: Job| {
            let _ = started_tx.send(job.delivery_id.clone());
            let gate = Arc::clone(&gate);
            async move {
                if job.payload == b"hold" {
                    gate.acquire().await.unwrap().forget();
                }
                Outcome::success()
            }
        }
    };
    let (stop, run) = spawn(
        executor(&seed, 4).ring_refresh(Duration::from_millis(100)),
        handler,
    );
    a.next_subscribe().await;
    b.next_subscribe().await;

    // B leaves the ring while one of its deliveries is being handled, and C joins.
    b_tx.send(Ok(delivery("b-held", "hold", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(
        timeout(WAIT, started.recv()).await.unwrap().unwrap(),
        "b-held"
    );
    seed.set_ring(&[&a, &c]);
    c.next_subscribe().await;
    // B's stream stays open while the handler runs, so that B accepts the ack...
    sleep(Duration::from_millis(300)).await;
    assert!(!b_tx.is_closed());
    gate.add_permits(1);
    let ack = b.next_ack().await;
    assert_eq!(ack.delivery_id, "b-held");
    assert_eq!(outcome_of(&ack), pb::AckOutcome::Succeeded);
    // ...and then closes for good.
    timeout(WAIT, b_tx.closed()).await.unwrap();
    b.assert_quiet(Duration::from_millis(300)).await;

    // A's subscription carried on through the change; C's works.
    a_tx.send(Ok(delivery("a1", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(a.next_ack().await.delivery_id, "a1");
    c_tx.send(Ok(delivery("c1", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(c.next_ack().await.delivery_id, "c1");

    // While the given address cannot answer, the ring nodes are asked instead.
    a.set_ring(&[&a]);
    c.set_ring(&[&a]);
    seed.set_ring_reply(RingReply::Fail(Code::Unavailable));
    timeout(WAIT, c_tx.closed()).await.unwrap();
    assert!(!a_tx.is_closed());
    a.assert_quiet(Duration::from_millis(300)).await;
    seed.assert_quiet(Duration::ZERO).await;

    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
    timeout(WAIT, a_tx.closed()).await.unwrap();
}

#[tokio::test]
async fn subscribes_to_the_given_address_without_a_ring() {
    for reply in [
        RingReply::Unimplemented,
        RingReply::Ring(pb::Ring::default()),
        RingReply::Ring(pb::Ring {
            nodes: vec![pb::RingNode {
                node_id: "blank".into(),
                address: " ".into(),
                compactor: true,
                ranges: Vec::new(),
            }],
        }),
        RingReply::Fail(Code::Unavailable),
    ] {
        let mut seed = Harness::start().await;
        seed.set_ring_reply(reply.clone());
        let tx = seed.stream();
        let handler = |_job: Job| async { Outcome::success() };
        let (stop, run) = spawn(
            executor(&seed, 2).ring_refresh(Duration::from_millis(100)),
            handler,
        );
        seed.next_subscribe().await;
        tx.send(Ok(delivery("1", "", Duration::from_secs(30))))
            .unwrap();
        assert_eq!(seed.next_ack().await.delivery_id, "1", "{reply:?}");
        // GetRing is asked again on every refresh, without disturbing the subscription.
        wait_for_ring_calls(&seed, 3).await;
        seed.assert_quiet(Duration::from_millis(100)).await;
        assert!(!tx.is_closed(), "{reply:?}");

        // Once there is a ring, the executor follows it instead.
        let mut node = Harness::start().await;
        seed.set_ring(&[&node]);
        node.next_subscribe().await;
        timeout(WAIT, tx.closed()).await.unwrap();

        stop.send(()).unwrap();
        timeout(WAIT, run).await.unwrap().unwrap().unwrap();
    }
}

#[tokio::test]
async fn follow_ring_false_ignores_the_ring() {
    let mut seed = Harness::start().await;
    let node = Harness::start().await;
    seed.set_ring(&[&node]);
    let tx = seed.stream();
    let handler = |_job: Job| async { Outcome::success() };
    let (stop, run) = spawn(
        executor(&seed, 1)
            .follow_ring(false)
            .ring_refresh(Duration::from_millis(50)),
        handler,
    );
    seed.next_subscribe().await;
    tx.send(Ok(delivery("1", "", Duration::from_secs(30))))
        .unwrap();
    assert_eq!(seed.next_ack().await.delivery_id, "1");
    sleep(Duration::from_millis(200)).await;
    assert_eq!(seed.ring_calls(), 0);
    assert_eq!(node.ring_calls(), 0);
    stop.send(()).unwrap();
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_drains_every_node() {
    let mut seed = Harness::start().await;
    let mut a = Harness::start().await;
    let mut b = Harness::start().await;
    seed.set_ring(&[&a, &b]);
    let a_tx = a.stream();
    let b_tx = b.stream();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = move |job: Job| {
        let _ = started_tx.send(job.delivery_id.clone());
        async {
            sleep(Duration::from_millis(500)).await;
            Outcome::success()
        }
    };
    let (stop, run) = spawn_executor(&seed, 2, handler);
    a.next_subscribe().await;
    b.next_subscribe().await;
    a_tx.send(Ok(delivery("a", "", Duration::from_secs(30))))
        .unwrap();
    b_tx.send(Ok(delivery("b", "", Duration::from_secs(30))))
        .unwrap();
    for _ in 0..2 {
        timeout(WAIT, started.recv()).await.unwrap().unwrap();
    }
    stop.send(()).unwrap();

    // Both handlers finish and ack, each on its node, while both streams stay open.
    sleep(Duration::from_millis(100)).await;
    assert!(!a_tx.is_closed() && !b_tx.is_closed());
    assert_eq!(a.next_ack().await.delivery_id, "a");
    assert_eq!(b.next_ack().await.delivery_id, "b");
    timeout(WAIT, run).await.unwrap().unwrap().unwrap();
    timeout(WAIT, a_tx.closed()).await.unwrap();
    timeout(WAIT, b_tx.closed()).await.unwrap();
    seed.assert_quiet(Duration::ZERO).await;
}
