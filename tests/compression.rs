//! Compression of the element stream through a real worker, observed on the wire:
//! a counting proxy sits between the reader and the worker (the worker advertises
//! the proxy's address), so the test sees the bytes that crossed the "network".
//! Each setting must deliver the same elements; zstd must shrink token ids (by
//! at least a third) and
//! leave random bytes about as they are; `none` and `auto` over loopback send
//! raw (guarantees OP-COMPRESS1 and OP-COMPRESS2).

mod common;

use common::{init_tracing, DEADLINE};
use futures::StreamExt;
use sluice_bench::proxy::{Cap, Proxy};
use sluice_client::{Client, Compression, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, Element, FunctionRegistry, Tensor};
use sluice_dispatcher::DispatcherConfig;
use sluice_worker::WorkerConfig;
use tokio::net::TcpListener;

const TOKENS: usize = 2048;
const ROWS: usize = 64;
const RANDOM_BYTES: usize = 16 * 1024;

/// `token_ids`: n → row n of 2048 int32 ids from the bench's Zipf-like generator
/// (a tokenizer's output);
/// `random_bytes`: n → 16 KiB of the bench's xorshift bytes seeded by n.
fn registry() -> FunctionRegistry {
    let mut r = FunctionRegistry::builtin();
    let all = sluice_bench::compression::token_ids(ROWS * TOKENS);
    r.register_map("token_ids", 0, move |e, _| {
        let n = e.as_i64().map_err(|e| e.to_string())? as usize % ROWS;
        let ids = &all[n * TOKENS..(n + 1) * TOKENS];
        let t = Tensor::from_i32s(vec![TOKENS as u64], ids).map_err(|e| e.to_string())?;
        Ok(Element::single(t))
    });
    r.register_map("random_bytes", 0, |e, _| {
        let seed = e.as_i64().map_err(|e| e.to_string())? as u64;
        let data = sluice_bench::compression::random_bytes(RANDOM_BYTES, seed * 0x9E37_79B9 + 1);
        Ok(Element::single(Tensor::scalar_bytes(&data)))
    });
    r
}

/// Reads `def` to its end with `compression`; the elements and the bytes the
/// proxy carried to the reader meanwhile.
async fn read(
    client: &Client,
    proxy: &Proxy,
    def: &DatasetDef,
    compression: Compression,
) -> (Vec<Element>, u64) {
    let before = proxy.to_reader();
    let opts = ReadOptions::new(ProcessingMode::Off)
        .worker_retry(RetryPolicy::for_tests())
        .compression(compression);
    let mut stream = client.distribute(def, opts).await.expect("distribute");
    let mut got = vec![];
    while let Some(e) = tokio::time::timeout(DEADLINE, stream.next()).await.expect("in time") {
        got.push(e.expect("element"));
    }
    (got, proxy.to_reader() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_delivers_the_same_elements_and_zstd_shrinks_token_ids_on_the_wire() {
    init_tracing();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dispatcher =
        sluice_dispatcher::spawn(listener, DispatcherConfig::default(), registry()).await.unwrap();
    let addresses = vec![dispatcher.address().to_string()];
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = Proxy::start(listener.local_addr().unwrap(), Cap::UNCAPPED).await.unwrap();
    let config = WorkerConfig {
        advertised_address: Some(proxy.address().to_string()),
        ..WorkerConfig::for_tests(addresses.clone())
    };
    let _worker = sluice_worker::spawn(listener, config, registry()).await.unwrap();
    let client = Client::new(&addresses, RetryPolicy::for_tests()).unwrap();

    let tokens = DatasetDef::range(64).map("token_ids");
    let (raw, raw_bytes) = read(&client, &proxy, &tokens, Compression::None).await;
    let (zstd, zstd_bytes) = read(&client, &proxy, &tokens, Compression::Zstd).await;
    let (auto, auto_bytes) = read(&client, &proxy, &tokens, Compression::Auto).await;
    assert_eq!(raw.len(), 64);
    let payload = (64 * TOKENS * 4) as u64;
    assert!(raw_bytes >= payload, "raw: {raw_bytes} bytes on the wire for {payload}");
    assert_eq!(zstd, raw, "zstd delivers the same elements");
    assert_eq!(auto, raw, "auto delivers the same elements");
    // zstd shrinks such ids about 2x (docs/operations-compression.md): at least 1.5x here.
    assert!(
        zstd_bytes * 3 < raw_bytes * 2,
        "zstd: {zstd_bytes} bytes on the wire, raw {raw_bytes}"
    );
    // Auto over loopback sends raw (the proxy is on 127.0.0.1): within 10% of none
    // (the HTTP/2 and gRPC framing around the same messages).
    assert!(auto_bytes * 10 > raw_bytes * 9, "auto over loopback: {auto_bytes} vs raw {raw_bytes}");

    let random = DatasetDef::range(32).map("random_bytes");
    let (raw, raw_bytes) = read(&client, &proxy, &random, Compression::None).await;
    let (zstd, zstd_bytes) = read(&client, &proxy, &random, Compression::Zstd).await;
    assert_eq!(raw.len(), 32);
    assert_eq!(zstd, raw, "zstd delivers the same random elements");
    // Incompressible: sent raw, never larger than raw by more than framing.
    assert!(
        zstd_bytes <= raw_bytes + raw_bytes / 20,
        "random bytes: {zstd_bytes} with zstd, {raw_bytes} raw"
    );
}

/// The bench's compression section at CI size (2 MB per case) through real
/// `sluice` processes: every case delivers its elements, token ids with zstd
/// cross the proxy compressed, raw reads and random bytes do not (rates are
/// printed by the bench, never asserted here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compression_bench_runs_at_ci_size_and_its_ratios_show_the_codec_at_work() {
    init_tracing();
    let logs = tempfile::tempdir().unwrap();
    let exe = common::sluice().exe().to_path_buf();
    let cfg = sluice_bench::compression::CompressionConfig { mb: 2 };
    let bench = sluice_bench::compression::run(&exe, cfg, logs.path()).await.expect("bench runs");
    assert_eq!(bench.cases.len(), 12, "2 data sets x 3 links x 2 codecs");
    for c in &bench.cases {
        assert!(c.payload_bytes >= 2_000_000, "{c:?}");
        match (c.data.starts_with("token"), c.compression.as_str()) {
            (true, "zstd") => assert!(c.ratio > 1.5, "token ids with zstd: {c:?}"),
            (_, "none") => assert!(c.ratio < 1.05 && c.ratio > 0.9, "raw: {c:?}"),
            (false, _) => assert!(c.ratio > 0.9, "random bytes must not grow: {c:?}"),
            _ => {}
        }
    }
}
