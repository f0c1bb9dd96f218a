//! The client-side checks of a cross-trainer cache read, so a reader learns what is
//! missing before anything reaches the dispatcher. The dispatcher checks the job
//! name and the dataset's cardinality again when it creates the job.

use crate::error::ClientError;
use crate::options::ReadOptions;

pub(crate) fn validate(opts: &ReadOptions) -> Result<(), ClientError> {
    let bad = |m: &str| Err(ClientError::InvalidArgument(m.to_string()));
    match (&opts.trainer_id, opts.use_cross_trainer_cache) {
        (None, false) => Ok(()),
        (Some(_), false) => bad("trainer_id is set but use_cross_trainer_cache is not; use \
             ReadOptions::cross_trainer_cache(trainer_id) to read through the cache"),
        (None, true) => {
            bad("use_cross_trainer_cache needs a trainer_id: each trainer reads the cache at \
             its own cursor; use ReadOptions::cross_trainer_cache(trainer_id)")
        }
        (Some(id), true) if id.is_empty() => {
            bad("trainer_id must not be empty for the cross-trainer cache")
        }
        (Some(_), true) if opts.job_name.is_none() => {
            bad("the cross-trainer cache needs a job name: trainers share the cache by joining \
             the same named job (set ReadOptions.job_name / sluice read --job-name)")
        }
        (Some(_), true) => Ok(()),
    }
}
