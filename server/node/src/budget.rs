//! The request byte budget (`REBOUND_MAX_INFLIGHT_BYTES`): what the node holds of the
//! requests it is serving is bounded in bytes, not only in count.
//!
//! A tower layer around the gRPC services counts each request's body as it arrives, frame by
//! frame, against one node-wide semaphore of bytes, and keeps what it took until the handler
//! has answered (the decoded request lives that long). A frame that does not fit ends the
//! body with RESOURCE_EXHAUSTED, before the message is decoded and before anything is
//! written, with a `grpc-retry-pushback-ms` hint that clients honour; the caller may retry.
//! Streams are not counted (`Subscribe`, health `Watch`, reflection): their requests are
//! small and live as long as the stream; what a stream holds is bounded by
//! `REBOUND_MAX_IN_FLIGHT_BYTES` and `REBOUND_MAX_SUBSCRIBERS`.
//!
//! Each byte is counted `REQUEST_COPIES` times, for the copies a request lives in while it is
//! served, so that the budget bounds memory. The budget is at least that many times the
//! largest request a node accepts (checked at start), so a request alone always fits.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use http_body::Frame;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metric_definitions as metrics;

/// The retry hint of a shed request: long enough for the requests held to finish (a write
/// takes milliseconds, a paused database up to the request timeout), short enough that a
/// client comes back while the node has room.
pub const PUSHBACK_MS: u64 = 250;

/// Each request byte is counted this many times: a request is in memory as its body, the
/// decoder's buffer (which grows by doubling), its decoded message, the rows made of it and
/// the database requests that carry them, so the budget bounds the memory requests take, not
/// only their bodies (`scripts/overload` measures it).
pub const REQUEST_COPIES: usize = 6;

/// Requests that are not counted: the long-lived streams.
fn counted(path: &str) -> bool {
    !(path == "/rebound.v1.ExecutorService/Subscribe"
        || path.starts_with("/grpc.health.")
        || path.starts_with("/grpc.reflection."))
}

/// The node's budget of request bytes.
#[derive(Debug)]
pub struct RequestBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

impl RequestBudget {
    pub fn new(total: usize) -> Arc<Self> {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        })
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.total - self.bytes.available_permits()
    }

    /// Takes `n` bytes, or None when they do not fit now.
    fn take(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n.min(self.total)).unwrap_or(u32::MAX);
        self.bytes.clone().try_acquire_many_owned(n).ok()
    }

    fn shed(&self) -> tonic::Status {
        metrics::metrics()
            .requests_shed
            .get_or_create(&metrics::ReasonLabels {
                reason: "inflight_bytes",
            })
            .inc();
        let mut status = tonic::Status::resource_exhausted(format!(
            "the requests this node holds take {} of its {} bytes (REBOUND_MAX_INFLIGHT_BYTES); \
             nothing was done: retry after {PUSHBACK_MS} ms",
            self.held(),
            self.total
        ));
        status.metadata_mut().insert(
            "grpc-retry-pushback-ms",
            PUSHBACK_MS.to_string().parse().expect("digits are ASCII"),
        );
        status
    }

    fn observe(&self) {
        metrics::metrics()
            .inflight_request_bytes
            .set(i64::try_from(self.held()).unwrap_or(i64::MAX));
    }
}

/// What one request has taken, given back when the call has been answered.
#[derive(Debug, Default)]
struct Held(Mutex<Option<OwnedSemaphorePermit>>);

impl Held {
    fn add(&self, permit: OwnedSemaphorePermit) {
        let mut held = self.0.lock().expect("held bytes lock");
        match held.as_mut() {
            Some(p) => p.merge(permit),
            None => *held = Some(permit),
        }
    }
}

/// The layer (`tonic::transport::Server::builder().layer(BudgetLayer::new(budget))`).
#[derive(Debug, Clone)]
pub struct BudgetLayer {
    budget: Arc<RequestBudget>,
}

impl BudgetLayer {
    pub fn new(budget: Arc<RequestBudget>) -> Self {
        Self { budget }
    }
}

impl<S> tower::Layer<S> for BudgetLayer {
    type Service = Budgeted<S>;
    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            budget: self.budget.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Budgeted<S> {
    inner: S,
    budget: Arc<RequestBudget>,
}

impl<S, RB> tower::Service<http::Request<tonic::body::Body>> for Budgeted<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        // The clone that was made ready serves this call; the fresh clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if !counted(req.uri().path()) {
            return Box::pin(inner.call(req));
        }
        let held = Arc::new(Held::default());
        let budget = self.budget.clone();
        let req = req.map(|body| {
            tonic::body::Body::new(Counted {
                body,
                budget: budget.clone(),
                held: held.clone(),
            })
        });
        let fut = inner.call(req);
        Box::pin(async move {
            let answer = fut.await;
            // The handler has answered: what its request held is given back.
            drop(held);
            budget.observe();
            answer
        })
    }
}

/// A request body that takes its bytes from the budget as they arrive.
struct Counted {
    body: tonic::body::Body,
    budget: Arc<RequestBudget>,
    held: Arc<Held>,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            match self.budget.take(data.len().saturating_mul(REQUEST_COPIES)) {
                Some(permit) => {
                    self.held.add(permit);
                    self.budget.observe();
                }
                None => return Poll::Ready(Some(Err(self.budget.shed()))),
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_taken_until_the_budget_is_full_and_given_back() {
        let budget = RequestBudget::new(100);
        let a = budget.take(60).expect("fits");
        assert_eq!(budget.held(), 60);
        assert!(budget.take(41).is_none(), "over the budget");
        let held = Held::default();
        held.add(a);
        held.add(budget.take(40).expect("fits exactly"));
        assert_eq!(budget.held(), 100);
        drop(held);
        assert_eq!(budget.held(), 0);
        // More than the whole budget is taken as the whole budget (a request alone fits).
        let all = budget.take(1_000).expect("alone");
        assert_eq!(budget.held(), 100);
        drop(all);
    }

    #[test]
    fn a_shed_request_says_why_and_when_to_come_back() {
        let budget = RequestBudget::new(10);
        let status = budget.shed();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("REBOUND_MAX_INFLIGHT_BYTES"));
        assert_eq!(
            status.metadata().get("grpc-retry-pushback-ms").unwrap(),
            "250"
        );
    }

    #[test]
    fn streams_are_not_counted() {
        assert!(counted("/rebound.v1.RetryService/EnqueueRetryBatch"));
        assert!(counted("/rebound.v1.ExecutorService/AckBatch"));
        assert!(!counted("/rebound.v1.ExecutorService/Subscribe"));
        assert!(!counted("/grpc.health.v1.Health/Watch"));
        assert!(!counted(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        ));
    }
}
