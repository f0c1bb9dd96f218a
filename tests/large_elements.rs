//! Elements from a few bytes to larger than the reader's HTTP/2 stream window and
//! frame size (8 MiB) cross the zero-copy data path intact: the worker's scatter
//! encoding (a tensor of 4 KiB or more is its own chunk) and the reader's decoding
//! from received frames (a tensor split across frames is gathered). A regression
//! test of that path; tonic's own codec would pass it too (guarantee W1).

mod common;

use common::{init_tracing, DEADLINE};
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, FunctionRegistry, Tensor};
use sluice_dispatcher::DispatcherConfig;
use sluice_worker::WorkerConfig;
use tokio::net::TcpListener;

/// Byte `i` of an element of `len` bytes: depends on both, so a byte out of place
/// (frames reordered, a chunk repeated or dropped) shows.
fn byte(len: usize, i: usize) -> u8 {
    ((i * 31 + len) % 251) as u8
}

/// The built-ins plus `bytes_of_len`: an int scalar `n` becomes `n` such bytes.
fn registry() -> FunctionRegistry {
    let mut r = FunctionRegistry::builtin();
    r.register_map("bytes_of_len", 0, |e, _| {
        let len = e.as_i64().map_err(|e| e.to_string())? as usize;
        let data: Vec<u8> = (0..len).map(|i| byte(len, i)).collect();
        Ok(sluice_dataset::Element::single(Tensor::scalar_bytes(&data)))
    });
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elements_larger_than_the_stream_window_arrive_byte_for_byte() {
    init_tracing();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dispatcher =
        sluice_dispatcher::spawn(listener, DispatcherConfig::default(), registry()).await.unwrap();
    let addresses = vec![dispatcher.address().to_string()];
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let _worker =
        sluice_worker::spawn(listener, WorkerConfig::for_tests(addresses.clone()), registry())
            .await
            .unwrap();

    // Below the zero-copy threshold, just above it, around 1 MiB, above the
    // 4 MiB message bound (sent alone) and above the 8 MiB window and frame size.
    let lens: Vec<i64> = vec![3, 4095, 4096, 5000, (1 << 20) + 1, (5 << 20) + 3, (9 << 20) + 7, 0];
    let def = DatasetDef::from_ints(lens.clone()).map("bytes_of_len");
    let client = Client::new(&addresses, RetryPolicy::for_tests()).unwrap();
    let opts = ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests());
    let mut stream = client.distribute(&def, opts).await.unwrap();
    let mut got = vec![];
    while let Some(e) = tokio::time::timeout(DEADLINE, stream.next()).await.expect("in time") {
        got.push(e.unwrap());
    }
    assert_eq!(got.len(), lens.len(), "one element per length");
    for (e, &len) in got.iter().zip(&lens) {
        let len = len as usize;
        let data = e.components[0].data();
        // A bytes scalar is its 4-byte length, then the bytes.
        assert_eq!(data.len(), 4 + len, "element of {len} bytes");
        assert_eq!(&data[..4], &(len as u32).to_le_bytes(), "length prefix of {len}");
        if let Some(i) = (0..len).find(|&i| data[4 + i] != byte(len, i)) {
            panic!("element of {len} bytes differs at byte {i}");
        }
    }
}
