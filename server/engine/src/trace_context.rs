//! W3C trace context (`traceparent`, `tracestate`): read from gRPC metadata and from the
//! `trace_context` fields of the API, written into stored retries and deliveries. Parsing is
//! total: anything that is not a valid `traceparent` reads as no context. The stored text is
//! the storage contract's `TextContext`; its meaning is here.

use opentelemetry::{
    propagation::{Extractor, Injector, TextMapPropagator},
    trace::{SpanContext, TraceContextExt},
    Context,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rebound_store::context::TextContext;

/// Longest `traceparent` accepted (version 00 is 55 characters; later versions may append).
pub const MAX_TRACEPARENT_LEN: usize = 512;
/// Longest `tracestate` accepted (W3C: vendors should propagate at least 512 characters).
pub const MAX_TRACESTATE_LEN: usize = 512;

/// The W3C shape of a `traceparent`: `version-traceid-parentid-flags` in lowercase hex of
/// 2, 32, 16 and 2 digits, version not `ff`, nothing more for version 00 (the propagator
/// alone is more lenient, e.g. with a 31-digit trace id).
fn well_formed(traceparent: &str) -> bool {
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut parts = traceparent.split('-');
    let (Some(v), Some(t), Some(p), Some(f)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let more = parts.next().is_some();
    hex(v, 2) && v != "ff" && hex(t, 32) && hex(p, 16) && hex(f, 2) && !(v == "00" && more)
}

struct Pair<'a>(&'a str, &'a str);

impl Extractor for Pair<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" if !self.0.is_empty() => Some(self.0),
            "tracestate" if !self.1.is_empty() => Some(self.1),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Collects what the propagator injects into a `TextContext`.
struct Collect(TextContext);

impl Injector for Collect {
    fn set(&mut self, key: &str, value: String) {
        match key {
            "traceparent" => self.0.traceparent = value,
            "tracestate" => self.0.tracestate = value,
            _ => {}
        }
    }
}

/// The meaning of a stored `TextContext`.
pub trait TraceText {
    /// The remote span context this text names, if its `traceparent` is valid.
    fn span_context(&self) -> Option<SpanContext>;
    /// A context whose parent is this remote span (or the empty context).
    fn parent(&self) -> Context;
    /// Checks a context given in an API field: empty, or a valid `traceparent` (and a
    /// `tracestate` within its limit). The error names the limit broken.
    fn check(&self) -> Result<(), String>;
}

impl TraceText for TextContext {
    fn span_context(&self) -> Option<SpanContext> {
        if self.traceparent.len() > MAX_TRACEPARENT_LEN
            || self.tracestate.len() > MAX_TRACESTATE_LEN
            || !well_formed(&self.traceparent)
        {
            return None;
        }
        let cx = TraceContextPropagator::new().extract(&Pair(&self.traceparent, &self.tracestate));
        let sc = cx.span().span_context().clone();
        sc.is_valid().then_some(sc)
    }

    fn parent(&self) -> Context {
        match self.span_context() {
            Some(sc) => Context::new().with_remote_span_context(sc),
            None => Context::new(),
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.traceparent.is_empty() {
            return if self.tracestate.is_empty() {
                Ok(())
            } else {
                Err("tracestate given without a traceparent".into())
            };
        }
        if self.traceparent.len() > MAX_TRACEPARENT_LEN {
            return Err(format!(
                "traceparent is {} bytes, the limit is {MAX_TRACEPARENT_LEN}",
                self.traceparent.len()
            ));
        }
        if self.tracestate.len() > MAX_TRACESTATE_LEN {
            return Err(format!(
                "tracestate is {} bytes, the limit is {MAX_TRACESTATE_LEN}",
                self.tracestate.len()
            ));
        }
        match self.span_context() {
            Some(_) => Ok(()),
            None => Err(
                "traceparent must be a W3C traceparent (version-traceid-spanid-flags, \
                 e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01)"
                    .into(),
            ),
        }
    }
}

/// The text of a span context (empty when it is not valid).
pub fn of(sc: &SpanContext) -> TextContext {
    let mut t = Collect(TextContext::default());
    if sc.is_valid() {
        let cx = Context::new().with_remote_span_context(sc.clone());
        TraceContextPropagator::new().inject_context(&cx, &mut t);
    }
    t.0
}

/// From gRPC/HTTP headers; invalid or missing headers give an empty context.
pub fn from_headers(h: &http::HeaderMap) -> TextContext {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    from_text(get("traceparent"), get("tracestate"))
}

/// A context from received text: itself when the `traceparent` is valid, else empty
/// (W3C: an invalid `traceparent` is ignored, with its `tracestate`).
pub fn from_text(traceparent: &str, tracestate: &str) -> TextContext {
    if traceparent.is_empty() {
        return TextContext::default();
    }
    let t = TextContext {
        traceparent: traceparent.to_string(),
        tracestate: tracestate.to_string(),
    };
    match t.span_context() {
        Some(_) => t,
        None => TextContext::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_traceparent_round_trips() {
        let t = TextContext {
            traceparent: GOOD.into(),
            tracestate: "rojo=00f067aa0ba902b7".into(),
        };
        assert!(t.check().is_ok());
        let sc = t.span_context().expect("valid");
        assert!(sc.is_sampled());
        let back = of(&sc);
        assert_eq!(back.traceparent, GOOD);
        assert_eq!(back.tracestate, "rojo=00f067aa0ba902b7");
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            let t = TextContext {
                traceparent: bad.into(),
                tracestate: String::new(),
            };
            assert!(t.check().is_err(), "{bad}");
            assert!(t.span_context().is_none(), "{bad}");
        }
        let orphan = TextContext {
            traceparent: String::new(),
            tracestate: "a=b".into(),
        };
        assert!(orphan.check().is_err());
        assert!(TextContext::default().check().is_ok());
    }

    proptest! {
        #[test]
        fn any_text_is_total(p in ".{0,600}", s in ".{0,600}") {
            let t = TextContext { traceparent: p, tracestate: s };
            let ok = t.check().is_ok();
            let valid = t.span_context().is_some();
            prop_assert!(!valid || ok || t.traceparent.is_empty());
            let _ = t.parent();
        }
    }
}
