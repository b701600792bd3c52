//! A W3C trace context (`traceparent`, `tracestate`) as a stored retry carries it. Reading
//! it from requests, checking it and turning it into spans is the engine's
//! (`rebound_engine::trace_context`).

/// A trace context as text, as it travels and as it is stored; empty strings for none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextContext {
    pub traceparent: String,
    pub tracestate: String,
}

impl TextContext {
    pub fn is_empty(&self) -> bool {
        self.traceparent.is_empty()
    }
}
