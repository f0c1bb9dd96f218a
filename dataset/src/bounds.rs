//! Bounds on the spec parameters that size a worker's memory, checked by
//! `DatasetDef::validate` (`def`, which calls the checks here: this module is a
//! leaf) wherever a spec is parsed (client, dispatcher at
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

/// `Err(message)` naming the limit when `value` is over `limit`.
pub(crate) fn at_most(value: u64, limit: u64, name: &str) -> Result<(), String> {
    if value > limit {
        return Err(format!("{value} is over the limit of {limit} ({name})"));
    }
    Ok(())
}

/// The number of values of a fixed feature shape, `None` on overflow.
pub(crate) fn feature_values(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

/// Checks a `parse_example` feature's fixed `shape` and, for a string default of
/// `default_len` bytes, the bytes its broadcast makes; `Err((field, message))`
/// names the field under the feature (`.shape`, `.default`) and the limit.
pub(crate) fn feature(
    shape: &[u64],
    default_len: Option<usize>,
) -> Result<(), (&'static str, String)> {
    let values = feature_values(shape).filter(|&n| n <= MAX_FEATURE_VALUES).ok_or_else(|| {
        (
            ".shape",
            format!(
                "shape {shape:?} holds more than {MAX_FEATURE_VALUES} values \
                 (MAX_FEATURE_VALUES)"
            ),
        )
    })?;
    if let Some(len) = default_len {
        let bytes = values.checked_mul(len as u64);
        if !matches!(bytes, Some(b) if b <= MAX_FEATURE_DEFAULT_BYTES) {
            return Err((
                ".default",
                format!(
                    "a {len}-byte default broadcast to shape {shape:?} makes more than \
                     {MAX_FEATURE_DEFAULT_BYTES} bytes (MAX_FEATURE_DEFAULT_BYTES)"
                ),
            ));
        }
    }
    Ok(())
}
