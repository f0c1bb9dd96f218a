//! The client's gRPC channels: one lazily connecting channel per peer address,
//! with settings for what travels on it (small dispatcher calls, or element
//! streams from a worker).
//!
//! Channels connect on first use, so building a client never fails on a peer that
//! is down; the connection's failure is the first call's (retried per
//! [`RetryPolicy`]).
//!
//! Every channel carries the client's [`ClientSecurity`]: TLS (`https://`) when it
//! has a CA, and its bearer token on every call ([`Authed`] for generated
//! clients; the hand-written GetElements call adds the header itself).

use sluice_security::{Bearer, ClientSecurity};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::error::ClientError;
use crate::retry::RetryPolicy;

/// A channel that presents the client's bearer token on every call.
pub type Authed = InterceptedService<Channel, Bearer>;

/// Builds a lazily connecting channel to `address` (`host:port` or a URL).
pub fn channel(
    address: &str,
    policy: &RetryPolicy,
    security: &ClientSecurity,
) -> Result<Channel, ClientError> {
    Ok(endpoint(address, policy, security)?.http2_adaptive_window(true).connect_lazy())
}

/// [`channel`] with the bearer token added to every call.
pub fn authed_channel(
    address: &str,
    policy: &RetryPolicy,
    security: &ClientSecurity,
) -> Result<Authed, ClientError> {
    Ok(InterceptedService::new(channel(address, policy, security)?, security.bearer().clone()))
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
pub(crate) fn worker_channel(
    address: &str,
    policy: &RetryPolicy,
    security: &ClientSecurity,
) -> Result<Channel, ClientError> {
    Ok(endpoint(address, policy, security)?
        .initial_stream_window_size(WORKER_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(WORKER_CONNECTION_WINDOW_BYTES)
        .max_frame_size(WORKER_MAX_FRAME_BYTES)
        .connect_lazy())
}

fn endpoint(
    address: &str,
    policy: &RetryPolicy,
    security: &ClientSecurity,
) -> Result<Endpoint, ClientError> {
    let endpoint = Endpoint::from_shared(security.url(address))
        .map_err(|e| ClientError::InvalidArgument(format!("bad address `{address}`: {e}")))?;
    let endpoint = sluice_proto::limits::client_endpoint(endpoint)
        .connect_timeout(policy.attempt_timeout)
        .tcp_nodelay(true);
    Ok(security.apply(endpoint)?)
}
