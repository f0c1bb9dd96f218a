//! An exactly-once iteration's progress record over its life: created with the
//! iteration, told when consumers join and leave, dropped with it.

use sluice_positions::RecordSet;

use crate::exactly_once::Progress;
use crate::state::{ClientId, IterationId, State};

/// A new iteration of an exactly-once job gets an empty progress record
/// (`RestoreIteration` replaces it with the position's).
pub(crate) fn iteration_created(state: &mut State, iteration_id: IterationId) {
    let Some(job_id) = state.iterations.get(&iteration_id).map(|it| it.job_id) else { return };
    if let Some(rule) = state.exactly_once.jobs.get(&job_id).copied() {
        state.exactly_once.iterations.insert(iteration_id, Progress::new(rule, RecordSet::new()));
    }
}

/// A consumer joined at `generation` (0, or a restored position's).
pub(crate) fn client_joined(
    state: &mut State,
    iteration_id: IterationId,
    client_id: ClientId,
    generation: u64,
) {
    if let Some(p) = state.exactly_once.iterations.get_mut(&iteration_id) {
        p.client_generations.insert(client_id, generation);
    }
}

/// A consumer left (released, or timed out): it acknowledges nothing more, so
/// no orphan waits for it, and no generation is kept for it.
pub(crate) fn client_left(state: &mut State, iteration_id: IterationId, client_id: ClientId) {
    if let Some(p) = state.exactly_once.iterations.get_mut(&iteration_id) {
        p.client_generations.remove(&client_id);
        for o in &mut p.orphans {
            o.waiting.remove(&client_id);
        }
        p.fold_generations();
    }
}

/// The iteration was forgotten (`ForgetIteration`), and its job with it if
/// `job_forgotten`.
pub(crate) fn iteration_forgotten(
    state: &mut State,
    iteration_id: IterationId,
    job_forgotten: Option<crate::state::JobId>,
) {
    state.exactly_once.iterations.remove(&iteration_id);
    if let Some(job_id) = job_forgotten {
        state.exactly_once.jobs.remove(&job_id);
    }
}
