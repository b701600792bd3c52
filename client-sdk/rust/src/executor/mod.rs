//! Processing due retries: the executor runtime.
//!
//! An [`Executor`] subscribes to a service's due retries, runs an async handler for each
//! delivery, and acknowledges the delivery with the handler's [`Outcome`]: success, a retry
//! (optionally after a given delay), a snooze, or a permanent failure that dead-letters the
//! retry. A [snooze](Outcome::snooze) reschedules the job after a given delay without using an
//! attempt, for work that was not tried but only postponed (a rate limit, a dependency in
//! maintenance). A retry can carry an [error class](Outcome::with_error_class) such as
//! `"http.404"`; when the retry policy lists it among its
//! [`non_retryable_error_classes`](crate::RetryPolicy::non_retryable_error_classes), the
//! server dead-letters the retry at once instead of retrying it.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use rebound_client::executor::{Executor, HandlerError, Job, Outcome};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), rebound_client::Error> {
//!     Executor::builder("http://127.0.0.1:50051", "payments")
//!         .executor_id("payments-worker-1")
//!         // At most 8 handlers at once, across all nodes; also each stream's max_in_flight.
//!         .concurrency(8)
//!         // Runs until Ctrl-C, then lets running handlers finish (for up to 30 s) and ack.
//!         .drain_timeout(Duration::from_secs(30))
//!         .run(charge, tokio::signal::ctrl_c())
//!         .await
//! }
//!
//! async fn charge(job: Job) -> Outcome {
//!     println!("{} attempt {}", job.transaction_id, job.attempt);
//!     match call_card_processor(&job.payload).await {
//!         Ok(()) => Outcome::success(),
//!         Err(Processor::RateLimited(after)) => Outcome::retry_after(after, "rate limited"),
//!         // Not tried at all: come back in a minute without using an attempt.
//!         Err(Processor::Maintenance) => Outcome::snooze(Duration::from_secs(60)),
//!         Err(Processor::Declined(why)) => Outcome::fail(why), // retrying will not help
//!         // Backoff per the policy, unless the policy lists "processor.4xx" as non-retryable.
//!         Err(Processor::Rejected(status)) => {
//!             Outcome::retry(format_args!("processor answered {status}"))
//!                 .with_error_class("processor.4xx")
//!         }
//!         Err(Processor::Down(e)) => Outcome::retry(e), // backoff per the policy
//!     }
//! }
//!
//! // Handlers may also return `Result<(), HandlerError>`: `?` on any error retries.
//! async fn refund(job: Job) -> Result<(), HandlerError> {
//!     let order = String::from_utf8(job.payload).map_err(HandlerError::fail)?;
//!     std::fs::write(std::env::temp_dir().join(&job.transaction_id), order)?;
//!     Ok(())
//! }
//! # enum Processor {
//! #     RateLimited(Duration),
//! #     Maintenance,
//! #     Declined(String),
//! #     Rejected(u16),
//! #     Down(std::io::Error),
//! # }
//! # async fn call_card_processor(_: &[u8]) -> Result<(), Processor> { Ok(()) }
//! ```
//!
//! # What the runtime does
//!
//! - **Every node.** Each node of a cluster dispatches only the retries of the token ranges
//!   it holds, so the runtime subscribes to every live node. It asks the address it is given
//!   for the ring (`GetRing`) at start and then every
//!   [`ring_refresh`](ExecutorBuilder::ring_refresh) (5 s), and keeps one subscription, over
//!   a channel of its own, to each address the ring lists: a node that joins the ring gets a
//!   subscription, and one that leaves it is unsubscribed from once the handlers of its
//!   deliveries have finished and acked. A node that is listed but unreachable is retried as
//!   under *Reconnects*. The ring's addresses are authoritative: the given address (which may
//!   be a load balancer) is only asked for the ring, or, when the given address cannot answer
//!   it, the nodes subscribed to are. When there is no ring (`GetRing` is `UNIMPLEMENTED` or
//!   lists no nodes) or the first `GetRing` fails, the runtime subscribes to the given address
//!   alone, and switches to the ring as soon as one is listed; a later failed `GetRing`
//!   leaves the subscriptions as they are. [`follow_ring(false)`](ExecutorBuilder::follow_ring)
//!   turns all this off: the runtime then subscribes to the given address only. The ring
//!   nodes' channels are plain-text HTTP/2 to `http://{address}`, whatever the given
//!   [`Client`](crate::Client) or [`Channel`] was configured with.
//! - **Bounded concurrency.** At most [`concurrency`](ExecutorBuilder::concurrency) handlers
//!   run at once, across all nodes, and each subscription asks its node for at most that
//!   many unacknowledged deliveries. Each handler runs in its own tokio task, so handlers
//!   must be `Send`.
//! - **Acks.** Each delivery is acknowledged, on the node that sent it, with its handler's
//!   outcome (delivery ids are only known to that node). A handler that panics counts as
//!   [`Outcome::Retry`] with the panic message as the error. An ack that fails with
//!   `UNAVAILABLE`, `DEADLINE_EXCEEDED` or `RESOURCE_EXHAUSTED` is re-sent a few times with
//!   backoff; one the server rejects as unknown (`NOT_FOUND`) or stale
//!   (`FAILED_PRECONDITION`) is logged and dropped, since the delivery has already been
//!   handed to another executor.
//! - **Deadline extension.** A delivery not acknowledged by its `ack_deadline` is redelivered
//!   elsewhere. While a delivery is held, the runtime calls `ExtendDeadline` (on the node
//!   that sent it) when half of the remaining time has passed (or every
//!   [`extend_every`](ExecutorBuilder::extend_every), if sooner), each time by the ack
//!   timeout the delivery came with (or [`extend_by`](ExecutorBuilder::extend_by)). The
//!   observed timeout is the time between arrival and `ack_deadline` on the local clock, so
//!   clock skew between executor and server should stay well below half the ack timeout.
//! - **Reconnects.** When a stream ends or fails, the runtime subscribes again after a
//!   capped exponential backoff with jitter ([`reconnect_backoff`]). The server hands the
//!   closed stream's unacknowledged deliveries to other subscribers: handlers already running
//!   finish and try to ack (the server may reject the ack as stale), and deliveries still
//!   waiting for a free handler slot are dropped without running. `Subscribe` failing with
//!   `INVALID_ARGUMENT`, `UNIMPLEMENTED`, `UNAUTHENTICATED` or `PERMISSION_DENIED` is not
//!   retried, whichever node answers it: [`run`](Executor::run) returns it as an error.
//! - **Graceful shutdown.** When the `shutdown` future completes, no further handler starts;
//!   running handlers finish and ack while their streams stay open, bounded by the
//!   [`drain_timeout`](ExecutorBuilder::drain_timeout). Then the streams close, so the nodes
//!   redeliver at once whatever was not acknowledged, and `run` returns. Handlers still
//!   running at the timeout are aborted at their next `.await`.
//!
//! Delivery is at least once: after a missed deadline, a reconnect or a lost ack, a retry can
//! be delivered again, possibly to another executor, so handlers should be idempotent by
//! [`Job::transaction_id`].
//!
//! The runtime logs through [`tracing`]; each subscription's events are in a
//! `rebound_subscription` span that carries the node's address (and node id), and each
//! delivery's events (including those of the handler) are in a `rebound_job` span within it
//! that carries the service, transaction id, attempt and delivery id.
//!
//! [`reconnect_backoff`]: ExecutorBuilder::reconnect_backoff
//! [`tracing`]: https://docs.rs/tracing

