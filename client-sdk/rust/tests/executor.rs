//! The executor runtime against an in-process fake `ExecutorService`, scripted per test.
//!
//! The fake records every call as an [`Event`], so the tests assert what the runtime sent:
//! subscriptions, acks and deadline extensions. `GetRing` is answered as scripted (by default
//! `UNIMPLEMENTED`, so that the executor subscribes to the address it is given) and only
//! counted; the ring tests run several fakes, one per node.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, SystemTime},
};

use rebound_client::{
    executor::{Executor, ExecutorBuilder},
    proto::{
        self as pb,
        executor_service_server::{ExecutorService, ExecutorServiceServer},
    },
    Code, HandlerError, Job, Outcome,
};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot, Semaphore},
    task::JoinHandle,
    time::{sleep, timeout},
};
use tokio_stream::{
    wrappers::{TcpListenerStream, UnboundedReceiverStream},
    Stream,
};
use tonic::{Request, Response, Status};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Event {
    Subscribed(pb::SubscribeRequest),
    Ack(pb::AckRequest),
    Extend(pb::ExtendDeadlineRequest),
}

type DeliveryTx = mpsc::UnboundedSender<Result<pb::Delivery, Status>>;
type DeliveryRx = mpsc::UnboundedReceiver<Result<pb::Delivery, Status>>;
type DeliveryStream = Pin<Box<dyn Stream<Item = Result<pb::Delivery, Status>> + Send>>;

#[derive(Default)]
struct Script {
    /// One entry per `Subscribe` call, in order: a rejection, or the stream to serve. Once
    /// used up, subscriptions get a stream that stays open and silent.
    subscribes: VecDeque<Result<DeliveryRx, Status>>,
    /// One entry per `Ack` call, in order; `Ok` once used up.
    ack_replies: VecDeque<Result<pb::AckResponse, Status>>,
    /// The answer to every `GetRing`.
    ring: RingReply,
}

#[derive(Debug, Clone, Default)]
enum RingReply {
    #[default]
    Unimplemented,
    Fail(Code),
    Ring(pb::Ring),
}

struct Fake {
    script: Mutex<Script>,
    events: mpsc::UnboundedSender<Event>,
    ring_calls: AtomicUsize,
}

#[tonic::async_trait]
impl ExecutorService for Fake {
    type SubscribeStream = DeliveryStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<DeliveryStream>, Status> {
        let _ = self.events.send(Event::Subscribed(request.into_inner()));
        let next = self.script.lock().unwrap().subscribes.pop_front();
        match next {
            Some(Ok(rx)) => Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx)))),
            Some(Err(status)) => Err(status),
            None => Ok(Response::new(Box::pin(tokio_stream::pending()))),
        }
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let _ = self.events.send(Event::Ack(request.into_inner()));
        let reply = self.script.lock().unwrap().ack_replies.pop_front();
        reply
            .unwrap_or(Ok(pb::AckResponse::default()))
            .map(Response::new)
    }

    /// Acks that queued up come as one batch: each is an `Event::Ack` with its scripted reply.
    async fn ack_batch(
        &self,
        request: Request<pb::AckBatchRequest>,
    ) -> Result<Response<pb::AckBatchResponse>, Status> {
        let mut results = Vec::new();
        for ack in request.into_inner().acks {
            let _ = self.events.send(Event::Ack(ack));
            let reply = self.script.lock().unwrap().ack_replies.pop_front();
            results.push(pb::AckBatchResult {
                result: Some(match reply.unwrap_or(Ok(pb::AckResponse::default())) {
                    Ok(r) => pb::ack_batch_result::Result::Response(r),
                    Err(s) => pb::ack_batch_result::Result::Error(pb::AckError {
                        code: s.code() as i32,
                        message: s.message().to_string(),
                    }),
                }),
            });
        }
        Ok(Response::new(pb::AckBatchResponse { results }))
    }

    async fn extend_deadline(
        &self,
        request: Request<pb::ExtendDeadlineRequest>,
    ) -> Result<Response<pb::ExtendDeadlineResponse>, Status> {
        let request = request.into_inner();
        let extension = Duration::try_from(request.extension.unwrap()).unwrap();
        let _ = self.events.send(Event::Extend(request));
        Ok(Response::new(pb::ExtendDeadlineResponse {
            ack_deadline: Some((SystemTime::now() + extension).into()),
        }))
    }

    async fn get_ring(
        &self,
        _request: Request<pb::GetRingRequest>,
    ) -> Result<Response<pb::Ring>, Status> {
        self.ring_calls.fetch_add(1, Ordering::SeqCst);
        let reply = self.script.lock().unwrap().ring.clone();
        match reply {
            RingReply::Unimplemented => Err(Status::unimplemented("no ring here")),
            RingReply::Fail(code) => Err(Status::new(code, "scripted GetRing failure")),
            RingReply::Ring(ring) => Ok(Response::new(ring)),
        }
    }
}

