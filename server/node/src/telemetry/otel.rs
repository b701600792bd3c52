//! The OpenTelemetry trace pipeline: settings from the standard `OTEL_*` variables, an OTLP
//! exporter over gRPC (tonic), and a bounded export queue of this module's own.
//!
//! The SDK's batch processor drops spans when its queue is full but does not say how many;
//! this one counts them (`rebound_spans_dropped_total`). A span is handed over with a
//! `try_send` on a bounded channel: a collector that is down or slow fills the queue and
//! spans are dropped and counted, never waited for. One export task, owned by the
//! `Exporting` handle, sends batches with a timeout and drains the queue on shutdown.

use std::{collections::HashMap, time::Duration};

use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, OTEL_EXPORTER_OTLP_PROTOCOL_GRPC};
use opentelemetry_sdk::{
    error::OTelSdkResult,
    trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor},
    Resource,
};
use tokio::{sync::mpsc, task::JoinHandle};

use rebound_common::ConfigError;

/// The variables read (docs/observability.md, "Traces").
pub const OTEL_KEYS: &[&str] = &[
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
];

/// The sampler named by `OTEL_TRACES_SAMPLER` (and its `_ARG`).
#[derive(Debug, Clone, PartialEq)]
pub enum SamplerSetting {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedRatio(f64),
}

impl SamplerSetting {
    fn sampler(&self) -> Sampler {
        match *self {
            SamplerSetting::AlwaysOn => Sampler::AlwaysOn,
            SamplerSetting::AlwaysOff => Sampler::AlwaysOff,
            SamplerSetting::Ratio(r) => Sampler::TraceIdRatioBased(r),
            SamplerSetting::ParentBasedAlwaysOn => {
                Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
            }
            SamplerSetting::ParentBasedAlwaysOff => {
                Sampler::ParentBased(Box::new(Sampler::AlwaysOff))
            }
            SamplerSetting::ParentBasedRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

/// Trace export settings, from the standard OpenTelemetry variables.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelSettings {
    /// None: nothing is exported (and no span is made).
    pub endpoint: Option<String>,
    pub service_name: String,
    pub resource_attributes: Vec<(String, String)>,
    pub sampler: SamplerSetting,
    pub export_timeout: Duration,
    pub max_queue: usize,
    pub max_batch: usize,
    pub schedule_delay: Duration,
}

impl Default for OtelSettings {
    fn default() -> Self {
        OtelSettings {
            endpoint: None,
            service_name: "rebound".into(),
            resource_attributes: Vec::new(),
            sampler: SamplerSetting::ParentBasedAlwaysOn,
            export_timeout: Duration::from_secs(10),
            max_queue: 2048,
            max_batch: 512,
            schedule_delay: Duration::from_millis(1000),
        }
    }
}

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

fn num(
    env: &HashMap<String, String>,
    key: &str,
    lo: u64,
    hi: u64,
) -> Result<Option<u64>, ConfigError> {
    match env.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(bad(
                key,
                format!("{v:?} must be a whole number from {lo} to {hi}"),
            )),
        },
    }
}

