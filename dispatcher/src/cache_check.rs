//! What a cross-trainer cache job requires, checked by `apply` when the job is
//! created (pure: it reads only the definition and the request).
//!
//! tf.data checks these at iterator initialisation; here the job is the earliest
//! point that knows both the pipeline and the flag, and a refused job leaves
//! nothing behind. Coordinated reads (`num_consumers`) are not available on this
//! branch; when they are, a cache job must refuse them too (tf.data does).

use sluice_dataset::{Cardinality, DatasetDef};

use crate::error::StateError;

/// Refuses a cache job without a name (the cache is shared by trainers that join
/// the same job by name) or over a pipeline known to end (the window slides over
/// one endless sequence; tf.data refuses any cardinality ≥ 0).
pub(crate) fn check(
    def: &DatasetDef,
    dataset_id: &str,
    job_name: Option<&str>,
) -> Result<(), StateError> {
    if job_name.is_none() {
        return Err(StateError::InvalidArgument(
            "the cross-trainer cache needs a job name: trainers share the cache by joining \
             the same named job (set ReadOptions.job_name / sluice read --job-name)"
                .into(),
        ));
    }
    if let Cardinality::Finite(count) = def.cardinality() {
        let count = format!(" ({count} elements)");
        return Err(StateError::InvalidArgument(format!(
            "the cross-trainer cache needs an infinite dataset, and dataset `{dataset_id}` \
             is finite{count}; add `repeat` without a count (DatasetDef::repeat_forever) \
             after the stages to cache, or read without the cache"
        )));
    }
    Ok(())
}

/// A named job joined with a different cache flag than it was created with.
pub(crate) fn identity_conflict(name: &str, existing: bool, asked: bool) -> StateError {
    StateError::InvalidArgument(format!(
        "job `{name}` already exists with use_cross_trainer_cache={existing}, but this \
         request asked for use_cross_trainer_cache={asked}; use the same setting to join \
         it, or another job name"
    ))
}
