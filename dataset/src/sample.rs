//! A sample image dataset (TFRecord files of `tf.train.Example`s holding a PNG and
//! a label, or WebDataset tar shards of JPEGs and labels) and the pipelines that
//! read them: what benchmarks and demos run, shaped
//! like a real ImageNet-style input pipeline (list → interleave → parse → decode →
//! crop → normalize → batch).
//!
//! The pixels are pseudo-random from the seed (smooth gradients plus noise), so the
//! output is reproducible and the PNGs do not compress to nothing.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::def::{Arg, DatasetDef, FeatureSpec, Stage};
use crate::error::DatasetError;
use crate::formats::example::{self, Feature};
use crate::formats::tfrecord::TfRecordWriter;
use crate::io;
use crate::tensor::DType;

/// What [`write_image_dataset`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleSummary {
    /// The files, in order (`out_dir/part-00000-of-00064.tfrecord`, …).
    pub files: Vec<String>,
    pub records: u64,
    /// Total size of the files.
    pub bytes: u64,
}

/// Number of distinct labels (`0..NUM_LABELS`).
pub const NUM_LABELS: i64 = 10;

/// Writes `files` TFRecord files of `records_per_file` Examples each into
/// `out_dir` (a path or an `s3://`/`gs://` prefix): feature `image`, an RGB PNG of
/// `image_size`², and `label`, an int64 in `0..10`. Deterministic for a seed.
pub fn write_image_dataset(
    out_dir: &str,
    files: usize,
    records_per_file: usize,
    image_size: u32,
    seed: u64,
) -> Result<SampleSummary, DatasetError> {
    if image_size == 0 {
        return Err(DatasetError::io(out_dir, "image_size must be > 0"));
    }
    let mut summary = SampleSummary { files: Vec::new(), records: 0, bytes: 0 };
    for f in 0..files {
        let url = io::join(out_dir, &format!("part-{f:05}-of-{files:05}.tfrecord"));
        let mut rng =
            ChaCha8Rng::seed_from_u64(seed ^ (f as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut out = TfRecordWriter::new(io::create(&url)?);
        for _ in 0..records_per_file {
            let png = random_png(&mut rng, image_size).map_err(|e| DatasetError::io(&url, e))?;
            let label = rng.gen_range(0..NUM_LABELS);
            let record = example::encode([
                ("image".to_string(), Feature::bytes([png])),
                ("label".to_string(), Feature::ints(vec![label])),
            ]);
            out.write(&record).map_err(|e| DatasetError::io(&url, e))?;
            summary.bytes += 16 + record.len() as u64;
            summary.records += 1;
        }
        out.into_inner().finish()?;
        summary.files.push(url);
    }
    Ok(summary)
}

/// RGB pixels: a gradient with a random direction and tint, plus noise.
fn gradient(rng: &mut ChaCha8Rng, w: u32, h: u32) -> Vec<u8> {
    let (gx, gy): (u32, u32) = (rng.gen_range(0..4), rng.gen_range(0..4));
    let tint: [u8; 3] = rng.gen();
    let mut pixels = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            for t in tint {
                let base = (x * gx + y * gy) as u8;
                let noise: u8 = rng.gen_range(0..32);
                pixels.push(base.wrapping_add(t).wrapping_add(noise));
            }
        }
    }
    pixels
}

/// An RGB PNG of [`gradient`] pixels.
fn random_png(rng: &mut ChaCha8Rng, size: u32) -> Result<Vec<u8>, png::EncodingError> {
    let pixels = gradient(rng, size, size);
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, size, size);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(out)
}

