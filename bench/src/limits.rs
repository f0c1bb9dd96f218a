//! The physical limits of moving bytes on this machine: loopback TCP bandwidth (our
//! own socket test, no gRPC, no HTTP/2), the same with the sender reading files, and
//! memcpy bandwidth. The streaming figures are printed next to them: a 1 MiB element
//! crosses loopback once and is copied a few times on the way; the file pipelines
//! next to the files sent over loopback.
//!
//! Both probes are blocking and bounded in time (~1 s each); run them from
//! `spawn_blocking`.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
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

/// `streams` connections over 127.0.0.1 at once, each with one sender thread
/// writing 1 MiB chunks for `duration` and one receiver thread reading them (the
/// streaming case has one connection per worker, so its limit is the same number
/// of streams at once). Each receiver is timed from its first byte after the
/// warm-up to its last byte, so the socket buffers do not inflate the figure; the
/// result is the sum of the streams' rates.
pub fn loopback_bandwidth(duration: Duration, streams: usize) -> anyhow::Result<Bandwidth> {
    pairs(duration, streams, move |_, address| send(address, duration))
}

/// As [`loopback_bandwidth`], but each sender reads `files` in turn (stream `i` from
/// the `i`-th on), 1 MiB a `read`, and writes what it read: a copy out of the page
/// cache, one into the socket and one out of it, the least that any service which
/// reads files in one process and delivers their bytes to another over TCP must do,
/// on the same cores. The file pipelines are set beside it: unlike the plain
/// loopback figure, it does not get a core per side for free on top of the file read.
pub fn files_over_loopback(
    files: &[PathBuf],
    duration: Duration,
    streams: usize,
) -> anyhow::Result<Bandwidth> {
    anyhow::ensure!(!files.is_empty(), "no files to send over loopback");
    let files: Arc<[PathBuf]> = files.into();
    pairs(duration, streams, move |i, address| send_files(address, duration, &files, i))
}

/// `streams` sender/receiver pairs at once, `sender(i, address)` on a thread each; the
/// sum of the receivers' rates.
fn pairs<S>(duration: Duration, streams: usize, sender: S) -> anyhow::Result<Bandwidth>
where
    S: Fn(usize, SocketAddr) -> std::io::Result<()> + Clone + Send + 'static,
{
    let pairs = (0..streams.max(1))
        .map(|i| {
            let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
            let address = listener.local_addr()?;
            let send = sender.clone();
            let sender = std::thread::spawn(move || send(i, address));
            let (r, _) = listener.accept().context("accepting the sender")?;
            let receiver = std::thread::spawn(move || receive(r, duration));
            anyhow::Ok((sender, receiver))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (mut bytes, mut secs, mut rate) = (0u64, 0f64, 0f64);
    for (sender, receiver) in pairs {
        let b = receiver.join().map_err(|_| anyhow::anyhow!("a receiver thread panicked"))?;
        // The sender's error first: a receiver that got nothing only echoes it.
        sender.join().map_err(|_| anyhow::anyhow!("a sender thread panicked"))??;
        let b = b?;
        bytes += b.bytes;
        secs = secs.max(b.secs);
        rate += b.gb_per_s;
    }
    Ok(Bandwidth { bytes, secs, gb_per_s: rate })
}

fn send(address: SocketAddr, duration: Duration) -> std::io::Result<()> {
    let mut s = TcpStream::connect(address)?;
    s.set_nodelay(true)?;
    let chunk = vec![0x5au8; CHUNK];
    let end = Instant::now() + WARMUP + duration;
    while Instant::now() < end {
        s.write_all(&chunk)?;
    }
    Ok(())
    // Dropping the socket ends the receiver's reads.
}

fn send_files(
    address: SocketAddr,
    duration: Duration,
    files: &[PathBuf],
    first: usize,
) -> std::io::Result<()> {
    let mut s = TcpStream::connect(address)?;
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; CHUNK];
    let end = Instant::now() + WARMUP + duration;
    // Bounded: `files` is not empty (checked), and each pass checks the deadline.
    for path in files.iter().cycle().skip(first % files.len()) {
        if Instant::now() >= end {
            break;
        }
        let named = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("reading {}: {e}", path.display()))
        };
        let mut file = File::open(path).map_err(named)?;
        loop {
            let n = file.read(&mut buf).map_err(named)?;
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n])?;
        }
    }
    Ok(())
}

fn receive(mut r: TcpStream, duration: Duration) -> anyhow::Result<Bandwidth> {
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
