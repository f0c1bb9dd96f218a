//! Entry points for the fuzz targets (`fuzz/`) and their corpus-replay test
//! (`tests/fuzz_corpus.rs`); feature `fuzzing`, not an API.
//!
//! Why here: `decode_png` and `decode_jpeg` are crate-private, and the replay test that CI runs on stable
//! must call exactly what the fuzzer called. Each function takes any bytes and must
//! return normally: a panic, an abort, a hang or an allocation beyond the fuzzer's
//! limit is a finding. Where a format carries checksums, the input's first byte can
//! ask for them to be repaired, so that the fuzzer reaches what follows them.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use sluice_proto::v1 as pb;

use crate::def::{Arg, DatasetDef, FeatureSpec, Stage};
use crate::formats::{example, tfrecord, webdataset};
use crate::registry::FunctionRegistry;
use crate::tensor::{DType, Element, Tensor};

/// Elements the spec target pulls from one pipeline.
const MAX_ELEMENTS: usize = 256;
/// The longest `range` the spec target runs, and the most repetitions of one `repeat`.
const MAX_RANGE: i64 = 64;
const MAX_REPEAT: u64 = 3;
/// `repeat` stages past this many (in one input) run once.
const MAX_REPEATS: usize = 2;
/// Elements all `flat_map` / `interleave` calls of one input may make together.
const MAX_INNER: u64 = 512;

/// A JSON spec → parse and validate (`from_json`) → the registry's check → the JSON and
/// wire round trips → the executor, for at most [`MAX_ELEMENTS`] elements, each through
/// the wire conversion and back. Before running, the pipeline is bounded in *time*
/// only (ranges, repeats, inner datasets; see [`bound`]); what sizes memory (batch,
/// shuffle, prefetch, shapes, parallelism) runs as given, so a spec that validates but
/// allocates without bound is a finding. File sources are not run (their paths are
/// the fuzzer's, not test data), and the dataset functions `flat_map` and `interleave`
/// call are replaced by an in-memory one of the same arity.
pub fn spec(data: &[u8]) {
    let Ok(json) = std::str::from_utf8(data) else { return };
    let Ok(def) = DatasetDef::from_json(json) else { return };
    let budget = Arc::new(AtomicU64::new(MAX_INNER));
    let registry = registry(&budget);
    if registry.check(&def).is_err() {
        return;
    }
    let again = DatasetDef::from_json(&def.to_json()).expect("to_json is read back");
    assert_eq!(again, def, "the JSON form round-trips");
    let wire =
        DatasetDef::try_from(pb::DatasetDef::from(&def)).expect("the wire form is read back");
    assert_eq!(wire, def, "the wire form round-trips");
    let mut def = def;
    if !bound(&mut def, &mut 0) {
        return;
    }
    let Ok(iter) = def.iter_local(&registry) else { return };
    for item in iter.take(MAX_ELEMENTS) {
        let Ok(element) = item else { break };
        let back = Element::try_from(pb::Element::from(element.clone()));
        assert_eq!(back.expect("an element the executor made is valid on the wire"), element);
    }
}

/// The built-in registry with every dataset function (all of them open files) replaced
/// by one that makes `range(x mod 8)` of the element's int64 value, within `budget`.
fn registry(budget: &Arc<AtomicU64>) -> FunctionRegistry {
    let mut registry = FunctionRegistry::builtin();
    for name in ["tfrecord", "tfrecord_skip_corrupt", "text_lines", "webdataset"] {
        let budget = budget.clone();
        registry.register_dataset_fn(name, 0, move |e, _| {
            let n = e.as_i64().map_or(1, |x| x.rem_euclid(8) as u64);
            let left = budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    Some(left.saturating_sub(n))
                })
                .unwrap_or(0);
            let n = n.min(left) as i64;
            DatasetDef::range(n).iter_local(&FunctionRegistry::empty()).map_err(|e| e.to_string())
        });
    }
    registry
}

