//! Sluice's logs and traces, in one place so every process (the `sluice` binary's
//! roles, the Python package) sets them up the same way
//! (docs/operations-traces.md).
//!
//! Why a crate of its own: the trace context travels on every gRPC call between
//! client, dispatcher and worker, so the code that puts it on a call
//! ([`propagation`], used by `sluice-security`'s client interceptor) and the
//! code that takes it off ([`server::RpcSpans`], mounted by each server) must
//! sit below all of them; and OpenTelemetry's exporter should be linked in one
//! place rather than configured by each crate.
//!
//! # Layout
//! - [`setup`]: [`Telemetry::init`] — the process's `tracing` subscriber: log
//!   lines on stderr as text or JSON ([`LogFormat`]), and, when an OTLP endpoint
//!   is given ([`OtlpSettings`]), a second layer that exports spans over
//!   OTLP/gRPC through a batch processor with a bounded queue.
//!   [`Telemetry::shutdown`] flushes it.
//! - [`propagation`]: W3C `traceparent` / `tracestate` from the current span
//!   into an outgoing request, and from an incoming one into a parent context.
//!   Both do nothing (one atomic load) unless export is on.
//! - [`server`]: [`server::RpcSpans`] — the tower layer that opens one span per
//!   incoming RPC, a child of the caller's span when the call carried one.
//! - [`error`]: the crate's error type, [`TelemetryError`].
//!
//! ```text
//!  client span ──inject──► traceparent on the call ──► RpcSpans (server) ──► rpc span
//!        │                                                          (parent: client span)
//!        └─► OpenTelemetry layer ──► batch queue ──► OTLP/gRPC exporter ──► collector
//! ```

pub mod error;
pub mod propagation;
pub mod server;
pub mod setup;

pub use error::TelemetryError;
pub use server::RpcSpans;
pub use setup::{LogFormat, OtlpSettings, Settings, Telemetry};