mod acks;
pub(crate) mod backoff;
mod deadline;
mod job;
mod ring;
mod subscription;

use std::{
    fmt,
    future::Future,
    sync::Arc,
    time::{Duration, SystemTime},
};

use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use tokio::{
    sync::{mpsc, watch, Semaphore},
    task::{JoinError, JoinHandle},
    time::{sleep, Instant},
};
use tonic::{
    transport::{Channel, ClientTlsConfig},
    Code,
};

use crate::transport::{Credentials, Transport};
use tracing::Instrument;

use crate::{
    error::{is_retryable_code, Error},
    transport::endpoint_tls,
};

use backoff::Backoff;
use deadline::{extension_span, keep_extended, local_instant};
use ring::{ask_ring, ask_ring_after, Subscriptions, MIN_RING_REFRESH};

type ExecClient = ExecutorServiceClient<Transport>;

pub use job::{HandlerError, IntoOutcome, Job, Outcome};

/// Handlers that may run at once unless [`ExecutorBuilder::concurrency`] says otherwise.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// How long a shutdown waits for running handlers unless
/// [`ExecutorBuilder::drain_timeout`] says otherwise.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the executor asks for the ring unless [`ExecutorBuilder::ring_refresh`] says
/// otherwise.
pub const DEFAULT_RING_REFRESH: Duration = Duration::from_secs(5);

