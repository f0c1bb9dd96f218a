//! A lost task's units (docs/exactly-once.md, "Worker death").
//!
//! When a task of an exactly-once iteration is lost (its worker declared lost,
//! or registered again as a new process), every unit granted to it that is not
//! whole becomes an *orphan*: it waits until every current consumer of the
//! iteration listed the task in `lost_tasks_done` (having dropped what it held
//! of it and reported what it consumed of it), then `grants.rs` hands it out
//! again, first, skipping its consumed records. A consumer that leaves no
//! longer counts (`progress::client_left`).
//!
//! Someone must read the orphans: tasks that were already told end-of-splits
//! will not ask again. When no task of the iteration can still ask for splits,
//! a new task is made on a live worker that takes part ([`ensure_reader`]).

use super::super::iterations;
use crate::exactly_once::Orphan;
use crate::state::{IterationId, SplitAnswer, State, TaskId};

/// Turns `task_id`'s granted units that are not whole into orphans.
pub(crate) fn orphan_task(state: &mut State, iteration_id: IterationId, task_id: TaskId) {
    let clients = match state.iterations.get(&iteration_id) {
        Some(it) => it.clients.clone(),
        None => return,
    };
    let Some(p) = state.exactly_once.iterations.get_mut(&iteration_id) else { return };
    p.last_skips.remove(&task_id);
    let Some(ranges) = p.granted.remove(&task_id) else { return };
    for (begin, end) in ranges {
        if begin == end {
            // A deterministic order's announcement of a split all whole: its
            // consumer may not have received it (`ordered.rs` makes it again).
            p.orphans.push(Orphan { task_id, begin, end, waiting: clients.clone() });
            continue;
        }
        for (begin, end) in p.unfinished_ranges(begin, end) {
            p.orphans.push(Orphan { task_id, begin, end, waiting: clients.clone() });
        }
    }
}

/// Ends a task of an exactly-once iteration whose worker registered again as a
/// new process (the new process does not have its pipeline): like a lost
/// worker's task, so its units become orphans and its worker gets a fresh task.
/// Does nothing to a task of an at-most-once iteration.
pub(crate) fn end_restarted_task(state: &mut State, task_id: TaskId) {
    let Some(task) = state.tasks.get(&task_id) else { return };
    let iteration_id = task.iteration_id;
    if !state.exactly_once.iterations.contains_key(&iteration_id) || task.finished {
        return;
    }
    let address = task.worker_address.clone();
    if let Some(task) = state.tasks.get_mut(&task_id) {
        task.finished = true;
        task.lost = true;
        task.last_split = None;
    }
    if let Some(w) = state.workers.get_mut(&address) {
        w.active_tasks_mut().remove(&task_id);
    }
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        it.lost_tasks.insert(task_id);
    }
    orphan_task(state, iteration_id, task_id);
}

/// The worker at `address` is gone (lost, or restarted as a new process): its
/// tasks of live exactly-once iterations that already ended normally may still
/// have held produced elements no consumer took. Those with granted units that
/// are not whole end as lost too (consumers acknowledge them like any lost
/// task), and their units become orphans. Returns the iterations touched.
pub(crate) fn orphan_finished_tasks(state: &mut State, address: &str) -> Vec<IterationId> {
    let ended: Vec<(TaskId, IterationId)> = state
        .tasks
        .values()
        .filter(|t| t.worker_address == address && t.finished && !t.lost)
        .filter(|t| state.iterations.get(&t.iteration_id).is_some_and(|it| it.is_live()))
        .filter(|t| {
            state
                .exactly_once
                .iterations
                .get(&t.iteration_id)
                .is_some_and(|p| p.granted.contains_key(&t.id))
        })
        .map(|t| (t.id, t.iteration_id))
        .collect();
    for (task_id, iteration_id) in &ended {
        if let Some(t) = state.tasks.get_mut(task_id) {
            t.lost = true;
        }
        if let Some(it) = state.iterations.get_mut(iteration_id) {
            it.lost_tasks.insert(*task_id);
        }
        orphan_task(state, *iteration_id, *task_id);
    }
    ended.into_iter().map(|(_, it)| it).collect()
}

/// Whether a task may still ask for splits: running, and not told end-of-splits.
fn can_read(state: &State, task_id: TaskId) -> bool {
    state.tasks.get(&task_id).is_some_and(|t| {
        !t.finished
            && !t.lost
            && !matches!(t.last_split.map(|l| l.answer), Some(SplitAnswer::EndOfSplits))
    })
}

/// If the live iteration has orphans and no task that can still read them,
/// gives one live worker that takes part, and has fewer than `cap` unfinished
/// tasks, a new task in it (the worker with the fewest, then by address).
/// Without such a worker, the next worker to register gets one
/// (`RegisterWorker` calls this again). `cap` is the command's
/// `max_tasks_per_worker` where it carries limits (`RegisterWorker`), else
/// `u64::MAX`: a worker loss or sweep must not leave orphans without a reader.
pub(crate) fn ensure_reader(state: &mut State, iteration_id: IterationId, cap: u64) {
    let Some(it) = state.iterations.get(&iteration_id) else { return };
    if !it.is_live() || !state.exactly_once.has_orphans(iteration_id) {
        return;
    }
    if it.tasks.iter().any(|t| can_read(state, *t)) {
        return;
    }
    let job_id = it.job_id;
    let worker = state
        .workers
        .values()
        .filter(|w| !w.lost && state.takes_part(iteration_id, &w.address))
        .filter(|w| (w.active_tasks.len() as u64) < cap)
        .min_by_key(|w| (w.active_tasks.len(), w.address.clone()))
        .map(|w| w.address.clone());
    if let Some(address) = worker {
        let task_id = iterations::new_task(state, job_id, iteration_id, &address);
        if let Some(it) = state.iterations.get_mut(&iteration_id) {
            it.tasks.push(task_id);
        }
    }
}

/// [`ensure_reader`] for every exactly-once iteration (a worker registered).
pub(crate) fn ensure_readers(state: &mut State, cap: u64) {
    let ids: Vec<IterationId> = state.exactly_once.iterations.keys().copied().collect();
    for id in ids {
        ensure_reader(state, id, cap);
    }
}
