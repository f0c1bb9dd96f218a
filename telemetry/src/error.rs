//! [`TelemetryError`]: what can go wrong setting up logs and traces.

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) is not usable.
    #[error("OTLP endpoint `{endpoint}`: {reason}")]
    Endpoint { endpoint: String, reason: String },
    /// The exporter could not be built.
    #[error("cannot build the OTLP trace exporter: {0}")]
    Exporter(String),
    /// A `tracing` subscriber was already installed in this process.
    #[error("logging is already set up in this process: {0}")]
    AlreadySet(String),
}
