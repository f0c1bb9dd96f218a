//! A sample image dataset (TFRecord files of `tf.train.Example`s holding a PNG and
//! a label) and the pipeline that reads it: what benchmarks and demos run, shaped
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

/// An RGB image: a gradient with a random direction and tint, plus noise.
fn random_png(rng: &mut ChaCha8Rng, size: u32) -> Result<Vec<u8>, png::EncodingError> {
    let (gx, gy): (u32, u32) = (rng.gen_range(0..4), rng.gen_range(0..4));
    let tint: [u8; 3] = rng.gen();
    let mut pixels = Vec::with_capacity((size * size * 3) as usize);
    for y in 0..size {
        for x in 0..size {
            for t in tint {
                let base = (x * gx + y * gy) as u8;
                let noise: u8 = rng.gen_range(0..32);
                pixels.push(base.wrapping_add(t).wrapping_add(noise));
            }
        }
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, size, size);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(out)
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
