//! A TCP proxy on 127.0.0.1 that caps bandwidth and counts bytes: put between a
//! reader and a worker (the worker advertises the proxy's address), it stands in
//! for a network link of a given speed, and its counters show what crossed it.
//!
//! ```text
//!  reader ──► proxy (listen) ──► upstream (worker)
//!         ◄── token bucket, per direction, shared by every connection ◄──
//! ```
//! Each direction of each connection copies through a fixed buffer
//! ([`CHUNK_BYTES`]) and, when capped, takes tokens (bytes) from its direction's
//! bucket before writing: the bucket refills at the cap and holds at most
//! [`BURST`] of it, so the rate over any stretch longer than that is at most the
//! cap. Memory is bounded: one buffer per direction per connection. Connections
//! and the accept loop stop when the [`Proxy`] drops.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Bytes read and written per step.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// The bucket's depth, as time at the cap.
pub const BURST: Duration = Duration::from_millis(5);

/// A bandwidth cap in bits per second; `None` copies as fast as it can.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cap(pub Option<f64>);

impl Cap {
    pub const UNCAPPED: Cap = Cap(None);
    pub fn gbit(g: f64) -> Cap {
        Cap(Some(g * 1e9))
    }
    /// Bytes per second.
    pub fn bytes_per_s(self) -> Option<f64> {
        self.0.map(|bits| bits / 8.0)
    }
}

/// A token bucket of bytes; its rate can change between reads ([`Proxy::set_cap`]).
struct Bucket {
    /// (bytes per second or `None` for uncapped, level in bytes, last refill).
    state: Mutex<(Option<f64>, f64, Instant)>,
}

impl Bucket {
    fn new(cap: Cap) -> Self {
        Bucket { state: Mutex::new((cap.bytes_per_s(), 0.0, Instant::now())) }
    }

    fn set(&self, cap: Cap) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) =
            (cap.bytes_per_s(), 0.0, Instant::now());
    }

    /// Waits until `n` bytes may pass. The lock is held only to update the level
    /// (no `.await` under it); the debt is slept off outside.
    async fn take(&self, n: usize) {
        let wait = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let Some(rate) = s.0 else { return };
            let now = Instant::now();
            let burst = rate * BURST.as_secs_f64();
            s.1 = (s.1 + rate * (now - s.2).as_secs_f64()).min(burst) - n as f64;
            s.2 = now;
            // A negative level is a debt: the time until it is paid off.
            (s.1 < 0.0).then(|| Duration::from_secs_f64(-s.1 / rate))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Bytes that crossed the proxy, per direction, over every connection.
#[derive(Debug, Default)]
pub struct Counted {
    /// Reader → upstream (requests).
    pub to_upstream: AtomicU64,
    /// Upstream → reader (the element stream).
    pub to_reader: AtomicU64,
}

/// A running proxy; stops (with its connections) when dropped.
pub struct Proxy {
    address: SocketAddr,
    counted: Arc<Counted>,
    /// Reader → upstream, upstream → reader.
    buckets: (Arc<Bucket>, Arc<Bucket>),
    _tasks: JoinSet<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr, cap: Cap) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let counted = Arc::new(Counted::default());
        let buckets = (Arc::new(Bucket::new(cap)), Arc::new(Bucket::new(cap)));
        let mut tasks = JoinSet::new();
        let c = counted.clone();
        let b = buckets.clone();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((reader, _)) = listener.accept().await {
                let Ok(up) = TcpStream::connect(upstream).await else { continue };
                let _ = (reader.set_nodelay(true), up.set_nodelay(true));
                let (rr, rw) = reader.into_split();
                let (ur, uw) = up.into_split();
                let (b_up, b_down) = (b.0.clone(), b.1.clone());
                let c1 = c.clone();
                connections.spawn(copy(rr, uw, b_up, move |n| {
                    c1.to_upstream.fetch_add(n, Ordering::Relaxed);
                }));
                let c2 = c.clone();
                connections.spawn(copy(ur, rw, b_down, move |n| {
                    c2.to_reader.fetch_add(n, Ordering::Relaxed);
                }));
            }
        });
        Ok(Proxy { address, counted, buckets, _tasks: tasks })
    }

    /// Changes the cap of both directions (for the connections open too).
    pub fn set_cap(&self, cap: Cap) {
        self.buckets.0.set(cap);
        self.buckets.1.set(cap);
    }

    /// Where readers connect (the worker's advertised address).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn counted(&self) -> &Counted {
        &self.counted
    }

    /// Bytes sent from upstream to readers so far.
    pub fn to_reader(&self) -> u64 {
        self.counted.to_reader.load(Ordering::Relaxed)
    }
}

/// Copies one direction until either side closes, through one bounded buffer.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    bucket: Arc<Bucket>,
    count: impl Fn(u64),
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        bucket.take(n).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        count(n as u64);
    }
    let _ = to.shutdown().await;
}
