//! The proxy against an echo server on loopback: each mode, switching at run time,
//! the connection bound, and stopping on drop.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Mode, Proxy};

/// Echoes every connection until the test ends; returns its address.
async fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    address
}

/// Sends `msg` and waits up to `within` for its echo; `None` if nothing came back
/// (or the connection was closed).
async fn round_trip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
    s.write_all(msg).await.ok()?;
    let mut got = vec![0u8; msg.len()];
    match tokio::time::timeout(within, s.read_exact(&mut got)).await {
        Ok(Ok(_)) => Some(got),
        _ => None,
    }
}

/// Whether the peer closed the connection (EOF or error) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut b = [0u8; 1];
    matches!(tokio::time::timeout(within, s.read(&mut b)).await, Ok(Ok(0)) | Ok(Err(_)))
}

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

#[tokio::test]
async fn pass_forwards_both_ways() {
    let proxy = Proxy::start(&echo_server().await, 8).await.unwrap();
    let mut s = TcpStream::connect(proxy.address()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"hello", LONG).await.as_deref(), Some(&b"hello"[..]));
}

#[tokio::test]
async fn delay_holds_each_chunk_then_forwards_it() {
    let proxy = Proxy::start(&echo_server().await, 8).await.unwrap();
    let mut s = TcpStream::connect(proxy.address()).await.unwrap();
    proxy.set(Mode::Delay(150));
    let start = Instant::now();
    assert_eq!(round_trip(&mut s, b"slow", LONG).await.as_deref(), Some(&b"slow"[..]));
    // Once on the way there, once on the way back.
    assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
    proxy.set(Mode::Pass);
    let start = Instant::now();
    assert!(round_trip(&mut s, b"fast", LONG).await.is_some());
    assert!(start.elapsed() < Duration::from_millis(150), "{:?}", start.elapsed());
}

#[tokio::test]
async fn partition_forwards_nothing_and_heals_without_losing_bytes() {
    let proxy = Proxy::start(&echo_server().await, 8).await.unwrap();
    let mut old = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(round_trip(&mut old, b"before", LONG).await.is_some());
    proxy.set(Mode::Partition);
    assert_eq!(round_trip(&mut old, b"during", SHORT).await, None, "nothing passes");
    // A new connection is accepted but blackholed too.
    let mut new = TcpStream::connect(proxy.address()).await.unwrap();
    assert_eq!(round_trip(&mut new, b"new", SHORT).await, None);

    proxy.set(Mode::Pass);
    // The bytes sent during the partition arrive after it, in order.
    let mut got = [0u8; 6];
    tokio::time::timeout(LONG, old.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"during");
    let mut got = [0u8; 3];
    tokio::time::timeout(LONG, new.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"new");
}

#[tokio::test]
async fn drop_cuts_connections_and_refuses_new_ones_until_healed() {
    let proxy = Proxy::start(&echo_server().await, 8).await.unwrap();
    let control = proxy.control();
    let mut old = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(round_trip(&mut old, b"x", LONG).await.is_some());
    control.set(Mode::Drop);
    assert_eq!(control.mode(), Mode::Drop);
    assert!(closed_within(&mut old, LONG).await, "the existing connection is cut");
    let mut new = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(closed_within(&mut new, LONG).await, "a new connection is closed at once");

    control.set(Mode::Pass);
    let mut again = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(round_trip(&mut again, b"back", LONG).await.is_some());
}

#[tokio::test]
async fn connections_over_the_bound_are_closed() {
    let proxy = Proxy::start(&echo_server().await, 1).await.unwrap();
    let mut first = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(round_trip(&mut first, b"1", LONG).await.is_some());
    let mut second = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(closed_within(&mut second, LONG).await, "over the bound");
    drop(first);
    // The permit returns once the first connection's task has ended.
    let start = Instant::now();
    loop {
        let mut third = TcpStream::connect(proxy.address()).await.unwrap();
        if round_trip(&mut third, b"3", SHORT).await.is_some() {
            break;
        }
        assert!(start.elapsed() < LONG, "the freed permit was never reused");
    }
}

#[tokio::test]
async fn a_dead_target_closes_the_connection() {
    let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = unused.local_addr().unwrap().to_string();
    drop(unused);
    let proxy = Proxy::start(&target, 8).await.unwrap();
    let mut s = TcpStream::connect(proxy.address()).await.unwrap();
    assert!(closed_within(&mut s, LONG).await);
}

#[tokio::test]
async fn dropping_the_proxy_stops_it_and_its_connections() {
    let proxy = Proxy::start(&echo_server().await, 8).await.unwrap();
    let address = proxy.address();
    let mut s = TcpStream::connect(address).await.unwrap();
    assert!(round_trip(&mut s, b"x", LONG).await.is_some());
    drop(proxy);
    assert!(closed_within(&mut s, LONG).await, "its connections close");
    let start = Instant::now();
    while TcpStream::connect(address).await.is_ok() {
        assert!(start.elapsed() < LONG, "still listening after drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
