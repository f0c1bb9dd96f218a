//! W3C trace context (`traceparent`, `tracestate`) on gRPC calls.
//!
//! A client puts the current `tracing` span's OpenTelemetry context on each call
//! ([`inject`]); a server reads it back ([`extract`]) to make its RPC span a
//! child of the caller's. Export off (no [`crate::Telemetry`] with an endpoint in
//! this process), both return at once after one atomic load: no header is
//! written or parsed, so propagation costs nothing on the hot path then.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported from this process (and so propagated).
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Turns propagation on (called once the exporter is installed).
pub(crate) fn activate() {
    ACTIVE.store(true, Ordering::Relaxed);
}

/// Calls `set(name, value)` for each trace-context header of the current span:
/// nothing when export is off or no span is current.
pub fn inject(mut set: impl FnMut(&str, String)) {
    if !is_active() {
        return;
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    struct Setter<'a, F>(&'a mut F);
    impl<F: FnMut(&str, String)> Injector for Setter<'_, F> {
        fn set(&mut self, key: &str, value: String) {
            (self.0)(key, value)
        }
    }
    TraceContextPropagator::new().inject_context(&cx, &mut Setter(&mut set));
}

/// [`inject`] into the headers of a plain HTTP request (a hand-written gRPC call).
pub fn inject_headers(headers: &mut http::HeaderMap) {
    inject(|key, value| {
        if let (Ok(k), Ok(v)) =
            (http::HeaderName::from_bytes(key.as_bytes()), http::HeaderValue::from_str(&value))
        {
            headers.insert(k, v);
        }
    });
}

/// The caller's span context carried by `headers`, if export is on and they
/// carry a valid one.
pub fn extract(headers: &http::HeaderMap) -> Option<Context> {
    if !is_active() {
        return None;
    }
    struct Headers<'a>(&'a http::HeaderMap);
    impl Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(http::HeaderName::as_str).collect()
        }
    }
    let cx = TraceContextPropagator::new().extract(&Headers(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_nothing_is_written_or_read() {
        // ACTIVE is process-wide; this test binary never activates it.
        let mut headers = http::HeaderMap::new();
        inject_headers(&mut headers);
        assert!(headers.is_empty());
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse().unwrap(),
        );
        assert!(extract(&headers).is_none());
    }
}
