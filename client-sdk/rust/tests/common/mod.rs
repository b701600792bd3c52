//! The fake `ExecutorService` node and the helpers shared by the executor tests.
//!
//! The fake records every call as an [`Event`], so the tests assert what the runtime sent:
//! subscriptions, acks and deadline extensions. `GetRing` is answered as scripted (by default
//! `UNIMPLEMENTED`, so that the executor subscribes to the address it is given) and only
//! counted; the ring tests run several fakes, one per node.

#![allow(dead_code)]

use std::{
    collections::{HashMap, VecDeque},
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
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
    Code, Job,
};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::{sleep, timeout},
};
use tokio_stream::{
    wrappers::{TcpListenerStream, UnboundedReceiverStream},
    Stream,
};
use tonic::{Request, Response, Status};

pub const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub enum Event {
    Subscribed(pb::SubscribeRequest),
    Ack(pb::AckRequest),
    Extend(pb::ExtendDeadlineRequest),
}

pub type DeliveryTx = mpsc::UnboundedSender<Result<pb::Delivery, Status>>;
pub type DeliveryRx = mpsc::UnboundedReceiver<Result<pb::Delivery, Status>>;
pub type DeliveryStream = Pin<Box<dyn Stream<Item = Result<pb::Delivery, Status>> + Send>>;

#[derive(Default)]
pub struct Script {
    /// One entry per `Subscribe` call, in order: a rejection, or the stream to serve. Once
    /// used up, subscriptions get a stream that stays open and silent.
    pub subscribes: VecDeque<Result<DeliveryRx, Status>>,
    /// One entry per `Ack` call, in order; `Ok` once used up.
    pub ack_replies: VecDeque<Result<pb::AckResponse, Status>>,
    /// The answer to every `GetRing`.
    pub ring: RingReply,
}

#[derive(Debug, Clone, Default)]
pub enum RingReply {
    #[default]
    Unimplemented,
    Fail(Code),
    Ring(pb::Ring),
}

pub struct Fake {
    pub script: Mutex<Script>,
    pub events: mpsc::UnboundedSender<Event>,
    pub ring_calls: AtomicUsize,
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

pub struct Harness {
    /// `http://127.0.0.1:port`, for the executor.
    pub addr: String,
    /// `127.0.0.1:port`, as a ring lists the node.
    pub host_port: String,
    pub fake: Arc<Fake>,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl Harness {
    pub async fn start() -> Self {
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
    pub fn set_ring(&self, nodes: &[&Harness]) {
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

    pub fn set_ring_reply(&self, reply: RingReply) {
        self.fake.script.lock().unwrap().ring = reply;
    }

    pub fn ring_calls(&self) -> usize {
        self.fake.ring_calls.load(Ordering::SeqCst)
    }

    /// Scripts the next subscription to serve what is sent on the returned sender.
    pub fn stream(&self) -> DeliveryTx {
        let (tx, rx) = mpsc::unbounded_channel();
        self.fake
            .script
            .lock()
            .unwrap()
            .subscribes
            .push_back(Ok(rx));
        tx
    }

    pub fn reject_subscribe(&self, status: Status) {
        self.fake
            .script
            .lock()
            .unwrap()
            .subscribes
            .push_back(Err(status));
    }

    pub fn ack_reply(&self, reply: Result<pb::AckResponse, Status>) {
        self.fake
            .script
            .lock()
            .unwrap()
            .ack_replies
            .push_back(reply);
    }

    pub async fn next(&mut self) -> Event {
        timeout(WAIT, self.events.recv())
            .await
            .expect("timed out waiting for the executor")
            .expect("the fake server is gone")
    }

    pub async fn next_subscribe(&mut self) -> pb::SubscribeRequest {
        match self.next().await {
            Event::Subscribed(r) => r,
            other => panic!("expected a subscription, got {other:?}"),
        }
    }

    pub async fn next_ack(&mut self) -> pb::AckRequest {
        match self.next().await {
            Event::Ack(r) => r,
            other => panic!("expected an ack, got {other:?}"),
        }
    }

    /// Nothing further arrives within `d`.
    pub async fn assert_quiet(&mut self, d: Duration) {
        if let Ok(Some(event)) = timeout(d, self.events.recv()).await {
            panic!("unexpected {event:?}");
        }
    }
}

pub fn delivery(id: &str, payload: &str, ack_timeout: Duration) -> pb::Delivery {
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
        dependency: String::new(),
    }
}

pub fn outcome_of(ack: &pb::AckRequest) -> pb::AckOutcome {
    pb::AckOutcome::try_from(ack.outcome).unwrap()
}

pub type Run = JoinHandle<Result<(), rebound_client::Error>>;

/// An executor for `orders` through `h`, with a fast reconnect backoff.
pub fn executor(h: &Harness, concurrency: usize) -> ExecutorBuilder {
    Executor::builder(h.addr.as_str(), "orders")
        .executor_id("test-executor")
        .concurrency(concurrency)
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .drain_timeout(Duration::from_secs(5))
}

/// Runs `executor`; it stops when the returned sender is sent to or dropped.
pub fn spawn<H, F, R>(executor: ExecutorBuilder, handler: H) -> (oneshot::Sender<()>, Run)
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
pub fn spawn_executor<H, F, R>(
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

/// Waits until `h` has answered `GetRing` at least `n` times.
pub async fn wait_for_ring_calls(h: &Harness, n: usize) {
    timeout(WAIT, async {
        while h.ring_calls() < n {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("GetRing was called {} times, not {n}", h.ring_calls()));
}