/// Bounds the pipeline's running time (not its memory): ranges of at most
/// [`MAX_RANGE`] elements, `repeat` at most [`MAX_REPEAT`] times and only the first
/// [`MAX_REPEATS`] of them more than once. `false` for a pipeline that reads files.
fn bound(def: &mut DatasetDef, repeats: &mut usize) -> bool {
    for stage in &mut def.stages {
        match stage {
            s if s.is_file_source() => return false,
            Stage::Range { start, stop, step }
                if crate::range_len(*start, *stop, *step) > MAX_RANGE as u64 =>
            {
                *stop = start.saturating_add(step.saturating_mul(MAX_RANGE));
            }
            Stage::Repeat { count } => {
                *repeats += 1;
                let most = if *repeats > MAX_REPEATS { 1 } else { MAX_REPEAT };
                *count = Some(count.unwrap_or(most).min(most));
            }
            Stage::Zip { datasets } => {
                let runs = datasets.iter_mut().all(|d| bound(d, repeats));
                if !runs {
                    return false;
                }
            }
            Stage::Concatenate { dataset } => {
                let runs = bound(dataset, repeats);
                if !runs {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

/// The TFRecord reader over one file. Input: `[mode][file]`; mode bit 0 repairs both
/// checksums of every record (lengths as given), bit 1 reads with `skip_corrupt`.
pub fn tfrecord(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut file = rest.to_vec();
    if mode & 1 == 1 {
        repair_tfrecord(&mut file);
    }
    let reader = tfrecord::TfRecordReader::new(Cursor::new(file), "fuzz.tfrecord", mode & 2 == 2);
    for record in reader.take(MAX_ELEMENTS) {
        if record.is_err() {
            break;
        }
    }
}

/// The WebDataset sample reader over one shard (tar framing, grouping, bounds).
/// Input: `[mode][file]`; mode bit 0 repairs the checksum of every header (the
/// sizes as given), so that the fuzzer reaches the members and their grouping.
pub fn webdataset(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut file = rest.to_vec();
    if mode & 1 == 1 {
        repair_tar(&mut file);
    }
    let reader = webdataset::SampleReader::new(Cursor::new(file), "fuzz.tar");
    // Bad samples are yielded and the reader goes on; a broken framing ends it.
    for sample in reader.take(MAX_ELEMENTS) {
        std::hint::black_box(sample.map(|e| e.byte_len()).ok());
    }
}

/// Writes each header's checksum, walking the headers by their size fields.
fn repair_tar(file: &mut [u8]) {
    let mut at = 0usize;
    while let Some(block) = file.get_mut(at..at + 512) {
        if block.iter().all(|b| *b == 0) {
            return;
        }
        block[148..156].fill(b' ');
        let sum: u32 = block.iter().map(|b| u32::from(*b)).sum();
        block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let Ok(header) = <&[u8; 512]>::try_from(&*block) else { return };
        let Ok(size) = tar::Header::from_byte_slice(header).entry_size() else { return };
        let Some(next) = usize::try_from(size).ok().and_then(|s| s.checked_add(511)) else {
            return;
        };
        at += 512 + (next & !511);
    }
}

fn repair_tfrecord(file: &mut [u8]) {
    let mut at = 0usize;
    while let Some(len_bytes) = file.get(at..at + 8) {
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
        let crc = tfrecord::masked_crc(len_bytes);
        let Some(slot) = file.get_mut(at + 8..at + 12) else { return };
        slot.copy_from_slice(&crc.to_le_bytes());
        let Ok(len) = usize::try_from(len) else { return };
        let start = at + 12;
        let Some(end) = start.checked_add(len) else { return };
        let Some(record) = file.get(start..end) else { return };
        let crc = tfrecord::masked_crc(record);
        let Some(slot) = file.get_mut(end..end + 4) else { return };
        slot.copy_from_slice(&crc.to_le_bytes());
        at = end + 4;
    }
}

/// `tf.train.Example` parsing against a feature spec made of the input's first bytes.
/// Input: `[n][per feature: kind, dims...]` then the serialized Example. Features are
/// named `a`, `b`, `c`; each byte `kind` picks the dtype (bits 0-1), the shape (bits
/// 2-3: variable, scalar, one dimension, two) and whether a default is given (bit 4);
/// a dimension is one byte, or with bit 5 of `kind` eight (so shapes can overflow).
/// The spec must pass `validate` inside a pipeline, as a user's would.
pub fn example(data: &[u8]) {
    let Some((features, record)) = feature_specs(data) else { return };
    let def = DatasetDef::from_ints(vec![0]).parse_example(features.clone());
    if def.validate().is_err() {
        return;
    }
    let names = example::names(&features);
    if let Ok(element) = example::parse(Bytes::copy_from_slice(record), &features, &names) {
        let back = Element::try_from(pb::Element::from(element.clone()));
        assert_eq!(back.expect("a parsed Example is valid on the wire"), element);
    }
}

fn feature_specs(data: &[u8]) -> Option<(Vec<FeatureSpec>, &[u8])> {
    let (&n, mut rest) = data.split_first()?;
    let mut features = Vec::new();
    for name in ["a", "b", "c"].into_iter().take(usize::from(n % 4)) {
        let (&kind, tail) = rest.split_first()?;
        rest = tail;
        let dtype =
            [DType::Int64, DType::Float32, DType::Bytes, DType::String][usize::from(kind & 3)];
        let mut dim = || -> Option<u64> {
            if kind & 32 == 32 {
                let (d, tail) = rest.split_first_chunk::<8>()?;
                rest = tail;
                Some(u64::from_le_bytes(*d))
            } else {
                let (&d, tail) = rest.split_first()?;
                rest = tail;
                Some(u64::from(d))
            }
        };
        let shape = match (kind >> 2) & 3 {
            0 => None,
            1 => Some(vec![]),
            2 => Some(vec![dim()?]),
            _ => Some(vec![dim()?, dim()?]),
        };
        let default = (kind & 16 == 16).then(|| match dtype {
            DType::Int64 => Arg::Int(7),
            DType::Float32 => Arg::Float(0.5),
            _ => Arg::Str("x".into()),
        });
        features.push(FeatureSpec { name: name.into(), dtype, shape, default });
    }
    Some((features, rest))
}

/// `decode_png` on a bytes scalar, then `center_crop` and `normalize` on what it made.
/// Input: `[mode][crop h][crop w][file]`; mode bit 0 repairs every chunk's CRC.
pub fn png(data: &[u8]) {
    let [mode, h, w, rest @ ..] = data else { return };
    let mut file = rest.to_vec();
    if mode & 1 == 1 {
        repair_png(&mut file);
    }
    let Ok(image) = crate::image::decode_png(&Tensor::scalar_bytes(&file)) else { return };
    let (h, w) = (u64::from(*h).max(1), u64::from(*w).max(1));
    if let Ok(cropped) = crate::image::center_crop(&image, h, w) {
        assert_eq!(cropped.shape()[..2], [h, w], "center_crop makes the asked size");
    }
    let unit = crate::image::Normalization::unit();
    let normalized = crate::image::normalize(&image, &unit).expect("decode_png makes uint8 pixels");
    assert_eq!(normalized.shape(), image.shape());
}

/// `decode_jpeg` on a bytes scalar, then the augmentation maps on what it made:
/// `random_resized_crop`, `random_flip`, `resize` and `normalize` to CHW.
/// Input: `[mode][h][w][seed][file]`; mode bits 0-1 pick the channels (the file's,
/// 1, 3, the file's), bit 2 the key (an index, or an origin); the sizes are at most
/// 64 so that a run stays fast.
pub fn jpeg(data: &[u8]) {
    use crate::registry::ElementKey;
    let [mode, h, w, seed, file @ ..] = data else { return };
    let channels = [None, Some(1), Some(3), None][usize::from(mode & 3)];
    let Ok(image) = crate::image::decode_jpeg(&Tensor::scalar_bytes(file), channels) else {
        return;
    };
    let c = image.shape()[2];
    assert!(c == 1 || c == 3, "decode_jpeg makes 1 or 3 channels, made {c}");
    let (h, w) = (i64::from(h % 64) + 1, i64::from(w % 64) + 1);
    let tag = sluice_positions::Tag::record(u64::from(*seed), 7);
    let key =
        if mode & 4 == 4 { ElementKey::Origin(&tag) } else { ElementKey::Index(u64::from(*seed)) };
    let registry = FunctionRegistry::builtin();
    let name = Arg::Str("img".into());
    let calls = [
        (
            "random_resized_crop",
            vec![name.clone(), Arg::Int(h), Arg::Int(w), Arg::Int(*seed as i64)],
        ),
        ("random_flip", vec![name.clone(), Arg::Int(*seed as i64)]),
        ("resize", vec![name.clone(), Arg::Int(w), Arg::Int(h), Arg::Str("bicubic".into())]),
        (
            "normalize",
            vec![name.clone(), Arg::Float(0.5), Arg::Float(0.25), Arg::Str("chw".into())],
        ),
    ];
    let mut element = Element::named(vec!["img".into()], vec![image]).expect("one named component");
    for (f, args) in calls {
        let map = registry.map_fn(f).expect("a built-in map");
        element = map(element, &args, key).expect("the maps take what decode_jpeg made");
    }
    let shape = [c, w as u64, h as u64];
    assert_eq!(element.components[0].shape(), shape, "normalize to CHW of the resized image");
}

/// Rewrites the CRC of each chunk after the 8-byte signature, as far as lengths fit.
fn repair_png(file: &mut [u8]) {
    let mut at = 8usize;
    while let Some(len) = file.get(at..at + 4) {
        let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
        let Some(end) = (at + 8).checked_add(len) else { return };
        let Some(typed) = file.get(at + 4..end) else { return };
        let crc = crc32(typed);
        let Some(slot) = file.get_mut(end..end + 4) else { return };
        slot.copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
}

/// PNG's CRC-32 (IEEE, reflected), bitwise: only the fuzz harness needs it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
