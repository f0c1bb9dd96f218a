//! A fault-injecting TCP proxy: listens on 127.0.0.1:0 and forwards every
//! connection to one target, in one of four modes switched at run time through a
//! cloneable [`ProxyControl`].
//!
//! ```text
//!  client ──► listener ──accept──► connection task ──► target
//!                ▲                   │  two pumps, one per direction; before each
//!                │                   │  chunk a pump looks at the mode:
//!   ProxyControl ┴── watch<Mode> ────┘   Pass: forward; Delay(ms): sleep, forward;
//!                                        Partition: stop reading until healed;
//!                                        Drop: close the connection
//! ```
//!
//! - `Partition` is a blackhole, not a reset: new connections are accepted and held,
//!   existing ones stop being read, so bytes back up in the kernel buffers exactly as
//!   over a network that silently drops packets; nothing is lost or reordered, and on
//!   heal the backlog flows on (a peer that gave up in the meantime has closed).
//! - `Drop` cuts every connection and closes each new one as soon as it is accepted
//!   (the listener stays bound so the address survives; a caller sees its
//!   connection closed before any byte, as good as refused).
//! - `Delay(ms)` sleeps before forwarding each chunk read (up to 16 KiB), so a
//!   request of one chunk takes `ms` longer each way.
//!
//! Bounded: at most `max_connections` connections at once (a `Semaphore`; one over
//! the bound is closed at once). Dropping the [`Proxy`] aborts its accept loop, which
//! owns every connection task (a `JoinSet`), so everything stops with it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward every byte as it comes.
    Pass,
    /// Forward each chunk this many milliseconds late.
    Delay(u64),
    /// Cut every connection; close new ones at once.
    Drop,
    /// Accept, forward nothing, until the mode changes.
    Partition,
}

/// Switches a proxy's mode; cloneable, cheap.
#[derive(Clone, Debug)]
pub struct ProxyControl {
    mode: Arc<watch::Sender<Mode>>,
}

impl ProxyControl {
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }
}

/// One listening proxy; stops (with all its connections) when dropped.
pub struct Proxy {
    address: SocketAddr,
    control: ProxyControl,
    task: JoinHandle<()>,
}

/// How long to wait for the target to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const CHUNK: usize = 16 * 1024;

impl Proxy {
    /// Listens on 127.0.0.1:0 and forwards to `target` (`host:port`, dialled per
    /// connection, so it need not be up yet).
    pub async fn start(target: &str, max_connections: usize) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (tx, rx) = watch::channel(Mode::Pass);
        let limit = Arc::new(Semaphore::new(max_connections.max(1)));
        let task = tokio::spawn(accept_loop(listener, target.to_string(), rx, limit));
        Ok(Proxy { address, control: ProxyControl { mode: Arc::new(tx) }, task })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn control(&self) -> ProxyControl {
        self.control.clone()
    }

    pub fn set(&self, mode: Mode) {
        self.control.set(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: String,
    mode: watch::Receiver<Mode>,
    limit: Arc<Semaphore>,
) {
    // Owned here: aborting this loop drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let inbound = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "proxy accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if *mode.borrow() == Mode::Drop {
            continue; // dropping `inbound` closes it
        }
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(%target, "proxy at its connection bound: closing a new connection");
            continue;
        };
        let (target, mode) = (target.clone(), mode.clone());
        connections.spawn(async move {
            let _permit = permit;
            if let Err(e) = connection(inbound, &target, mode).await {
                tracing::trace!(%target, error = %e, "proxied connection ended");
            }
        });
    }
}

async fn connection(
    inbound: TcpStream,
    target: &str,
    mode: watch::Receiver<Mode>,
) -> io::Result<()> {
    let outbound = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connecting to the target"))??;
    inbound.set_nodelay(true)?;
    outbound.set_nodelay(true)?;
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    // An error in either direction (a cut) drops both pumps, closing both sockets.
    tokio::try_join!(
        pump(in_read, out_write, mode.clone()),
        pump(out_read, in_write, mode.clone())
    )?;
    Ok(())
}

fn cut() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "cut by the proxy (Drop)")
}

/// Waits until the mode lets bytes through; returns the delay to apply.
async fn wait_passable(mode: &mut watch::Receiver<Mode>) -> io::Result<Duration> {
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Pass => return Ok(Duration::ZERO),
            Mode::Delay(ms) => return Ok(Duration::from_millis(ms)),
            Mode::Drop => return Err(cut()),
            Mode::Partition => mode.changed().await.map_err(|_| cut())?,
        }
    }
}

/// Copies one direction, chunk by chunk, obeying the mode before each read and
/// before each write.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        wait_passable(&mut mode).await?;
        let n = tokio::select! {
            read = from.read(&mut buf) => read?,
            // Re-evaluate: a partition must stop reading, a drop must cut now.
            changed = mode.changed() => {
                changed.map_err(|_| cut())?;
                continue;
            }
        };
        if n == 0 {
            // Half-close: the other direction may still be sending.
            let _ = to.shutdown().await;
            return Ok(());
        }
        // The bytes are read: hold them through a partition, late by the delay.
        let delay = wait_passable(&mut mode).await?;
        if !delay.is_zero() {
            let sleep = tokio::time::sleep(delay);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    changed = mode.changed() => {
                        changed.map_err(|_| cut())?;
                        if *mode.borrow() == Mode::Drop {
                            return Err(cut());
                        }
                    }
                }
            }
            wait_passable(&mut mode).await?;
        }
        tokio::select! {
            written = to.write_all(&buf[..n]) => written?,
            _ = async {
                while mode.changed().await.is_ok() {
                    if *mode.borrow() == Mode::Drop {
                        return;
                    }
                }
                std::future::pending::<()>().await
            } => return Err(cut()),
        }
    }
}

#[cfg(test)]
#[path = "tests/proxy.rs"]
mod tests;