/// The reconnect backoff unless [`ExecutorBuilder::reconnect_backoff`] says otherwise.
const DEFAULT_RECONNECT: Backoff = Backoff {
    initial: Duration::from_millis(250),
    max: Duration::from_secs(30),
};

/// Bound on each `Ack` and `ExtendDeadline` call.
pub(crate) const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Bound on `Subscribe` answering with its response headers.
pub(super) const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Calls per ack, the first included, when the failures are transient.
const ACK_ATTEMPTS: u32 = 5;

const ACK_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(2),
};

/// A stream that stayed up this long (or delivered anything) was healthy, and the reconnect
/// backoff starts over after it ends.
pub(super) const STABLE_STREAM: Duration = Duration::from_secs(10);

/// HTTP/2 keep-alive for connections the executor opens itself, so that a silently dead
/// connection (a half-open TCP connection after a network partition) ends the stream instead
/// of leaving the executor waiting forever.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an [`Executor`] asks for the ring (and subscribes when there is none, see the
/// [module docs](self)): a [`Client`](crate::Client), a [`Channel`], or an address such as
/// `"http://127.0.0.1:50051"` or `"127.0.0.1:50051"`, possibly of a load balancer.
///
/// For an address, the executor connects lazily with HTTP/2 keep-alive, so a node that is not
/// up yet is just retried; an address that is not a URI makes [`Executor::run`] fail.
#[derive(Debug, Clone)]
pub struct Target(TargetKind);

#[derive(Debug, Clone)]
enum TargetKind {
    Client(Box<(ExecClient, Credentials)>),
    Address(String),
}

impl Target {
    /// The executor client of a [`Client`](crate::Client)(crate::Client) (`From<Client>`, in `client`) or of
    /// a channel, with the credentials it sends.
    pub(crate) fn given(client: ExecClient, credentials: Credentials) -> Self {
        Target(TargetKind::Client(Box::new((client, credentials))))
    }

    /// The client to ask first, and the credentials for every node of the ring.
    fn into_client(
        self,
        tls: Option<&ClientTlsConfig>,
    ) -> Result<(ExecClient, Credentials), Error> {
        match self.0 {
            TargetKind::Client(given) => Ok(*given),
            TargetKind::Address(addr) => {
                let credentials = Credentials::default();
                Ok((lazy_client(&addr, &credentials, tls)?, credentials))
            }
        }
    }
}

/// A client for `addr` (`host:port` or a URI) that connects lazily, with HTTP/2 keep-alive.
pub(super) fn lazy_client(
    addr: &str,
    credentials: &Credentials,
    tls: Option<&ClientTlsConfig>,
) -> Result<ExecClient, Error> {
    let channel = endpoint_tls(addr, tls)?
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .connect_lazy();
    Ok(ExecutorServiceClient::with_interceptor(
        channel,
        credentials.clone(),
    ))
}

