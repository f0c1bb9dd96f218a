//! The physical limits of moving bytes on this machine: loopback TCP bandwidth (our
//! own socket test, no gRPC, no HTTP/2) and memcpy bandwidth. The streaming figures
//! are printed next to them: a 1 MiB element crosses loopback once and is copied a
//! few times on the way.
//!
//! Both probes are blocking and bounded in time (~1 s each); run them from
//! `spawn_blocking`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

/// Bytes moved, over how long.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bandwidth {
    pub bytes: u64,
    pub secs: f64,
    /// 1e9 bytes per second.
    pub gb_per_s: f64,
}

impl Bandwidth {
    pub fn of(bytes: u64, elapsed: Duration) -> Bandwidth {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Bandwidth { bytes, secs, gb_per_s: bytes as f64 / secs / 1e9 }
    }
}

/// The size of one `write` (and of one `read` buffer).
const CHUNK: usize = 1 << 20;
/// Warm-up before the timed part: connection set-up, page faults of the buffers.
const WARMUP: Duration = Duration::from_millis(100);

/// One sender thread writes 1 MiB chunks over 127.0.0.1 for `duration`; the receiver
/// (this thread) reads them. Timed from the first byte after the warm-up to the last
/// byte received, so the socket buffers do not inflate the figure.
pub fn loopback_bandwidth(duration: Duration) -> anyhow::Result<Bandwidth> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut s = TcpStream::connect(address)?;
        s.set_nodelay(true)?;
        let chunk = vec![0x5au8; CHUNK];
        let end = Instant::now() + WARMUP + duration;
        while Instant::now() < end {
            s.write_all(&chunk)?;
        }
        Ok(())
        // Dropping the socket ends the receiver's reads.
    });
    let (mut r, _) = listener.accept().context("accepting the sender")?;
    let mut buf = vec![0u8; CHUNK];
    let start = Instant::now();
    let (mut timed_from, mut bytes) = (None, 0u64);
    // Bounded: the sender stops after warm-up + duration; the deadline guards a stall.
    let deadline = start + WARMUP + duration + Duration::from_secs(10);
    r.set_read_timeout(Some(Duration::from_secs(10)))?;
    loop {
        let n = r.read(&mut buf).context("reading from loopback")?;
        if n == 0 || Instant::now() > deadline {
            break;
        }
        match timed_from {
            Some(_) => bytes += n as u64,
            None if start.elapsed() >= WARMUP => timed_from = Some(Instant::now()),
            None => {}
        }
    }
    let elapsed = timed_from.map(|t| t.elapsed()).unwrap_or_default();
    sender.join().map_err(|_| anyhow::anyhow!("the sender thread panicked"))??;
    anyhow::ensure!(bytes > 0, "nothing received after the warm-up");
    Ok(Bandwidth::of(bytes, elapsed))
}

/// The buffer copied by the memcpy probe: well above the last-level cache.
const MEMCPY_BYTES: usize = 64 << 20;

/// Copies a 64 MiB buffer into another, repeatedly, for `duration` (one thread).
pub fn memcpy_bandwidth(duration: Duration) -> anyhow::Result<Bandwidth> {
    let src = vec![0xa5u8; MEMCPY_BYTES];
    let mut dst = vec![0u8; MEMCPY_BYTES];
    dst.copy_from_slice(&src); // page faults of `dst`, not timed
    let start = Instant::now();
    let mut bytes = 0u64;
    // At least 4 copies, then until the duration has passed (bounded: ~duration).
    while bytes < 4 * MEMCPY_BYTES as u64 || start.elapsed() < duration {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        bytes += MEMCPY_BYTES as u64;
    }
    Ok(Bandwidth::of(bytes, start.elapsed()))
}