struct Harness {
    /// `http://127.0.0.1:port`, for the executor.
    addr: String,
    /// `127.0.0.1:port`, as a ring lists the node.
    host_port: String,
    fake: Arc<Fake>,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Harness {
    async fn start() -> Self {
        let (events_tx, events) = mpsc::unbounded_channel();
        let fake = Arc::new(Fake {
            script: Mutex::default(),
            events: events_tx,
            ring_calls: AtomicUsize::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host_port = listener.local_addr().unwrap().to_string();
        let addr = format!("http://{host_port}");
        let service = ExecutorServiceServer::from_arc(Arc::clone(&fake));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Harness {
            addr,
            host_port,
            fake,
            events,
        }
    }

    /// Answers `GetRing` with these nodes from now on.
    fn set_ring(&self, nodes: &[&Harness]) {
        let nodes = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| pb::RingNode {
                node_id: format!("node-{i}"),
                address: node.host_port.clone(),
                compactor: i == 0,
                ranges: Vec::new(),
            })
            .collect();
        self.set_ring_reply(RingReply::Ring(pb::Ring { nodes }));
    }

    fn set_ring_reply(&self, reply: RingReply) {
        self.fake.script.lock().unwrap().ring = reply;
    }

    fn ring_calls(&self) -> usize {
        self.fake.ring_calls.load(Ordering::SeqCst)
    }

    /// Scripts the next subscription to serve what is sent on the returned sender.
    fn stream(&self) -> DeliveryTx {
        let (tx, rx) = mpsc::unbounded_channel();
        self.fake
            .script
            .lock()
            .unwrap()
            .subscribes
            .push_back(Ok(rx));
        tx
    }

    fn reject_subscribe(&self, status: Status) {
        self.fake
            .script
            .lock()
            .unwrap()
            .subscribes
            .push_back(Err(status));
    }

    fn ack_reply(&self, reply: Result<pb::AckResponse, Status>) {
        self.fake
            .script
            .lock()
            .unwrap()
            .ack_replies
            .push_back(reply);
    }

    async fn next(&mut self) -> Event {
        timeout(WAIT, self.events.recv())
            .await
            .expect("timed out waiting for the executor")
            .expect("the fake server is gone")
    }

    async fn next_subscribe(&mut self) -> pb::SubscribeRequest {
        match self.next().await {
            Event::Subscribed(r) => r,
            other => panic!("expected a subscription, got {other:?}"),
        }
    }

    async fn next_ack(&mut self) -> pb::AckRequest {
        match self.next().await {
            Event::Ack(r) => r,
            other => panic!("expected an ack, got {other:?}"),
        }
    }

    /// Nothing further arrives within `d`.
    async fn assert_quiet(&mut self, d: Duration) {
        if let Ok(Some(event)) = timeout(d, self.events.recv()).await {
            panic!("unexpected {event:?}");
        }
    }
}

fn delivery(id: &str, payload: &str, ack_timeout: Duration) -> pb::Delivery {
    let now = SystemTime::now();
    pb::Delivery {
        delivery_id: id.into(),
        service: "orders".into(),
        transaction_id: format!("tx-{id}"),
        attempt: 1,
        payload: payload.as_bytes().to_vec(),
        attributes: HashMap::new(),
        due_time: Some(now.into()),
        first_enqueued_at: Some(now.into()),
        ack_deadline: Some((now + ack_timeout).into()),
        last_error: String::new(),
        trace_context: None,
    }
}

fn outcome_of(ack: &pb::AckRequest) -> pb::AckOutcome {
    pb::AckOutcome::try_from(ack.outcome).unwrap()
}

type Run = JoinHandle<Result<(), rebound_client::Error>>;

/// An executor for `orders` through `h`, with a fast reconnect backoff.
fn executor(h: &Harness, concurrency: usize) -> ExecutorBuilder {
    Executor::builder(h.addr.as_str(), "orders")
        .executor_id("test-executor")
        .concurrency(concurrency)
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .drain_timeout(Duration::from_secs(5))
}

/// Runs `executor`; it stops when the returned sender is sent to or dropped.
fn spawn<H, F, R>(executor: ExecutorBuilder, handler: H) -> (oneshot::Sender<()>, Run)
where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = R> + Send + 'static,
    R: rebound_client::executor::IntoOutcome,
{
    let (stop, stopped) = oneshot::channel::<()>();
    (stop, tokio::spawn(executor.run(handler, stopped)))
}

/// Runs an executor for `orders` through `h` with a fast reconnect backoff; it stops when the
/// returned sender is sent to or dropped.
fn spawn_executor<H, F, R>(
    h: &Harness,
    concurrency: usize,
    handler: H,
) -> (oneshot::Sender<()>, Run)
where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = R> + Send + 'static,
    R: rebound_client::executor::IntoOutcome,
{
    spawn(executor(h, concurrency), handler)
}

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

/// Waits until `h` has answered `GetRing` at least `n` times.
async fn wait_for_ring_calls(h: &Harness, n: usize) {
    timeout(WAIT, async {
        while h.ring_calls() < n {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("GetRing was called {} times, not {n}", h.ring_calls()));
}

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
