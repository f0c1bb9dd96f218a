//! Hostile file contents through the service (issue 14, "no input crashes a node"):
//! a PNG and a JPEG whose headers claim a huge image, a JPEG whose header claims
//! more rows than its data holds, and an Example with too many features, read by a
//! worker. Each fails the read with an error naming the limit or what was wrong,
//! and the same worker keeps serving.

mod common;

use common::{collect_i64, Cluster, DEADLINE};
use futures::StreamExt;
use sluice_client::{ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::formats::example::{encode, Feature};
use sluice_dataset::formats::tfrecord::TfRecordWriter;
use sluice_dataset::{Arg, DType, DatasetDef, FeatureSpec};

fn opts() -> ReadOptions {
    ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests())
}

/// A 1×1 RGBA PNG whose header then claims 65,536 × 65,536 (16 GiB decoded), its
/// header checksum made right again.
fn hostile_png() -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, 1, 1);
    e.set_color(png::ColorType::Rgba);
    let mut w = e.write_header().expect("header");
    w.write_image_data(&[1, 2, 3, 4]).expect("data");
    w.finish().expect("finish");
    out[16..20].copy_from_slice(&(1u32 << 16).to_be_bytes());
    out[20..24].copy_from_slice(&(1u32 << 16).to_be_bytes());
    let mut crc = !0u32;
    for &b in &out[12..29] {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    out[29..33].copy_from_slice(&(!crc).to_be_bytes());
    out
}

/// An 8 × 8 gray JPEG whose frame header then claims `width × height`.
fn jpeg_claiming(width: u16, height: u16) -> Vec<u8> {
    let mut file = Vec::new();
    let encoder = jpeg_encoder::Encoder::new(&mut file, 90);
    encoder.encode(&[128; 64], 8, 8, jpeg_encoder::ColorType::Luma).expect("encodes");
    let sof = file.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline frame header");
    // FF C0, length (2), precision (1), then height and width.
    file[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    file[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    file
}

fn write(path: &str, records: &[Vec<u8>]) {
    let mut w = TfRecordWriter::new(std::fs::File::create(path).expect("create"));
    for r in records {
        w.write(r).expect("write");
    }
}

/// The first error of a read, which must come before the stream ends.
async fn read_error(cluster: &Cluster, def: &DatasetDef) -> String {
    let mut stream = cluster.client().distribute(def, opts()).await.expect("starts");
    let first = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            if let Err(e) = e {
                return Some(e.to_string());
            }
        }
        None
    });
    first.await.expect("the read ends").expect("the read fails, not ends cleanly")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_images_and_examples_fail_their_read_and_the_worker_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let images = dir.path().join("images.tfrecord").to_string_lossy().into_owned();
    write(&images, &[encode([("image".to_string(), Feature::bytes([hostile_png()]))])]);
    let wide = dir.path().join("wide.tfrecord").to_string_lossy().into_owned();
    let features = (0..=1u32 << 16).map(|i| (i.to_string(), Feature { kind: None }));
    write(&wide, &[encode(features)]);
    let cluster = Cluster::start(1).await;

    let image = FeatureSpec {
        name: "image".into(),
        dtype: DType::Bytes,
        shape: Some(vec![]),
        default: None,
    };
    let def = DatasetDef::tfrecord(vec![images])
        .parse_example(vec![image])
        .map_with("decode_png", vec![Arg::Str("image".into())]);
    let err = read_error(&cluster, &def).await;
    assert!(err.contains("65536x65536") && err.contains("MAX_IMAGE_BYTES"), "{err}");

    // JPEGs: a header claiming 65,535 × 65,535 (4 GiB), one claiming 64 × 64 of 8 × 8.
    for (file, says) in [
        (jpeg_claiming(u16::MAX, u16::MAX), "MAX_IMAGE_BYTES"),
        (jpeg_claiming(64, 64), "the data ends before the image its header declares"),
    ] {
        let path = dir.path().join("jpeg.tfrecord").to_string_lossy().into_owned();
        write(&path, &[encode([("image".to_string(), Feature::bytes([file]))])]);
        let image = FeatureSpec {
            name: "image".into(),
            dtype: DType::Bytes,
            shape: Some(vec![]),
            default: None,
        };
        let def = DatasetDef::tfrecord(vec![path])
            .parse_example(vec![image])
            .map_with("decode_jpeg", vec![Arg::Str("image".into())]);
        let err = read_error(&cluster, &def).await;
        assert!(err.contains("decode_jpeg") && err.contains(says), "{err}");
    }

    let any = FeatureSpec { name: "0".into(), dtype: DType::Int64, shape: None, default: None };
    let def = DatasetDef::tfrecord(vec![wide]).parse_example(vec![any]);
    let err = read_error(&cluster, &def).await;
    assert!(err.contains("MAX_EXAMPLE_FEATURES"), "{err}");

    // The same worker still serves.
    let got =
        collect_i64(cluster.client().distribute(&DatasetDef::range(4), opts()).await.unwrap());
    assert_eq!(got.await, vec![0, 1, 2, 3]);
}