impl From<Channel> for Target {
    fn from(channel: Channel) -> Self {
        let credentials = Credentials::default();
        Target::given(
            ExecutorServiceClient::with_interceptor(channel, credentials.clone()),
            credentials,
        )
    }
}

impl From<&str> for Target {
    fn from(addr: &str) -> Self {
        Target(TargetKind::Address(addr.to_owned()))
    }
}

impl From<String> for Target {
    fn from(addr: String) -> Self {
        Target(TargetKind::Address(addr))
    }
}

impl From<&String> for Target {
    fn from(addr: &String) -> Self {
        Target(TargetKind::Address(addr.clone()))
    }
}

/// Processes one service's due retries; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Executor {
    target: Target,
    service: String,
    executor_id: String,
    concurrency: usize,
    extend_every: Option<Duration>,
    extend_by: Option<Duration>,
    drain_timeout: Duration,
    reconnect: Backoff,
    follow_ring: bool,
    ring_refresh: Duration,
    tls: Option<ClientTlsConfig>,
}

/// Configures an [`Executor`]; created by [`Executor::builder`] or [`Client::executor`](crate::Client::executor).
#[derive(Debug, Clone)]
#[must_use = "an ExecutorBuilder does nothing until `.run()` is awaited"]
pub struct ExecutorBuilder {
    executor: Executor,
}

