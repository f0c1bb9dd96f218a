//! Bounds on the spec parameters that size a worker's memory, checked by
//! `DatasetDef::validate` wherever a spec is parsed (client, dispatcher at
//! registration, worker), so a hostile or mistyped number is refused naming its
//! field and its limit instead of growing a buffer until the process is killed.
//!
//! Why a module of its own: the limits are a policy (they are listed in
//! docs/guarantees.md "Bounds" and docs/security.md "Input bounds"), kept apart from
//! the shape of the spec in `def`.
//!
//! The other bounds of a pipeline live beside what they bound: stages and nesting
//! (`def::MAX_STAGES`, `MAX_NESTING`), threads (`MAX_PARALLEL_CALLS`), open inputs
//! (`MAX_CYCLE_LENGTH`), prefetch (`exec::MAX_PREFETCH`, clamped), decoded images
//! (`image::MAX_IMAGE_BYTES`), TFRecord records (`formats::tfrecord::MAX_RECORD_BYTES`)
//! and Examples (`formats::example_bounds`).

use crate::def::{Arg, FeatureSpec, Stage};
use crate::tensor::DType;

/// Upper bound of `batch.size`: elements stacked into one.
pub const MAX_BATCH_SIZE: u64 = 1 << 16;
/// Upper bound of `shuffle.buffer_size`: elements held to shuffle from (tf.data
/// users shuffle small elements with buffers of a few hundred thousand).
pub const MAX_SHUFFLE_BUFFER: u64 = 1 << 20;
/// Upper bound of the values of one `parse_example` feature's fixed shape (the
/// product of its dimensions, counted without overflow): 16 Mi values.
pub const MAX_FEATURE_VALUES: u64 = 1 << 24;
/// Upper bound of the bytes a string default broadcast to a fixed shape makes
/// (values × the default's length).
pub const MAX_FEATURE_DEFAULT_BYTES: u64 = 64 << 20;

/// Checks `stage`'s memory-sizing parameters; `Err((field, message))` names the
/// field under the stage (e.g. `.batch.size`) and the limit.
pub(crate) fn check(stage: &Stage) -> Result<(), (String, String)> {
    let over = |field: &str, value: u64, limit: u64, name: &str| {
        Err((field.to_string(), format!("{value} is over the limit of {limit} ({name})")))
    };
    match stage {
        Stage::Batch { size, .. } if *size > MAX_BATCH_SIZE => {
            over(".batch.size", *size, MAX_BATCH_SIZE, "MAX_BATCH_SIZE")
        }
        Stage::Shuffle { buffer_size, .. } if *buffer_size > MAX_SHUFFLE_BUFFER => {
            over(".shuffle.buffer_size", *buffer_size, MAX_SHUFFLE_BUFFER, "MAX_SHUFFLE_BUFFER")
        }
        Stage::ParseExample { features } => features.iter().enumerate().try_for_each(|(j, f)| {
            check_feature(f)
                .map_err(|(field, m)| (format!(".parse_example.features[{j}]{field}"), m))
        }),
        _ => Ok(()),
    }
}

/// The number of values of a fixed feature shape, `None` on overflow.
pub(crate) fn feature_values(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

fn check_feature(f: &FeatureSpec) -> Result<(), (String, String)> {
    let Some(shape) = &f.shape else {
        return Ok(());
    };
    let values = feature_values(shape).filter(|&n| n <= MAX_FEATURE_VALUES).ok_or_else(|| {
        (
            ".shape".to_string(),
            format!(
                "shape {shape:?} holds more than {MAX_FEATURE_VALUES} values \
                 (MAX_FEATURE_VALUES)"
            ),
        )
    })?;
    if let (Some(Arg::Str(s)), DType::Bytes | DType::String) = (&f.default, f.dtype) {
        let bytes = values.checked_mul(s.len() as u64);
        if !matches!(bytes, Some(b) if b <= MAX_FEATURE_DEFAULT_BYTES) {
            return Err((
                ".default".to_string(),
                format!(
                    "a {}-byte default broadcast to shape {shape:?} makes more than \
                     {MAX_FEATURE_DEFAULT_BYTES} bytes (MAX_FEATURE_DEFAULT_BYTES)",
                    s.len()
                ),
            ));
        }
    }
    Ok(())
}
