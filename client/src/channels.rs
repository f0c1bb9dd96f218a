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
    let endpoint = Endpoint::from_shared(security.url(address)?)
        .map_err(|e| ClientError::InvalidArgument(format!("bad address `{address}`: {e}")))?;
    let endpoint = sluice_proto::limits::client_endpoint(endpoint)
        .connect_timeout(policy.attempt_timeout)
        .tcp_nodelay(true);
    Ok(security.apply(endpoint)?)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use sluice_proto::v1 as pb;
    use sluice_security::{Secret, TlsSettings};
    use tokio::io::AsyncReadExt;

    use super::*;

    const TOKEN: &str = "trainer-secret-0123456789";

    /// A fake plain-text "worker": a loopback listener that keeps every byte any
    /// connection sends it. Stops with the test (the task is aborted on drop).
    struct Capture {
        address: String,
        bytes: Arc<Mutex<Vec<u8>>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Capture {
        async fn start() -> Capture {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap().to_string();
            let bytes = Arc::new(Mutex::new(vec![]));
            let sink = bytes.clone();
            let task = tokio::spawn(async move {
                while let Ok((mut tcp, _)) = listener.accept().await {
                    let sink = sink.clone();
                    tokio::spawn(async move {
                        let mut buf = [0u8; 4096];
                        while let Ok(n @ 1..) = tcp.read(&mut buf).await {
                            sink.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                    });
                }
            });
            Capture { address, bytes, task }
        }
    }

    impl Drop for Capture {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    #[tokio::test]
    async fn a_tls_reader_never_dials_an_http_worker_address_so_never_sends_its_token() {
        let fake = Capture::start().await;
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let tls = TlsSettings::from_pem(None, Some(ca.cert.pem().into_bytes()));
        let token = Secret::parse(TOKEN).unwrap();
        let security = ClientSecurity::new(Some(&tls), Some(&token)).unwrap();
        let advertised = format!("http://{}", fake.address);
        let channel = worker_channel(&advertised, &RetryPolicy::for_tests(), &security);
        if let Ok(channel) = &channel {
            // What a reader does with a worker's channel: a call carrying its token.
            let authed = InterceptedService::new(channel.clone(), security.bearer().clone());
            let mut worker = pb::worker_client::WorkerClient::new(authed);
            let call = worker.cache_status(pb::CacheStatusRequest::default());
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), call).await;
        }
        let sent = fake.bytes.lock().unwrap().len();
        assert_eq!(sent, 0, "a TLS-configured reader sent {sent} bytes in plain text");
        let err = channel.expect_err("an http:// address was dialled with TLS configured");
        assert!(err.to_string().contains("plain-text (http://)"), "{err}");
    }
}