impl Executor {
    /// Starts configuring an executor for `service`'s due retries from the cluster that
    /// `target` belongs to: a [`Client`](crate::Client) (or `&Client`), a [`Channel`], or an address. The
    /// executor subscribes to every node of the ring `target` reports, or to `target` itself
    /// when it reports none.
    pub fn builder(target: impl Into<Target>, service: impl Into<String>) -> ExecutorBuilder {
        ExecutorBuilder {
            executor: Executor {
                target: target.into(),
                service: service.into(),
                executor_id: default_executor_id(),
                concurrency: DEFAULT_CONCURRENCY,
                extend_every: None,
                extend_by: None,
                drain_timeout: DEFAULT_DRAIN_TIMEOUT,
                reconnect: DEFAULT_RECONNECT,
                follow_ring: true,
                ring_refresh: DEFAULT_RING_REFRESH,
                tls: None,
            },
        }
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    /// The id this executor subscribes with, generated unless
    /// [`ExecutorBuilder::executor_id`] set one.
    pub fn executor_id(&self) -> &str {
        &self.executor_id
    }

    /// Receives and handles deliveries until `shutdown` completes, then drains (see the
    /// [module docs](self)) and returns `Ok(())`.
    ///
    /// `handler` is called once per delivery and its future runs in its own task; it resolves
    /// to an [`Outcome`] or to a `Result` (see [`IntoOutcome`]). `shutdown` is any future, e.g.
    /// `tokio::signal::ctrl_c()`; its output is ignored. Pass `std::future::pending::<()>()`
    /// to run forever.
    ///
    /// Connection failures, broken streams and failed `GetRing` calls are retried
    /// indefinitely. Returns an error for a concurrency of 0 or an address that is not a URI
    /// ([`Error::InvalidArgument`]), and when `Subscribe` (to any node) fails in a way that
    /// retrying cannot fix: `INVALID_ARGUMENT` (e.g. a bad service name), `UNIMPLEMENTED` (a
    /// server without the executor API), `UNAUTHENTICATED` or `PERMISSION_DENIED`. Running handlers are drained first in that
    /// case too.
    ///
    /// Must be called within a tokio runtime.
    pub async fn run<H, F, S>(self, handler: H, shutdown: S) -> Result<(), Error>
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future + Send + 'static,
        F::Output: IntoOutcome,
        S: Future,
    {
        if self.concurrency == 0 {
            return Err(Error::InvalidArgument(
                "executor concurrency must be at least 1".into(),
            ));
        }
        let concurrency = self
            .concurrency
            .min(Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        let given_label = self.target.to_string();
        let (given, credentials) = self.target.into_client(self.tls.as_ref())?;
        let shared = Arc::new(Shared {
            handler,
            permits: Arc::new(Semaphore::new(concurrency)),
            extend_every: self.extend_every,
            extend_by: self.extend_by,
        });
        let run_span = tracing::info_span!(
            "rebound_executor",
            service = %self.service,
            executor_id = %self.executor_id,
        );
        // Every stream may have the full concurrency in flight: the shared semaphore bounds
        // the handlers, and a node whose share of the retries is large is not held back.
        let request = pb::SubscribeRequest {
            service: self.service,
            executor_id: self.executor_id,
            max_in_flight: concurrency as u32,
        };
        let follow_ring = self.follow_ring;
        let refresh_every = self.ring_refresh.max(MIN_RING_REFRESH);
        let drain_timeout = self.drain_timeout;
        let reconnect = self.reconnect;
        async move {
            let mut shutdown = std::pin::pin!(shutdown);
            let (fatal_tx, mut fatal) = mpsc::unbounded_channel();
            let mut subscriptions = Subscriptions::new(
                shared,
                request,
                reconnect,
                (given, credentials),
                self.tls,
                given_label,
                fatal_tx,
            );

            let result = 'run: {
                if follow_ring {
                    let answer = tokio::select! {
                        biased;
                        _ = shutdown.as_mut() => break 'run Ok(()),
                        answer = ask_ring(subscriptions.ring_sources()) => answer,
                    };
                    subscriptions.apply(answer);
                } else {
                    subscriptions.subscribe_given();
                }
                let mut refresh =
                    std::pin::pin!(ask_ring_after(refresh_every, subscriptions.ring_sources()));
                loop {
                    tokio::select! {
                        biased;
                        _ = shutdown.as_mut() => break 'run Ok(()),
                        Some(status) = fatal.recv() => break 'run Err(Error::from(status)),
                        Some(()) = subscriptions.join_next(), if !subscriptions.is_idle() => {}
                        answer = refresh.as_mut(), if follow_ring => {
                            subscriptions.apply(answer);
                            refresh.set(ask_ring_after(
                                refresh_every,
                                subscriptions.ring_sources(),
                            ));
                        }
                    }
                }
            };

            subscriptions.drain(drain_timeout).await;
            tracing::info!("executor stopped");
            result
        }
        .instrument(run_span)
        .await
    }
}

impl ExecutorBuilder {
    /// Identifies this executor to the server (in its logs and metrics). Defaults to
    /// `$HOSTNAME-<pid>-<random>`.
    pub fn executor_id(mut self, id: impl Into<String>) -> Self {
        self.executor.executor_id = id.into();
        self
    }

    /// The most handlers that run at once, across the subscriptions to all nodes, and the
    /// `max_in_flight` each subscription asks its node for. At least 1; defaults to
    /// [`DEFAULT_CONCURRENCY`].
    pub fn concurrency(mut self, n: usize) -> Self {
        self.executor.concurrency = n;
        self
    }

    /// Extends held deliveries' deadlines at least this often. By default they are extended
    /// when half of the time to the deadline has passed, which is also the longest interval
    /// used with this setting.
    pub fn extend_every(mut self, interval: Duration) -> Self {
        self.executor.extend_every = Some(interval);
        self
    }

    /// How far each `ExtendDeadline` pushes a deadline. Defaults to the ack timeout the
    /// delivery came with (the policy's `ack_timeout`, as observed on arrival).
    pub fn extend_by(mut self, extension: Duration) -> Self {
        self.executor.extend_by = Some(extension);
        self
    }

    /// How long a shutdown waits for running handlers to finish and ack before aborting them.
    /// Defaults to [`DEFAULT_DRAIN_TIMEOUT`].
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.executor.drain_timeout = timeout;
        self
    }

