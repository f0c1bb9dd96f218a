//! The worker crate's error type: what can stop [`crate::run`] or [`crate::spawn`].
//! Per-request failures are `tonic::Status`es built in `task` and `service`.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum WorkerError {
    /// The configuration is unusable; fix it and start again.
    #[error("invalid worker config: {0}")]
    Config(String),
    /// The gRPC server failed.
    #[error("worker server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A dispatcher call failed after its retries (or was refused).
    #[error(transparent)]
    Dispatcher(#[from] sluice_client::ClientError),
    /// The dispatcher refused this worker for good (e.g. its address is not in the
    /// dispatcher's `worker_addresses`); restarting it unchanged will not help.
    #[error("the dispatcher refused this worker: {0}")]
    Refused(String),
    /// TLS files, tokens, or a listener off loopback without them.
    #[error(transparent)]
    Security(#[from] sluice_security::SecurityError),
    #[error("worker I/O error: {0}")]
    Io(#[from] std::io::Error),
}
