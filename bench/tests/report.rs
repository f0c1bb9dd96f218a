//! The report of the new sections: JSON serialises, the table names every row, and
//! an exactly-once violation fails the run. The bandwidth probes give a figure.

use std::time::Duration;

use sluice_bench::epoch::{Epoch, EpochCase};
use sluice_bench::formats::Rate;
use sluice_bench::limits::{files_over_loopback, loopback_bandwidth, memcpy_bandwidth, Bandwidth};
use sluice_bench::report::{Latency, Machine, Outcome, Report};
use sluice_bench::streaming::StreamCase;

fn skipped<T>() -> Outcome<T> {
    Outcome::Skipped { reason: "--skip".into() }
}

fn report(check: &str) -> Report {
    let case = StreamCase {
        name: "int64 scalars, range(10)".into(),
        workers: 2,
        elements: 20,
        bytes: 160,
        secs: 1.0,
        elements_per_s: 20.0,
        gb_per_s: 1.6e-7,
        reader_cpu_us_per_element: 1.0,
        workers_cpu_us_per_element: 2.0,
        reader_cpu_s: 0.0,
        workers_cpu_s: 0.0,
        exactly_once: check.into(),
    };
    let epoch = EpochCase {
        mode: "OFF".into(),
        runs: 2,
        end_after_last: Latency::of(vec![Duration::from_millis(3), Duration::from_millis(5)])
            .unwrap(),
        elements: vec![4, 4],
        expected: 4,
    };
    Report {
        machine: Machine {
            date_utc: "now".into(),
            nproc: 2,
            cpu: "cpu".into(),
            kernel: "k".into(),
            load_start: "0".into(),
            load_end: "0".into(),
            build: "debug".into(),
            bench_dir: "/tmp".into(),
            bench_dir_fs: "fs".into(),
            workers: 16,
            elements: 100,
            budget_s: 1.0,
            snapshot_every: None,
        },
        loopback: Outcome::Measured(Bandwidth::of(2_000_000_000, Duration::from_secs(1))),
        loopback_streams: Outcome::Measured(Bandwidth::of(4_000_000_000, Duration::from_secs(1))),
        memcpy: skipped(),
        streaming: vec![Outcome::Measured(case), skipped()],
        epoch: Outcome::Measured(Epoch { cases: vec![epoch] }),
        gap: skipped(),
        gap_read: skipped(),
        rss: skipped(),
        rss_specs: skipped(),
        fsync: skipped(),
        sled_append_1: skipped(),
        sled_append_batch: skipped(),
        s3_put: skipped(),
        splits: vec![],
        split_rows: vec![],
        failover: skipped(),
        restart: skipped(),
        files: skipped(),
        python: skipped(),
        compression: skipped(),
        exactly_once: skipped(),
        parquet: skipped(),
        webdataset: skipped(),
        jpeg: skipped(),
        scale: skipped(),
    }
}

#[test]
fn new_sections_render_and_serialise() {
    let r = report("ok");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["epoch"]["status"], "measured");
    assert_eq!(json["streaming"][0]["elements"], 20);
    let table = r.render();
    assert!(table.contains("loopback TCP"), "{table}");
    assert!(table.contains("int64 scalars, range(10)"), "{table}");
    assert!(table.contains("OFF      median 5.00 ms  max 5.00 ms"), "{table}");
    assert!(r.problems().is_empty(), "{:?}", r.problems());
}

#[test]
fn the_jpeg_section_sets_sluice_beside_pillow() {
    let mut r = report("ok");
    r.jpeg = Outcome::Measured(sluice_bench::formats::Jpeg {
        images: 1024,
        data: "1024 JPEGs".into(),
        sluice_per_core: 300.0,
        pillow_per_core: Outcome::Measured(Rate { images_per_s: 200.0 }),
        pillow_full_decode_per_core: Outcome::Measured(Rate { images_per_s: 100.0 }),
        sluice_two_workers: 500.0,
        sluice_worker_cpu_us: 3000.0,
        pillow_pool_two: Outcome::Failed { error: "no Pillow".into() },
        peer: Some("Pillow 13.0.0, numpy 2.4.6".into()),
    });
    let table = r.render();
    assert!(table.contains("draft DCT scaling 200, Sluice 1.50x"), "{table}");
    assert!(table.contains("at full size as Sluice does 100, Sluice 3.00x"), "{table}");
    let json = serde_json::to_value(&r).expect("serialises");
    assert_eq!(json["jpeg"]["pillow_per_core"]["images_per_s"], 200.0);
    assert!(table.contains("FAILED: no Pillow"), "{table}");
    assert_eq!(r.problems().len(), 0, "a peer that did not run is not the run's failure");
}

#[test]
fn a_streaming_exactly_once_violation_fails_the_run() {
    let r = report("VIOLATION: 1 of 10 values did not arrive exactly 2 times");
    assert_eq!(r.problems().len(), 1, "{:?}", r.problems());
}

#[test]
fn bandwidth_probes_measure_something() {
    let lo = loopback_bandwidth(Duration::from_millis(100), 1).unwrap();
    assert!(lo.bytes > 0 && lo.gb_per_s > 0.0);
    let two = loopback_bandwidth(Duration::from_millis(100), 2).unwrap();
    assert!(two.bytes > 0 && two.gb_per_s > 0.0);
    let mem = memcpy_bandwidth(Duration::from_millis(50)).unwrap();
    assert!(mem.bytes >= 4 * (64 << 20));
}

#[test]
fn the_files_over_loopback_probe_sends_the_files_again_and_again_until_its_time_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<_> = (0..3)
        .map(|i| {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, vec![i as u8; 64 << 10]).unwrap();
            path
        })
        .collect();
    for streams in [1, 2] {
        let b = files_over_loopback(&files, Duration::from_millis(100), streams).unwrap();
        // More than one pass over the 192 KiB: the senders cycle through the files.
        assert!(b.bytes > 3 * (64 << 10), "{streams} stream(s): {b:?}");
    }
    let none = files_over_loopback(&[], Duration::from_millis(100), 1).unwrap_err();
    assert!(none.to_string().contains("no files"), "{none}");
    let missing = files_over_loopback(&[dir.path().join("absent")], Duration::from_millis(100), 1)
        .unwrap_err()
        .to_string();
    assert!(missing.contains("reading") && missing.contains("absent"), "{missing}");
}