/// Writes `files` WebDataset shards of `samples_per_file` samples each into
/// `out_dir` (a path or an `s3://`/`gs://` prefix), `shard-00000.tar`, …: sample
/// `000042` is `000042.jpg`, an RGB JPEG whose sides vary between half and one and
/// a half times `image_size`, and `000042.cls`, its label in `0..10` as ASCII
/// digits (webdataset's convention). Deterministic for a seed.
pub fn write_webdataset(
    out_dir: &str,
    files: usize,
    samples_per_file: usize,
    image_size: u32,
    seed: u64,
) -> Result<SampleSummary, DatasetError> {
    if image_size < 2 {
        return Err(DatasetError::io(out_dir, "image_size must be at least 2"));
    }
    let mut summary = SampleSummary { files: Vec::new(), records: 0, bytes: 0 };
    for f in 0..files {
        let url = io::join(out_dir, &format!("shard-{f:05}.tar"));
        let mut rng =
            ChaCha8Rng::seed_from_u64(seed ^ (f as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut tar = tar::Builder::new(io::create(&url)?);
        for s in 0..samples_per_file {
            let key = format!("{:06}", f * samples_per_file + s);
            let (w, h) = (
                rng.gen_range(image_size / 2..=image_size * 3 / 2),
                rng.gen_range(image_size / 2..=image_size * 3 / 2),
            );
            let jpeg = random_jpeg(&mut rng, w, h).map_err(|e| DatasetError::io(&url, e))?;
            let label = rng.gen_range(0..NUM_LABELS).to_string();
            for (ext, data) in [("jpg", jpeg.as_slice()), ("cls", label.as_bytes())] {
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_entry_type(tar::EntryType::Regular);
                tar.append_data(&mut header, format!("{key}.{ext}"), data)
                    .map_err(|e| DatasetError::io(&url, e))?;
                summary.bytes += 512 + (data.len() as u64).div_ceil(512) * 512;
            }
            summary.records += 1;
        }
        let out = tar.into_inner().map_err(|e| DatasetError::io(&url, e))?;
        out.finish()?;
        summary.bytes += 1024;
        summary.files.push(url);
    }
    Ok(summary)
}

/// A `w`×`h` RGB JPEG (quality 90) of [`gradient`] pixels.
fn random_jpeg(
    rng: &mut ChaCha8Rng,
    w: u32,
    h: u32,
) -> Result<Vec<u8>, jpeg_encoder::EncodingError> {
    let pixels = gradient(rng, w, h);
    let mut out = Vec::new();
    let (w, h) = (w.min(u32::from(u16::MAX)) as u16, h.min(u32::from(u16::MAX)) as u16);
    jpeg_encoder::Encoder::new(&mut out, 90).encode(&pixels, w, h, jpeg_encoder::ColorType::Rgb)?;
    Ok(out)
}

/// The pipeline that reads a [`write_webdataset`] directory: `list_files(pattern)`
/// → `interleave(webdataset, cycle_length 4, block_length 1, num_parallel_calls 4)`
/// → `batch(32)`: batches of `__key__`, `cls` and `jpg` (the encoded bytes; decode
/// them in the pipeline or the trainer). `pattern` is e.g. `dir/*.tar`.
pub fn webdataset_pipeline(pattern: &str) -> DatasetDef {
    let mut def = DatasetDef::list_files(pattern);
    def.stages.push(Stage::Interleave {
        name: "webdataset".into(),
        args: vec![],
        cycle_length: 4,
        block_length: 1,
        num_parallel_calls: 4,
    });
    def.batch(32, false)
}

/// The pipeline that reads a [`write_image_dataset`] directory: `list_files(pattern)`
/// → `interleave(tfrecord, cycle_length 4, block_length 1, num_parallel_calls 4)` →
/// `parse_example(image: bytes, label: int64)` → `map decode_png(image)` (one call
/// per core) → `map center_crop(image, s-8, s-8)` → `map normalize(image)` →
/// `batch(32)`. `pattern` is e.g. `dir/*.tfrecord`.
pub fn image_pipeline(pattern: &str, image_size: u32) -> DatasetDef {
    let crop = i64::from(image_size.saturating_sub(8).max(1));
    let mut def = DatasetDef::list_files(pattern);
    def.stages.push(Stage::Interleave {
        name: "tfrecord".into(),
        args: vec![],
        cycle_length: 4,
        block_length: 1,
        num_parallel_calls: 4,
    });
    let scalar = |name: &str, dtype| FeatureSpec {
        name: name.into(),
        dtype,
        shape: Some(vec![]),
        default: None,
    };
    def.parse_example(vec![scalar("image", DType::Bytes), scalar("label", DType::Int64)])
        .parallel_map("decode_png", vec![Arg::Str("image".into())], 0)
        .map_with("center_crop", vec![Arg::Str("image".into()), Arg::Int(crop), Arg::Int(crop)])
        .map_with("normalize", vec![Arg::Str("image".into())])
        .batch(32, false)
}

/// Words of the sample text rows.
const WORDS: [&str; 16] = [
    "the", "river", "data", "flows", "through", "a", "sluice", "gate", "to", "every", "trainer",
    "once", "and", "only", "once", "again",
];

/// Writes `files` Parquet files of `rows_per_file` rows into `out_dir` (a path or
/// an `s3://`/`gs://` prefix), `part-00000.parquet`, …, in row groups of
/// `rows_per_group` rows (zstd): `id` (int64, the row's number across files),
/// `text` (a string of 3 to 40 words), `label` (int64 in `0..10`) and `tokens`
/// (a list of 1 to 64 int32 word ids). Written by arrow-rs's `ArrowWriter`;
/// deterministic for a seed.
pub fn write_parquet(
    out_dir: &str,
    files: usize,
    rows_per_file: usize,
    rows_per_group: usize,
    seed: u64,
) -> Result<SampleSummary, DatasetError> {
    use std::sync::Arc;

    use arrow_array::builder::{Int32Builder, ListBuilder};
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;

    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows_per_group.max(1)))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut summary = SampleSummary { files: Vec::new(), records: 0, bytes: 0 };
    for f in 0..files {
        let url = io::join(out_dir, &format!("part-{f:05}.parquet"));
        let bad = |e: &dyn std::fmt::Display| DatasetError::io(&url, e);
        let mut rng =
            ChaCha8Rng::seed_from_u64(seed ^ (f as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let first = (f * rows_per_file) as i64;
        let ids = Int64Array::from_iter_values(first..first + rows_per_file as i64);
        let mut texts = Vec::with_capacity(rows_per_file);
        let mut tokens = ListBuilder::new(Int32Builder::new());
        for _ in 0..rows_per_file {
            let n = rng.gen_range(3..=40);
            let words: Vec<usize> = (0..n).map(|_| rng.gen_range(0..WORDS.len())).collect();
            texts.push(words.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" "));
            let t = rng.gen_range(1..=64);
            tokens.append_value((0..t).map(|i| Some(words[i % words.len()] as i32)));
        }
        let labels =
            Int64Array::from_iter_values((0..rows_per_file).map(|_| rng.gen_range(0..NUM_LABELS)));
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("id", Arc::new(ids)),
            ("text", Arc::new(StringArray::from(texts))),
            ("label", Arc::new(labels)),
            ("tokens", Arc::new(tokens.finish())),
        ];
        let batch = RecordBatch::try_from_iter(columns).map_err(|e| bad(&e))?;
        let out = io::create(&url)?;
        let mut w =
            ArrowWriter::try_new(out, batch.schema(), Some(props.clone())).map_err(|e| bad(&e))?;
        w.write(&batch).map_err(|e| bad(&e))?;
        summary.bytes += w.bytes_written() as u64;
        let out = w.into_inner().map_err(|e| bad(&e))?;
        out.finish()?;
        summary.records += rows_per_file as u64;
        summary.files.push(url);
    }
    Ok(summary)
}

/// The pipeline that reads a [`write_parquet`] directory: `parquet(pattern)` with
/// every column, one element per row. `pattern` is e.g. `dir/*.parquet`.
pub fn parquet_pipeline(pattern: &str) -> DatasetDef {
    let source = crate::formats::parquet::ParquetSource {
        pattern: Some(pattern.to_string()),
        ..Default::default()
    };
    DatasetDef { stages: vec![Stage::Parquet(source)] }
}
