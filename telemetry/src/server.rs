//! [`RpcSpans`]: the tower layer each Sluice server mounts to open one span per
//! incoming RPC, as a child of the caller's span when the call carries a
//! `traceparent` (see [`crate::propagation`]). The handler's own spans (with the
//! job, iteration, task and worker ids it knows) open inside it, so a trace
//! reads client span → RPC span → handler span.
//!
//! One span per RPC, never per element: a GetElements stream is one request.
//! Export off, the layer opens no span at all (the handlers' own spans still
//! carry their ids into the logs).

use std::task::{Context, Poll};

use tracing::instrument::Instrumented;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::propagation;

/// The layer; `server` names the listener in the spans ("dispatcher", "worker").
#[derive(Clone, Copy, Debug)]
pub struct RpcSpans {
    server: &'static str,
}

impl RpcSpans {
    pub fn new(server: &'static str) -> RpcSpans {
        RpcSpans { server }
    }
}

impl<S> tower::Layer<S> for RpcSpans {
    type Service = RpcSpanned<S>;

    fn layer(&self, inner: S) -> RpcSpanned<S> {
        RpcSpanned { inner, server: self.server }
    }
}

/// A service behind [`RpcSpans`].
#[derive(Clone, Debug)]
pub struct RpcSpanned<S> {
    inner: S,
    server: &'static str,
}

impl<S, B> tower::Service<http::Request<B>> for RpcSpanned<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if !propagation::is_active() {
            return self.inner.call(request).instrument(tracing::Span::none());
        }
        let path = request.uri().path();
        let (service, method) = path.trim_start_matches('/').split_once('/').unwrap_or((path, ""));
        let span = tracing::info_span!(
            "rpc",
            otel.name = %path.trim_start_matches('/'),
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            server = self.server,
        );
        if let Some(parent) = propagation::extract(request.headers()) {
            // Fails only once the span has started, which it has not.
            let _ = span.set_parent(parent);
        }
        let _entered = span.enter();
        self.inner.call(request).instrument(span.clone())
    }
}