    /// The delays between reconnect attempts: `initial`, doubling per consecutive failure up
    /// to `max`, each with up to half taken off at random. Defaults to 250 ms and 30 s.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.executor.reconnect = Backoff { initial, max };
        self
    }

    /// Whether to follow the cluster ring (see the [module docs](self)): subscribe to every
    /// node that `GetRing` lists, and keep the subscriptions in step with the ring. Defaults
    /// to `true`. With `false`, the executor subscribes to the address (or client) it was given
    /// and nothing else, e.g. when the nodes' advertised addresses are not reachable from the
    /// executor and a single node or proxy is known to route the whole cluster's deliveries.
    pub fn follow_ring(mut self, follow: bool) -> Self {
        self.executor.follow_ring = follow;
        self
    }

    /// How often to ask for the ring while following it; defaults to
    /// [`DEFAULT_RING_REFRESH`]. Intervals below 50 ms count as 50 ms.
    pub fn ring_refresh(mut self, interval: Duration) -> Self {
        self.executor.ring_refresh = interval;
        self
    }

    /// TLS for every connection the executor opens: to an address it was given, and to each
    /// ring node (whose bare `host:port` then means `https://`). The roots to trust and, for
    /// mutual TLS, the client certificate
    /// ([`ClientTlsConfig::identity`](tonic::transport::ClientTlsConfig::identity)). A
    /// [`Client`](crate::Client) or [`Channel`] given as the target keeps its own channel.
    pub fn tls(mut self, tls: ClientTlsConfig) -> Self {
        self.executor.tls = Some(tls);
        self
    }

    pub fn build(self) -> Executor {
        self.executor
    }

    /// Shorthand for [`build`](Self::build) followed by [`Executor::run`].
    pub async fn run<H, F, S>(self, handler: H, shutdown: S) -> Result<(), Error>
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future + Send + 'static,
        F::Output: IntoOutcome,
        S: Future,
    {
        self.executor.run(handler, shutdown).await
    }
}

/// What the tasks of one executor share, across all its subscriptions.
pub(super) struct Shared<H> {
    handler: H,
    /// One per running handler.
    permits: Arc<Semaphore>,
    extend_every: Option<Duration>,
    extend_by: Option<Duration>,
}

fn default_executor_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "executor".to_owned());
    format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

/// The span of one delivery, handler and ack: `rebound_job` in logs, and for OpenTelemetry
/// (through `tracing-opentelemetry`) the CONSUMER span `process <service>` of the messaging
/// conventions, linked to the trace context stored with the retry at its enqueue, so every
/// attempt links to the call that failed.
pub(super) fn job_span(d: &pb::Delivery) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let name = format!("process {}", d.service);
    let span = tracing::info_span!(
        "rebound_job",
        otel.name = name.as_str(),
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "rebound",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = d.service.as_str(),
        messaging.message.id = d.transaction_id.as_str(),
        error.type = tracing::field::Empty,
        service = %d.service,
        transaction_id = %d.transaction_id,
        attempt = d.attempt,
        delivery_id = %d.delivery_id,
    );
    // Each delivery is a trace of its own (not a child of the long-lived subscription),
    // linked to the one that enqueued it.
    let _ = span.set_parent(opentelemetry::Context::new());
    if let Some(sc) = d
        .trace_context
        .as_ref()
        .and_then(|t| crate::trace::span_context(&t.traceparent, &t.tracestate))
    {
        span.add_link(sc);
    }
    span
}

/// Delivery tasks catch their handler's panics, so a failed join is a bug in this crate;
/// it is logged rather than propagated so that the other deliveries carry on.
pub(super) fn check_joined(joined: Result<(), JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            tracing::error!(error = %e, "delivery task panicked");
        }
    }
}

