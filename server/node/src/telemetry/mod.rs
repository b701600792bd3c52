//! Logs and traces. Logs go through `tracing`: `RUST_LOG` filters (default `info`, driver at
//! `warn`; `rebound-server dev` also keeps the start-up and ring lines at `warn`, so that its
//! banner comes first); `REBOUND_LOG_FORMAT=json` writes one JSON object per line, with `trace_id` and
//! `span_id` when a traced span is active. No log line carries a token, a payload or an
//! attribute value (the handlers never log them).
//!
//! Traces (`otel`) are exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; with no
//! endpoint no span is made at all (`enabled()` is false, and the spans of `rpc`, the
//! handlers and the store are skipped). W3C trace context is `rebound_engine::trace_context`,
//! the delivery's spans `rebound_engine::spans`.

pub mod json;
pub mod otel;
pub mod rpc;

use std::time::Duration;

use tracing_subscriber::{
    filter::Targets, fmt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer,
};

pub use otel::OtelSettings;

/// How log lines are written (`REBOUND_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// What `init` set up; `shutdown` exports the spans still queued.
#[derive(Debug, Default)]
pub struct Telemetry {
    exporting: Option<otel::Exporting>,
}

impl Telemetry {
    pub async fn shutdown(self) {
        if let Some(e) = self.exporting {
            rebound_common::trace::set_enabled(false);
            e.shutdown(Duration::from_secs(5)).await;
        }
    }
}

/// What is logged when `RUST_LOG` is not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logs {
    /// A node: `info`.
    Node,
    /// `rebound-server dev`: one node alone, whose banner says what the start-up lines would
    /// (the schema, the address) and whose lease ring never changes after its first round.
    Dev,
}

fn log_filter(logs: Logs) -> EnvFilter {
    let default = match logs {
        Logs::Node => "info,scylla=warn,h2=warn,tower=warn",
        Logs::Dev => "info,scylla=warn,h2=warn,tower=warn,rebound_server::node=warn,rebound_engine::ring=warn",
    };
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

/// Installs the log subscriber, and the trace pipeline when `otel` has an endpoint. Call
/// inside a Tokio runtime (the exporter's channel needs one). A second call in the same
/// process installs nothing and returns an empty `Telemetry`.
pub fn init(
    format: LogFormat,
    logs: Logs,
    otel: &OtelSettings,
    node_id: &str,
) -> anyhow::Result<Telemetry> {
    let fmt_layer = match format {
        LogFormat::Json => fmt::layer()
            .with_writer(std::io::stderr)
            .event_format(json::JsonWithTrace)
            .boxed(),
        LogFormat::Text => fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(true)
            .boxed(),
    }
    .with_filter(log_filter(logs));
    let Some(_) = &otel.endpoint else {
        let _ = tracing_subscriber::registry().with(fmt_layer).try_init();
        return Ok(Telemetry::default());
    };
    let exporting = otel::start(otel, node_id)?;
    use opentelemetry::trace::TracerProvider as _;
    let tracer = exporting.provider.tracer("rebound");
    // Only Rebound's own spans become trace spans: not the exporter's own gRPC calls (which
    // would trace themselves), nor the driver's or hyper's internals.
    let spans = Targets::new()
        .with_target("rebound_server", tracing::Level::INFO)
        .with_target("rebound_client", tracing::Level::INFO);
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_filter(spans);
    if tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .is_err()
    {
        // Someone else's subscriber is installed (a test harness): make no spans, and keep
        // the pipeline only to stop it.
        return Ok(Telemetry {
            exporting: Some(exporting),
        });
    }
    opentelemetry::global::set_tracer_provider(exporting.provider.clone());
    rebound_common::trace::set_enabled(true);
    Ok(Telemetry {
        exporting: Some(exporting),
    })
}
