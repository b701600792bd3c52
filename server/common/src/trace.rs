//! The switch for spans, and the gRPC code names spans and metrics label failures with. `enabled()` is true once the node has configured an exporter
//! (`rebound_server::telemetry::init`); with it off, the handlers and the stores make no span
//! at all.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::Span;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are being made (an exporter is configured).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns spans on or off, for the whole process.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Marks `span` failed with `error.type` (a gRPC code name).
pub fn failed(span: &Span, error_type: &'static str) {
    if !span.is_disabled() {
        span.record("error.type", error_type);
        span.record("otel.status_code", "ERROR");
    }
}

/// The gRPC code name of a `grpc-status` value.
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}