/// Aborts the task when dropped, so that aborting a delivery task aborts its handler too.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Handles one delivery: waits for a handler slot, runs the handler, acks its outcome, and
/// extends the ack deadline all the while. Acks and extensions go through `client`, the
/// channel of the node that sent the delivery: only that node knows the delivery id.
pub(super) async fn process<H, F>(
    shared: Arc<Shared<H>>,
    client: ExecClient,
    acks: acks::Acks,
    delivery: pb::Delivery,
    mut stopped: watch::Receiver<bool>,
) where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: IntoOutcome,
{
    let received = SystemTime::now();
    let received_at = Instant::now();
    let delivery_id = delivery.delivery_id.clone();
    let job = match Job::try_from(delivery) {
        Ok(job) => job,
        Err(e) => {
            // Dead-lettering over a decoding problem would lose the job, and ignoring it would
            // hold a slot until the deadline; a retry keeps it and shows the error in its state.
            tracing::error!(error = %e, "malformed delivery; acknowledging it as a retry");
            ack(&acks, Outcome::retry(e).into_ack_request(delivery_id)).await;
            return;
        }
    };

    let keeper = {
        let span = extension_span(shared.extend_by, job.ack_deadline, received);
        let deadline = local_instant(job.ack_deadline, received, received_at);
        let keep = keep_extended(
            client.clone(),
            delivery_id.clone(),
            deadline,
            span,
            shared.extend_every,
        );
        async move {
            keep.await;
            // Extending is over, but the handler and the ack go on.
            std::future::pending::<()>().await
        }
    };

    let work = async {
        let permit = tokio::select! {
            biased;
            _ = stopped.wait_for(|stopped| *stopped) => {
                tracing::debug!("dropping a delivery that had not started: its stream is closed");
                return;
            }
            permit = Arc::clone(&shared.permits).acquire_owned() => {
                permit.expect("the semaphore is never closed")
            }
        };
        let handler_task = {
            let shared = Arc::clone(&shared);
            tokio::spawn(
                async move { (shared.handler)(job).await.into_outcome() }
                    .instrument(tracing::Span::current()),
            )
        };
        let mut handler_task = AbortOnDrop(handler_task);
        let outcome = match (&mut handler_task.0).await {
            Ok(outcome) => outcome,
            Err(e) if e.is_panic() => Outcome::from_panic(e.into_panic()),
            // Only aborted by this task being dropped; not reached.
            Err(_) => return,
        };
        drop(permit);
        let error_type = match &outcome {
            Outcome::Success => None,
            Outcome::Snooze { .. } | Outcome::Hold { .. } => None,
            Outcome::Retry { error_class, .. } | Outcome::Fail { error_class, .. } => {
                Some(error_class.clone().unwrap_or_else(|| "_OTHER".to_string()))
            }
        };
        if let Some(t) = error_type {
            let span = tracing::Span::current();
            span.record("error.type", t.as_str());
            span.record("otel.status_code", "ERROR");
        }
        match &outcome {
            Outcome::Success => tracing::debug!("handler succeeded"),
            Outcome::Retry {
                after,
                error,
                error_class,
            } => {
                tracing::info!(?after, error = %error, ?error_class, "handler asked for a retry");
            }
            Outcome::Snooze { after } => tracing::info!(?after, "handler snoozed the retry"),
            Outcome::Hold {
                duration, reason, ..
            } => tracing::info!(?duration, reason = %reason, "handler held the retry's dependency"),
            Outcome::Fail { error, error_class } => {
                tracing::warn!(error = %error, ?error_class, "handler failed for good");
            }
        }
        ack(&acks, outcome.into_ack_request(delivery_id.clone())).await;
    };

    tokio::select! {
        () = work => {}
        () = keeper => {}
    }
}

