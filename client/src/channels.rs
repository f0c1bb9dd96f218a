//! The client's gRPC channels: one lazily connecting channel per peer address,
//! with settings for what travels on it (small dispatcher calls, or element
//! streams from a worker).
//!
//! Channels connect on first use, so building a client never fails on a peer that
//! is down; the connection's failure is the first call's (retried per
//! [`RetryPolicy`]).

use tonic::transport::{Channel, Endpoint};

use crate::error::ClientError;
use crate::retry::RetryPolicy;

/// Builds a lazily connecting channel to `address` (`host:port` or a URL).
pub fn channel(address: &str, policy: &RetryPolicy) -> Result<Channel, ClientError> {
    Ok(endpoint(address, policy)?.http2_adaptive_window(true).connect_lazy())
}

/// HTTP/2 receive windows of a connection to a worker: how many bytes of element
/// messages a worker may send before the reader acknowledges them. The default
/// 64 KiB (and the adaptive window, which grows from it by RTT estimates that are
/// noise on loopback) stalls the sender on every large message.
pub(crate) const WORKER_STREAM_WINDOW_BYTES: u32 = 8 << 20;
pub(crate) const WORKER_CONNECTION_WINDOW_BYTES: u32 = 16 << 20;
/// The largest HTTP/2 frame a worker may send (up to the stream window): a message
/// of the worker's default 4 MiB bound travels in one frame, so the reader decodes
/// its tensors as slices of that frame (`worker_stream.rs`) rather than gathering
/// 16 KiB frames (the default) into a copy.
pub(crate) const WORKER_MAX_FRAME_BYTES: u32 = WORKER_STREAM_WINDOW_BYTES;

/// A lazily connecting channel to a worker, with windows sized for element streams.
pub(crate) fn worker_channel(address: &str, policy: &RetryPolicy) -> Result<Channel, ClientError> {
    Ok(endpoint(address, policy)?
        .initial_stream_window_size(WORKER_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(WORKER_CONNECTION_WINDOW_BYTES)
        .max_frame_size(WORKER_MAX_FRAME_BYTES)
        .connect_lazy())
}

fn endpoint(address: &str, policy: &RetryPolicy) -> Result<Endpoint, ClientError> {
    let url =
        if address.contains("://") { address.to_string() } else { format!("http://{address}") };
    let endpoint = Endpoint::from_shared(url)
        .map_err(|e| ClientError::InvalidArgument(format!("bad address `{address}`: {e}")))?;
    Ok(sluice_proto::limits::client_endpoint(endpoint)
        .connect_timeout(policy.attempt_timeout)
        .tcp_nodelay(true))
}