/// Percent-decodes one `OTEL_RESOURCE_ATTRIBUTES` key or value (W3C baggage octets).
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl OtelSettings {
    /// Reads the variables of `env`; a bad value is an error naming its key.
    pub fn from_env(env: &HashMap<String, String>) -> Result<OtelSettings, ConfigError> {
        let get = |k: &str| {
            env.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut s = OtelSettings::default();
        if let Some(v) = get("OTEL_RESOURCE_ATTRIBUTES") {
            for pair in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let parsed = pair
                    .split_once('=')
                    .and_then(|(k, v)| Some((decode(k.trim())?, decode(v.trim())?)))
                    .filter(|(k, _)| !k.is_empty());
                match parsed {
                    Some(kv) => s.resource_attributes.push(kv),
                    None => {
                        return Err(bad(
                            "OTEL_RESOURCE_ATTRIBUTES",
                            format!(
                                "{pair:?} must be key=value (comma-separated, percent-encoded)"
                            ),
                        ))
                    }
                }
            }
        }
        // OTEL_SERVICE_NAME wins over service.name in the resource attributes.
        if let Some(name) = get("OTEL_SERVICE_NAME") {
            s.service_name = name;
        } else if let Some((_, name)) = s
            .resource_attributes
            .iter()
            .find(|(k, _)| k == "service.name")
        {
            s.service_name = name.clone();
        }
        s.resource_attributes.retain(|(k, _)| k != "service.name");
        let ratio = || -> Result<f64, ConfigError> {
            match get("OTEL_TRACES_SAMPLER_ARG") {
                None => Ok(1.0),
                Some(a) => match a.parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                    _ => Err(bad(
                        "OTEL_TRACES_SAMPLER_ARG",
                        format!("{a:?} must be a ratio from 0 to 1"),
                    )),
                },
            }
        };
        if let Some(v) = get("OTEL_TRACES_SAMPLER") {
            s.sampler = match v.to_ascii_lowercase().as_str() {
                "always_on" => SamplerSetting::AlwaysOn,
                "always_off" => SamplerSetting::AlwaysOff,
                "traceidratio" => SamplerSetting::Ratio(ratio()?),
                "parentbased_always_on" => SamplerSetting::ParentBasedAlwaysOn,
                "parentbased_always_off" => SamplerSetting::ParentBasedAlwaysOff,
                "parentbased_traceidratio" => SamplerSetting::ParentBasedRatio(ratio()?),
                _ => {
                    return Err(bad(
                        "OTEL_TRACES_SAMPLER",
                        format!("{v:?} must be one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"),
                    ))
                }
            };
        }
        for key in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(p) = get(key) {
                if p != OTEL_EXPORTER_OTLP_PROTOCOL_GRPC {
                    return Err(bad(
                        key,
                        format!("{p:?} is not supported: this node exports OTLP over gRPC; set grpc, or leave it unset"),
                    ));
                }
                break;
            }
        }
        if let Some(ms) = num(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 1, 600_000)? {
            s.export_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = num(env, "OTEL_BSP_MAX_QUEUE_SIZE", 1, 1_000_000)? {
            s.max_queue = n as usize;
        }
        if let Some(n) = num(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1, 100_000)? {
            s.max_batch = n as usize;
        }
        if let Some(ms) = num(env, "OTEL_BSP_SCHEDULE_DELAY", 1, 600_000)? {
            s.schedule_delay = Duration::from_millis(ms);
        }
        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let exporter = get("OTEL_TRACES_EXPORTER").unwrap_or_else(|| "otlp".into());
        match exporter.to_ascii_lowercase().as_str() {
            "otlp" => {}
            "none" => {
                return Ok(OtelSettings {
                    endpoint: None,
                    ..s
                })
            }
            _ => {
                return Err(bad(
                    "OTEL_TRACES_EXPORTER",
                    format!("{exporter:?} must be otlp or none"),
                ))
            }
        }
        if disabled {
            return Ok(s);
        }
        s.endpoint = match get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .map(|e| ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e))
            .or_else(|| {
                get("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| ("OTEL_EXPORTER_OTLP_ENDPOINT", e))
            }) {
            None => None,
            Some((key, e)) => {
                // A bare host:port is what people type for a gRPC collector: plain http.
                let e = if e.contains("://") {
                    e
                } else {
                    format!("http://{e}")
                };
                let uri: Result<http::Uri, _> = e.parse();
                match uri {
                    Ok(u) if u.scheme_str() == Some("http") && u.host().is_some() => Some(e),
                    Ok(u) if u.scheme_str() == Some("https") => {
                        return Err(bad(key, format!("{e:?}: https is not supported yet; use http:// (a collector on the same host or network)")))
                    }
                    _ => {
                        return Err(bad(
                            key,
                            format!("{e:?} must be a URL such as http://127.0.0.1:4317"),
                        ))
                    }
                }
            }
        };
        Ok(s)
    }
}

