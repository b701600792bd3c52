//! The JSON log line: `timestamp`, `level`, `target`, the event's fields (`message` among
//! them), the innermost span's name, and `trace_id` / `span_id` when that span is traced.

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::{
    field::{Field, Visit},
    Event, Subscriber,
};
use tracing_subscriber::{
    fmt::{format::Writer, FmtContext, FormatEvent, FormatFields},
    registry::LookupSpan,
};

/// The JSON event format of `REBOUND_LOG_FORMAT=json`.
#[derive(Debug, Clone, Copy)]
pub struct JsonWithTrace;

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonWithTrace
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut m = Map::new();
        m.insert(
            "timestamp".into(),
            Value::from(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        m.insert("level".into(), Value::from(meta.level().as_str()));
        m.insert("target".into(), Value::from(meta.target()));
        event.record(&mut Fields(&mut m));
        if let Some(span) = ctx.parent_span() {
            m.insert("span".into(), Value::from(span.name()));
            let otel = tracing::dispatcher::get_default(|d| {
                tracing_opentelemetry::get_otel_context(&span.id(), d)
            });
            if let Some(cx) = otel {
                let sc = cx.span().span_context().clone();
                if sc.is_valid() {
                    m.insert("trace_id".into(), Value::from(sc.trace_id().to_string()));
                    m.insert("span_id".into(), Value::from(sc.span_id().to_string()));
                }
            }
        }
        writeln!(writer, "{}", Value::Object(m))
    }
}