/// Sends an ack, re-sending it after transient failures. Failures are logged, not returned:
/// an unacknowledged delivery is redelivered after its deadline, which is the best recovery
/// there is.
async fn ack(acks: &acks::Acks, request: pb::AckRequest) {
    let mut failures = 0;
    loop {
        let status = match acks.send(request.clone()).await {
            Ok(response) => {
                tracing::debug!(
                    dead_lettered = response.dead_lettered,
                    snoozed = response.snoozed,
                    next_due_time = ?response.next_due_time,
                    "acknowledged"
                );
                return;
            }
            Err(status) => status,
        };
        failures += 1;
        match status.code() {
            Code::NotFound | Code::FailedPrecondition => {
                tracing::warn!(
                    code = ?status.code(),
                    message = status.message(),
                    "ack rejected: the delivery is unknown, expired or superseded (handed to \
                     another executor); dropping it"
                );
                return;
            }
            code if is_retryable_code(code) && failures < ACK_ATTEMPTS => {
                let delay = ACK_BACKOFF.delay(failures - 1);
                tracing::debug!(
                    ?code,
                    message = status.message(),
                    retry_in = ?delay,
                    "ack failed; sending it again"
                );
                sleep(delay).await;
            }
            code => {
                tracing::error!(
                    ?code,
                    message = status.message(),
                    attempts = failures,
                    "ack failed; the delivery will be redelivered after its deadline"
                );
                return;
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            TargetKind::Client(..) => f.write_str("client"),
            TargetKind::Address(addr) => f.write_str(addr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::timeout;

    #[test]
    fn builder_sets_every_option() {
        let e = Executor::builder("127.0.0.1:50051", "orders")
            .executor_id("w-1")
            .concurrency(3)
            .extend_every(Duration::from_secs(5))
            .extend_by(Duration::from_secs(60))
            .drain_timeout(Duration::from_secs(2))
            .reconnect_backoff(Duration::from_millis(10), Duration::from_secs(1))
            .follow_ring(false)
            .ring_refresh(Duration::from_secs(1))
            .build();
        assert_eq!(e.service(), "orders");
        assert_eq!(e.executor_id(), "w-1");
        assert_eq!(e.concurrency, 3);
        assert_eq!(e.extend_every, Some(Duration::from_secs(5)));
        assert_eq!(e.extend_by, Some(Duration::from_secs(60)));
        assert_eq!(e.drain_timeout, Duration::from_secs(2));
        assert_eq!(
            e.reconnect,
            Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_secs(1)
            }
        );
        assert_eq!(e.target.to_string(), "127.0.0.1:50051");
        assert!(!e.follow_ring);
        assert_eq!(e.ring_refresh, Duration::from_secs(1));

        let defaults = Executor::builder("x:1", "s").build();
        assert_eq!(defaults.concurrency, DEFAULT_CONCURRENCY);
        assert_eq!(defaults.drain_timeout, DEFAULT_DRAIN_TIMEOUT);
        assert_eq!(defaults.extend_every, None);
        assert_eq!(defaults.extend_by, None);
        assert!(defaults.follow_ring);
        assert_eq!(defaults.ring_refresh, DEFAULT_RING_REFRESH);
        assert!(!defaults.executor_id().is_empty());
    }

    #[tokio::test]
    async fn rejects_bad_configuration() {
        let handler = |_job: Job| async { Outcome::success() };
        let e = Executor::builder("127.0.0.1:1", "s")
            .concurrency(0)
            .run(handler, std::future::pending::<()>())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");

        let e = Executor::builder("not a uri", "s")
            .run(handler, std::future::pending::<()>())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }

    #[tokio::test]
    async fn shutdown_while_the_node_is_unreachable_returns() {
        // Port 1 refuses connections, so the executor is in its reconnect loop when the
        // shutdown comes.
        let handler = |_job: Job| async { Outcome::success() };
        let result = timeout(
            Duration::from_secs(10),
            Executor::builder("127.0.0.1:1", "s")
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50))
                .run(handler, sleep(Duration::from_millis(200))),
        )
        .await
        .expect("run returns after the shutdown");
        assert!(result.is_ok(), "{result:?}");
    }
}
