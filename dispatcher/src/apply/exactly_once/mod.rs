//! Exactly-once delivery, the replicated half (docs/exactly-once.md): what the
//! exactly-once commands do, and the hooks the other `apply` modules call for an
//! iteration of an exactly-once job. The state is `crate::exactly_once`; a job
//! or iteration without an entry there is at-most-once and none of this runs
//! for it.
//!
//! - `jobs`: `GetOrCreateExactlyOnceJob` (refusals, joining, the job's rule).
//! - `progress`: an iteration's progress record created with it, consumers
//!   joining and leaving, and the records an iteration forgets with it.
//! - `consumed`: `ReportConsumed` (consumed records, the watermark, the
//!   per-generation record of checkpoint watermarks, acknowledgements).
//! - `orphans`: a lost task's granted units that are not whole become orphans
//!   awaiting every consumer's acknowledgement; a task that can read them again
//!   is made when none is left.
//! - `grants`: `GetSplit` of an exactly-once iteration: orphans first, then the
//!   cursor, with the consumed runs of the granted units as `skip_runs`; `Wait`
//!   past the end while orphans wait.
//! - `ordered`: `GetSplit` of a deterministic-order iteration (one split per
//!   grant, in the seeded order, each with its place; orphans whole).
//! - `restore`: `RestoreIteration`.
//! - `sweep`: `SweepIteration`, the end-of-epoch sweep: records delivered to no
//!   consumer that holds them any more are read again.
//!
//! ```text
//!  jobs ─► super::jobs        restore ─► super::iterations, progress
//!  orphans ─► super::iterations::new_task     grants, consumed ─► (state only)
//!  sweep ─► orphans
//! ```

pub(super) mod consumed;
pub(super) mod grants;
pub(super) mod jobs;
pub(super) mod ordered;
pub(super) mod orphans;
pub(super) mod progress;
pub(super) mod restore;
pub(super) mod sweep;
