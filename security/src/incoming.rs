//! [`Incoming`]: the accept loop every Sluice gRPC server serves from (the
//! dispatcher's client and Raft ports, a worker's port, the health-only port).
//!
//! Why not tonic's `TcpIncoming`: it keeps every connection as long as the peer
//! keeps it, and on an accept error such as EMFILE its server loop retries at
//! once, for ever. Issue 31 saw 200 connections that never spoke hold a
//! dispatcher at its file-descriptor limit, serving no real client, at ~200 %
//! CPU. Here:
//!
//! - connections are bounded in all and per peer IP ([`ServerLimits`]
//!   `max_connections`, `max_connections_per_ip`); at the bound a new one is
//!   closed at once (the peer reads EOF), and the refusal is logged at most
//!   every [`LOG_EVERY`];
//! - a connection that sends nothing (no TLS ClientHello, no HTTP/2 preface)
//!   within `silent_connection_timeout` is closed: its first read fails, so
//!   the server drops it; one that spoke and then receives nothing for
//!   `idle_connection_timeout` likewise (a live peer answers the keepalive
//!   pings sent every `http2_keepalive_interval`; a TLS peer that finished its
//!   handshake and never sent the HTTP/2 preface does not);
//! - an accept error that is not the peer's (EMFILE, ENFILE, ENOBUFS…) backs
//!   off, 5 ms doubling up to 1 s, instead of spinning;
//! - TCP keepalive and `TCP_NODELAY` are set on every accepted socket.
//!
//! The TLS handshake's own timeout is set on tonic's TLS config
//! ([`ServerLimits::tls`]), and HTTP/2 keepalive pings by
//! [`ServerLimits::apply`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use sluice_proto::limits::ServerLimits;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Refusals and accept errors are logged at most this often (with a count of
/// those not logged), so a flood does not become a flood of log lines.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The first pause after an accept error, and the longest.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Open connections, in all and per peer IP. A std mutex: held for a few map
/// operations, never across an `.await`.
#[derive(Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One open connection's place in [`Counts`], given back when dropped.
struct Permit {
    counts: Arc<Mutex<Counts>>,
    ip: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.total -= 1;
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

/// A log line at most every [`LOG_EVERY`], counting the ones skipped.
#[derive(Default)]
struct RateLimited {
    last: Option<Instant>,
    skipped: u64,
}

impl RateLimited {
    /// `Some(skipped since the last line)` when a line may be logged now.
    fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.skipped += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.skipped))
    }
}

/// The stream of accepted, admitted connections a tonic server serves
/// (`serve_with_incoming*`). It never yields an error: accept errors are
/// handled here. Dropping it closes the listening socket.
pub struct Incoming {
    listener: TcpListener,
    limits: ServerLimits,
    /// What logs call this server ("dispatcher", "worker"…).
    server: &'static str,
    counts: Arc<Mutex<Counts>>,
    backoff: Option<Pin<Box<Sleep>>>,
    next_backoff: Duration,
    refused_log: RateLimited,
    error_log: RateLimited,
}

impl Incoming {
    /// Accepts on `listener` within `limits`.
    pub fn new(listener: TcpListener, limits: &ServerLimits, server: &'static str) -> Incoming {
        Incoming {
            listener,
            limits: *limits,
            server,
            counts: Arc::default(),
            backoff: None,
            next_backoff: BACKOFF_MIN,
            refused_log: RateLimited::default(),
            error_log: RateLimited::default(),
        }
    }

    /// A permit for a connection from `ip`, or why there is none.
    fn admit(&self, ip: IpAddr) -> Result<Permit, &'static str> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.total >= self.limits.max_connections {
            return Err("connections in all");
        }
        let from_ip = c.per_ip.entry(ip).or_default();
        if *from_ip >= self.limits.max_connections_per_ip {
            return Err("connections from one IP address");
        }
        *from_ip += 1;
        c.total += 1;
        Ok(Permit { counts: self.counts.clone(), ip })
    }

    /// Sets up an admitted socket; Err: it failed already (the peer left).
    fn open(&self, tcp: TcpStream, permit: Permit) -> io::Result<Conn> {
        tcp.set_nodelay(true)?;
        let keepalive = socket2::TcpKeepalive::new().with_time(self.limits.tcp_keepalive);
        socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive)?;
        let now = tokio::time::Instant::now();
        let silent = self.limits.silent_connection_timeout;
        Ok(Conn {
            tcp,
            _permit: permit,
            deadline: Box::pin(tokio::time::sleep_until(now + silent)),
            last_byte: None,
            opened: now,
            silent,
            idle: self.limits.idle_connection_timeout,
        })
    }
}

