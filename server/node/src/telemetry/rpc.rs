//! The tower layer around every gRPC call: it times the call into
//! `rebound_rpc_duration_seconds{method, code}` and, when tracing is on, runs it inside a
//! SERVER span whose parent is the caller's W3C `traceparent` / `tracestate` metadata.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Mutex, OnceLock},
    task::{Context, Poll},
    time::Instant,
};

use tracing::{field::Empty, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::metric_definitions as metrics;
use rebound_engine::trace_context::TraceText as _;

/// At most this many distinct method names get labels of their own (`other` past it).
const MAX_METHODS: usize = 128;

/// The method part of a gRPC path, interned: `/rebound.v1.RetryService/EnqueueRetry` gives
/// `rebound.v1.RetryService/EnqueueRetry`. Unknown paths past the cap give `other`.
fn method_of(path: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let path = path.strip_prefix('/').unwrap_or(path);
    let valid = path.len() <= 200
        && path.split('/').count() == 2
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
    if !valid {
        return "other";
    }
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .expect("method names lock");
    if let Some(n) = names.get(path) {
        return n;
    }
    if names.len() >= MAX_METHODS {
        return "other";
    }
    let leaked: &'static str = Box::leak(path.to_string().into_boxed_str());
    names.insert(path.to_string(), leaked);
    leaked
}

use rebound_common::trace::code_name;

/// The layer (`tonic::transport::Server::builder().layer(RpcLayer)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RpcLayer;

impl<S> tower::Layer<S> for RpcLayer {
    type Service = Rpc<S>;
    fn layer(&self, inner: S) -> Rpc<S> {
        Rpc { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Rpc<S> {
    inner: S,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Rpc<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = method_of(req.uri().path());
        let span = if rebound_common::trace::enabled() {
            let (service, name) = method.split_once('/').unwrap_or((method, ""));
            let span = tracing::info_span!(
                target: "rebound_server::rpc",
                "rpc",
                otel.name = method,
                otel.kind = "server",
                otel.status_code = Empty,
                rpc.system = "grpc",
                rpc.service = service,
                rpc.method = name,
                rpc.grpc.status_code = Empty,
            );
            let parent = rebound_engine::trace_context::from_headers(req.headers());
            if !parent.is_empty() {
                let _ = span.set_parent(parent.parent());
            }
            span
        } else {
            tracing::Span::none()
        };
        // The clone that was made ready serves this call; the fresh clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let started = Instant::now();
        let fut = inner.call(req);
        Box::pin(async move {
            let res = fut.instrument(span.clone()).await;
            let code = match &res {
                // An error answered by the handler is a trailers-only response: the status
                // is in the headers. A success's is in the trailers, and is OK.
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .unwrap_or(0),
                Err(_) => 2,
            };
            let name = code_name(code);
            metrics::metrics()
                .rpc_duration
                .get_or_create(&metrics::RpcLabels { method, code: name })
                .observe(started.elapsed().as_secs_f64());
            if !span.is_disabled() {
                span.record("rpc.grpc.status_code", code);
                if code != 0 {
                    span.record("otel.status_code", "ERROR");
                }
            }
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_interned_and_bounded() {
        assert_eq!(
            method_of("/rebound.v1.RetryService/EnqueueRetry"),
            "rebound.v1.RetryService/EnqueueRetry"
        );
        assert_eq!(method_of("/a/b/c"), "other");
        assert_eq!(method_of("/bad path/x"), "other");
        for i in 0..(MAX_METHODS + 10) {
            let _ = method_of(&format!("/x.S/M{i}"));
        }
        assert_eq!(method_of("/x.S/Mnew"), "other");
        assert_eq!(
            method_of("/rebound.v1.RetryService/EnqueueRetry"),
            "rebound.v1.RetryService/EnqueueRetry"
        );
    }
}
