//! The spans of the messaging conventions (OpenTelemetry semantic conventions for
//! messaging): `send <service>` for an enqueue, `settle <service>` for an ack. `process
//! <service>` is the executor's, in the SDK. Each is disabled (and costs nothing) when
//! tracing is off.

use opentelemetry::trace::TraceContextExt;
use tracing::{field::Empty, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::trace_context::TraceText as _;
use rebound_store::context::TextContext;

/// The `send <service>` PRODUCER span of one enqueue (disabled when tracing is off), a
/// child of the current span, or of the item's own trace context when it has one.
pub fn send(service: &str, transaction_id: &str, own: &TextContext) -> Span {
    if !rebound_common::trace::enabled() {
        return Span::none();
    }
    let name = format!("send {service}");
    let span = tracing::info_span!(
        target: "rebound_server::api",
        "send",
        otel.name = name.as_str(),
        otel.kind = "producer",
        otel.status_code = Empty,
        messaging.system = "rebound",
        messaging.operation.type = "send",
        messaging.operation.name = "send",
        messaging.destination.name = service,
        messaging.message.id = transaction_id,
        error.type = Empty,
    );
    if !own.is_empty() {
        let _ = span.set_parent(own.parent());
    }
    span
}

/// The `settle <service>` span of one ack, linked to the delivery's stored trace context
/// (the enqueue that started the retry), a child of the current span (the Ack call's).
pub fn settle(
    service: &str,
    transaction_id: &str,
    outcome: &'static str,
    delivered: &TextContext,
) -> Span {
    if !rebound_common::trace::enabled() {
        return Span::none();
    }
    let name = format!("settle {service}");
    let span = tracing::info_span!(
        target: "rebound_server::dispatch",
        "settle",
        otel.name = name.as_str(),
        otel.kind = "client",
        otel.status_code = Empty,
        messaging.system = "rebound",
        messaging.operation.type = "settle",
        messaging.operation.name = outcome,
        messaging.destination.name = service,
        messaging.message.id = transaction_id,
        error.type = Empty,
    );
    if let Some(sc) = delivered.span_context() {
        span.add_link(sc);
    }
    span
}

/// The `POST` CLIENT span of one push request (HTTP semantic conventions), a child of the
/// delivery's stored trace context (the enqueue that started the retry); disabled when
/// tracing is off. `http.response.status_code` is recorded when the answer comes.
pub fn push(service: &str, transaction_id: &str, url: &url::Url, delivered: &TextContext) -> Span {
    if !rebound_common::trace::enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: "rebound_server::push",
        "push",
        otel.name = "POST",
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = "POST",
        server.address = url.host_str().unwrap_or_default(),
        server.port = url.port_or_known_default().unwrap_or_default(),
        url.scheme = url.scheme(),
        url.path = url.path(),
        messaging.system = "rebound",
        messaging.destination.name = service,
        messaging.message.id = transaction_id,
        http.response.status_code = Empty,
        error.type = Empty,
    );
    if !delivered.is_empty() {
        let _ = span.set_parent(delivered.parent());
    }
    span
}

/// The trace context of `span` as text (empty when the span is disabled).
pub fn context_of(span: &Span) -> TextContext {
    if span.is_disabled() {
        return TextContext::default();
    }
    crate::trace_context::of(&span.context().span().span_context().clone())
}