/// Errors of one connection that came and went before it was accepted: the
/// next accept may well succeed.
fn is_the_peers(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

impl tokio_stream::Stream for Incoming {
    type Item = Result<Conn, io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(pause) = &mut this.backoff {
                std::task::ready!(pause.as_mut().poll(cx));
                this.backoff = None;
            }
            let (tcp, peer) = match std::task::ready!(this.listener.poll_accept(cx)) {
                Ok(accepted) => accepted,
                Err(e) if is_the_peers(&e) => continue,
                Err(e) => {
                    let pause = this.next_backoff;
                    if let Some(skipped) = this.error_log.allow() {
                        tracing::warn!(
                            server = this.server, error = %e, ?pause, skipped,
                            "cannot accept connections (at the file-descriptor limit?); \
                             pausing the accept loop"
                        );
                    }
                    this.backoff = Some(Box::pin(tokio::time::sleep(pause)));
                    this.next_backoff = (pause * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            this.next_backoff = BACKOFF_MIN;
            let ip = peer.ip().to_canonical();
            match this.admit(ip) {
                Ok(permit) => match this.open(tcp, permit) {
                    Ok(conn) => return Poll::Ready(Some(Ok(conn))),
                    Err(e) => tracing::debug!(%peer, error = %e, "connection lost at accept"),
                },
                Err(bound) => {
                    // Dropping `tcp` closes it at once: the peer reads EOF.
                    if let Some(skipped) = this.refused_log.allow() {
                        let (all, per_ip) =
                            (this.limits.max_connections, this.limits.max_connections_per_ip);
                        tracing::warn!(
                            server = this.server, %peer, skipped,
                            "refused a connection: at the bound of {bound} (max_connections \
                             {all}, max_connections_per_ip {per_ip})"
                        );
                    }
                }
            }
        }
    }
}

/// An accepted connection: its socket, its place in the bounds, and the
/// deadline by which it must receive its next byte.
pub struct Conn {
    tcp: TcpStream,
    _permit: Permit,
    /// Fires at the latest by the time the deadline is due; when it fires early
    /// (bytes came since it was set), it is set again: reads only note when
    /// their bytes came, the timer is touched once per deadline.
    deadline: Pin<Box<Sleep>>,
    last_byte: Option<tokio::time::Instant>,
    opened: tokio::time::Instant,
    silent: Duration,
    idle: Duration,
}

impl Conn {
    /// When this connection is due to be closed if nothing comes.
    fn due(&self) -> tokio::time::Instant {
        match self.last_byte {
            None => self.opened + self.silent,
            Some(t) => t + self.idle,
        }
    }

    /// `Some(error)` when the deadline passed; else the timer is set to wake
    /// this task by then.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return None;
            }
            let due = self.due();
            if tokio::time::Instant::now() >= due {
                let what = if self.last_byte.is_none() {
                    "the connection sent nothing within the silent-connection timeout"
                } else {
                    "the connection received nothing within the idle-connection timeout"
                };
                return Some(io::Error::new(io::ErrorKind::TimedOut, what));
            }
            self.deadline.as_mut().reset(due);
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.tcp).poll_read(cx, buf);
        match &read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                let now = tokio::time::Instant::now();
                // The first byte may bring the deadline forward (an idle timeout
                // shorter than the silent one); later ones only move it on.
                if self.last_byte.replace(now).is_none() {
                    let due = self.due();
                    self.deadline.as_mut().reset(due);
                }
            }
            Poll::Pending => {
                if let Some(e) = self.expired(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            _ => {}
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