/// Hands ended spans to the export task, dropping (and counting) them when its queue is full.
#[derive(Debug)]
struct QueueProcessor {
    tx: mpsc::Sender<SpanData>,
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            crate::metric_definitions::metrics().span_dropped("queue_full", 1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The running pipeline: the tracer provider and its export task.
#[derive(Debug)]
pub struct Exporting {
    pub provider: SdkTracerProvider,
    stop: tokio::sync::watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Starts the pipeline for `s` (which has an endpoint). Needs a Tokio runtime.
pub fn start(s: &OtelSettings, node_id: &str) -> anyhow::Result<Exporting> {
    let endpoint = s.endpoint.clone().unwrap_or_default();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(s.export_timeout)
        .build()
        .map_err(|e| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
    let resource = Resource::builder_empty()
        .with_service_name(s.service_name.clone())
        .with_attributes(
            s.resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", node_id.to_string()),
            KeyValue::new("telemetry.sdk.language", "rust"),
            KeyValue::new("telemetry.sdk.name", "opentelemetry"),
        ])
        .build();
    exporter.set_resource(&resource);
    let (tx, rx) = mpsc::channel(s.max_queue);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_export(
        rx,
        stop_rx,
        exporter,
        s.max_batch,
        s.schedule_delay,
        s.export_timeout,
    ));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(QueueProcessor { tx })
        .with_sampler(s.sampler.sampler())
        .with_resource(resource)
        .build();
    Ok(Exporting {
        provider,
        stop,
        task,
    })
}

impl Exporting {
    /// Exports what is queued (within `within`), then stops the export task.
    pub async fn shutdown(self, within: Duration) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(within, &mut task).await.is_err() {
            task.abort();
        }
        let _ = self.provider.shutdown();
    }
}

async fn export_batch(exporter: &impl SpanExporter, batch: Vec<SpanData>, timeout: Duration) {
    let n = batch.len() as u64;
    match tokio::time::timeout(timeout, exporter.export(batch)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            crate::metric_definitions::metrics().span_dropped("export_failed", n);
            tracing::debug!(target: "rebound_telemetry", error = %e, spans = n, "trace export failed");
        }
        Err(_) => {
            crate::metric_definitions::metrics().span_dropped("export_failed", n);
            tracing::debug!(target: "rebound_telemetry", spans = n, "trace export timed out");
        }
    }
}

async fn run_export(
    mut rx: mpsc::Receiver<SpanData>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    exporter: impl SpanExporter,
    max_batch: usize,
    delay: Duration,
    timeout: Duration,
) {
    let mut batch = Vec::with_capacity(max_batch);
    loop {
        let first = tokio::select! {
            s = rx.recv() => s,
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(first) = first else { break };
        batch.push(first);
        let deadline = tokio::time::Instant::now() + delay;
        let mut stopping = false;
        while batch.len() < max_batch {
            tokio::select! {
                s = rx.recv() => match s {
                    Some(s) => batch.push(s),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
                _ = stop.wait_for(|s| *s) => { stopping = true; break }
            }
        }
        export_batch(&exporter, std::mem::take(&mut batch), timeout).await;
        if stopping {
            break;
        }
    }
    // Whatever is still queued goes out in batches.
    rx.close();
    while let Ok(s) = rx.try_recv() {
        batch.push(s);
        if batch.len() == max_batch {
            export_batch(&exporter, std::mem::take(&mut batch), timeout).await;
        }
    }
    if !batch.is_empty() {
        export_batch(&exporter, batch, timeout).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nothing_set_exports_nothing() {
        let s = OtelSettings::from_env(&env(&[])).unwrap();
        assert_eq!(s, OtelSettings::default());
        assert!(s.endpoint.is_none());
        assert_eq!(s.service_name, "rebound");
    }

    #[test]
    fn standard_variables_are_read() {
        let s = OtelSettings::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SERVICE_NAME", "retries"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=pay%20ments",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:4317"));
        assert_eq!(s.service_name, "retries");
        assert_eq!(s.sampler, SamplerSetting::ParentBasedRatio(0.25));
        assert_eq!(
            s.resource_attributes,
            vec![
                ("deployment.environment".into(), "prod".into()),
                ("team".into(), "pay ments".into())
            ]
        );
        let bare =
            OtelSettings::from_env(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]))
                .unwrap();
        assert_eq!(bare.endpoint.as_deref(), Some("http://collector:4317"));
        let named = OtelSettings::from_env(&env(&[("OTEL_RESOURCE_ATTRIBUTES", "service.name=x")]))
            .unwrap();
        assert_eq!(named.service_name, "x");
        let off = OtelSettings::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]))
        .unwrap();
        assert!(off.endpoint.is_none());
    }

    #[test]
    fn bad_values_name_their_key() {
        for (k, v) in [
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"),
            ("OTEL_RESOURCE_ATTRIBUTES", "novalue"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ] {
            let mut e = env(&[(k, v)]);
            if k == "OTEL_TRACES_SAMPLER_ARG" {
                e.insert("OTEL_TRACES_SAMPLER".into(), "traceidratio".into());
            }
            let err = OtelSettings::from_env(&e).unwrap_err();
            assert_eq!(err.key, k, "{err}");
        }
    }
}
