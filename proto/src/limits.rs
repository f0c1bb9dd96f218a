//! Connection and request bounds every Sluice gRPC server and client applies,
//! beside [`crate::MAX_MESSAGE_BYTES`]: how many streams one connection may
//! open, how many requests it may have in service at once, how long a request
//! may take to be answered, and keepalives that find dead peers.
//!
//! Connections themselves are bounded where they are accepted
//! (`sluice_security::incoming`, with the fields below): how many may be open
//! in all and per peer IP, how long a new one may stay silent, how long a TLS
//! handshake may take, and TCP keepalive.
//!
//! Which timeouts apply where: [`ServerLimits::request_timeout`] bounds the
//! time until a response *starts* (tonic's server timeout). A unary call is then
//! done; a server stream (a worker's element stream) has started and lives on,
//! bounded by the HTTP/2 keepalive instead (a peer that stops acknowledging
//! pings is cut). The dispatcher's long polls hold their answer for at most
//! their wait, so the dispatcher raises its timeout above the longest wait
//! (`sluice_dispatcher::server`).

use std::time::Duration;

use tonic::transport::{Endpoint, Server};

/// A server's bounds. [`ServerLimits::default`] is what `sluice dispatcher`
/// and `sluice worker` use unless flags say otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// HTTP/2 streams one connection may have open (SETTINGS_MAX_CONCURRENT_STREAMS):
    /// a client over it waits for a stream to close before opening another.
    pub max_concurrent_streams: u32,
    /// Requests of one connection in service at once; more wait in line.
    pub concurrency_limit_per_connection: usize,
    /// The longest a request may take until its response starts; past it the
    /// caller gets `Cancelled` and the server drops the work.
    pub request_timeout: Duration,
    /// How often an idle connection is pinged, and how long a ping may go
    /// unanswered before the connection is closed.
    pub http2_keepalive_interval: Duration,
    pub http2_keepalive_timeout: Duration,
    /// TCP keepalive of accepted connections.
    pub tcp_keepalive: Duration,
    /// Streams a client may open and reset before the server acknowledges them
    /// (bounds the HTTP/2 "rapid reset" attack).
    pub max_pending_accept_reset_streams: usize,
    /// Bytes of request headers (gRPC metadata) one request may carry.
    pub max_header_list_size: u32,
    /// Connections open at once, in all, and from one peer IP address: at the
    /// bound a new connection is closed at once (`sluice_security::incoming`).
    /// Keep the total below the process's file-descriptor limit (`ulimit -n`).
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// How long a new connection may stay silent (no byte received: no TLS
    /// ClientHello, no HTTP/2 preface) before it is closed.
    pub silent_connection_timeout: Duration,
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
    /// How long a connection that spoke may then receive nothing before it is
    /// closed. A live peer is never that quiet: both sides ping an idle
    /// connection every `http2_keepalive_interval`, and an answer is bytes. It
    /// closes what the keepalive cannot reach: a TLS peer that finished its
    /// handshake and never sent the HTTP/2 preface (issue 31).
    pub idle_connection_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_concurrent_streams: 1024,
            concurrency_limit_per_connection: 1024,
            request_timeout: Duration::from_secs(60),
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(20),
            tcp_keepalive: Duration::from_secs(60),
            max_pending_accept_reset_streams: 64,
            max_header_list_size: 64 * 1024,
            max_connections: 8192,
            // High enough for a benchmark host's thousands of fake workers and
            // readers on loopback; it bounds what one host can hold open.
            max_connections_per_ip: 4096,
            silent_connection_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            // The keepalive's interval and timeout, and as much again for a busy peer.
            idle_connection_timeout: Duration::from_secs(100),
        }
    }
}

impl ServerLimits {
    /// Sets these bounds on a server builder.
    pub fn apply<L>(&self, server: Server<L>) -> Server<L> {
        server
            .max_concurrent_streams(self.max_concurrent_streams)
            .concurrency_limit_per_connection(self.concurrency_limit_per_connection)
            .timeout(self.request_timeout)
            .http2_keepalive_interval(Some(self.http2_keepalive_interval))
            .http2_keepalive_timeout(Some(self.http2_keepalive_timeout))
            .tcp_keepalive(Some(self.tcp_keepalive))
            .http2_max_pending_accept_reset_streams(Some(self.max_pending_accept_reset_streams))
            .http2_max_header_list_size(self.max_header_list_size)
    }

    /// `tls` with the handshake bounded by [`ServerLimits::tls_handshake_timeout`].
    pub fn tls(&self, tls: tonic::transport::ServerTlsConfig) -> tonic::transport::ServerTlsConfig {
        tls.timeout(self.tls_handshake_timeout)
    }

    /// Every bound must allow something.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_concurrent_streams == 0 {
            return Err("--max-concurrent-streams must be at least 1".into());
        }
        if self.concurrency_limit_per_connection == 0 {
            return Err("the per-connection concurrency limit must be at least 1".into());
        }
        if self.request_timeout.is_zero() {
            return Err("--request-timeout-secs must be above 0".into());
        }
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            return Err("the connection bounds (in all, per IP) must be at least 1".into());
        }
        if self.silent_connection_timeout.is_zero() || self.tls_handshake_timeout.is_zero() {
            return Err("the silent-connection and TLS handshake timeouts must be above 0".into());
        }
        if self.idle_connection_timeout
            <= self.http2_keepalive_interval + self.http2_keepalive_timeout
        {
            return Err("the idle-connection timeout must exceed the HTTP/2 keepalive interval \
                        plus its timeout (a live connection is pinged that often)"
                .into());
        }
        Ok(())
    }
}

/// The client side: HTTP/2 keepalive pings (also while idle, so a long poll or
/// an element stream on a dead connection is noticed) and TCP keepalive.
pub fn client_endpoint(endpoint: Endpoint) -> Endpoint {
    let d = ServerLimits::default();
    endpoint
        .http2_keep_alive_interval(d.http2_keepalive_interval)
        .keep_alive_timeout(d.http2_keepalive_timeout)
        .keep_alive_while_idle(true)
        .tcp_keepalive(Some(d.tcp_keepalive))
}
