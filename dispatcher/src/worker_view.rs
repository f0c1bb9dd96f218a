//! A worker's heartbeat answer, and the long poll that holds an empty one.
//!
//! A worker learns its tasks only from heartbeat answers. Polled every heartbeat
//! interval (500 ms), a task created just after a heartbeat waited up to that long
//! before its worker started it: the first element of a job came ~0.6 s after it
//! was made, and a DYNAMIC epoch could not end until every worker had picked up
//! (and found nothing left in) its task, 0–500 ms after the last element. So a
//! worker that asks for it (`wait_for_change_ms`) gets its answer held while it
//! would be empty, and sent as soon as an applied change gives it a task to start
//! or to delete. The wait is `long_poll.rs`'s, shared with the client's long poll
//! (`client_view.rs`).
//!
//! A heartbeat names the worker's running tasks by their list or, when the last
//! answer's `active_tasks_digest` is the digest of the worker's set, by that
//! digest alone (`Running`): nearly every heartbeat changes nothing, and the list
//! holds an id per task of the worker (N workers × tasks each, every interval).
//! A digest that is not the active tasks' (they changed since that answer) is
//! answered at once with `current_tasks_wanted`; the worker sends its list.
//!
//! ```text
//!  heartbeat ─► read_leader(answer) ─► tasks to start or delete? ─► answer
//!                       ▲                        │ no
//!                       └── applied index changed, or the wait is over ─┘
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sluice_proto::task_set::task_set_digest;
use sluice_proto::v1 as pb;

use crate::convert::task_def;
use crate::core::Core;
use crate::error::{ProposeError, StateError};
use crate::long_poll::wait_for_change;
use crate::state::State;

/// What a heartbeat says the worker runs.
#[derive(Debug)]
pub(crate) enum Running {
    /// The ids themselves (`current_tasks`).
    Listed(BTreeSet<u64>),
    /// Only their digest (`current_tasks_omitted`): the worker runs the active
    /// tasks that an earlier answer named, if this is their digest.
    Digest(u64),
}

impl Running {
    pub(crate) fn of(req: &mut pb::WorkerHeartbeatRequest) -> Running {
        if req.current_tasks_omitted && req.current_tasks.is_empty() {
            Running::Digest(req.current_tasks_digest)
        } else {
            Running::Listed(std::mem::take(&mut req.current_tasks).into_iter().collect())
        }
    }
}

fn active_of<'s>(s: &'s State, address: &str) -> Option<&'s Arc<BTreeSet<u64>>> {
    s.workers.get(address).map(|w| &w.active_tasks)
}

/// The most workers whose digest is cached; past it the cache starts over.
const MAX_CACHED_WORKERS: usize = 100_000;

/// Soft state: each worker's active-tasks digest at a views generation
/// (`Core::views`: it moves with every applied command that may change a
/// worker's active tasks). Most heartbeats find the generation unchanged, so a
/// worker's digest costs a lookup, not a pass over its task ids.
#[derive(Default)]
pub(crate) struct WorkerDigests {
    // A std Mutex: held for one map operation, never across an await or a digest.
    cache: Mutex<HashMap<String, (u64, u64)>>,
}

impl WorkerDigests {
    /// The digest of `address`'s active tasks in `s`, read at views generation
    /// `generation`.
    pub(crate) fn digest(&self, s: &State, generation: u64, address: &str) -> u64 {
        let cached = self.lock().get(address).copied();
        if let Some((_, d)) = cached.filter(|(g, _)| *g == generation) {
            return d;
        }
        let d = task_set_digest(active_of(s, address).into_iter().flat_map(|a| a.iter()).copied());
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED_WORKERS {
            cache.clear();
        }
        match cache.get_mut(address) {
            Some(entry) => *entry = (generation, d),
            None => {
                cache.insert(address.to_string(), (generation, d));
            }
        }
        d
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, u64)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The tasks `address` should start (assigned to it, not among `current`) and
/// stop (among `current`, no longer active for it), with `digest`, the digest of
/// its active tasks.
///
/// Two merges of the sorted id sets (`BTreeSet::difference`); only the tasks to
/// start are looked up in the registry (and rendered). A worker whose running
/// tasks are its active ones costs passes over its own task ids, nothing per task
/// of the registry (and a worker that sent the digest, not even that).
pub(crate) fn answer(
    s: &State,
    address: &str,
    current: &BTreeSet<u64>,
    digest: u64,
) -> pb::WorkerHeartbeatResponse {
    let empty = BTreeSet::new();
    let active = active_of(s, address).map_or(&empty, |a| &**a);
    let new_tasks = active
        .difference(current)
        .filter_map(|id| s.tasks.get(id))
        .filter_map(|t| task_def(s, t))
        .collect();
    let tasks_to_delete = current.difference(active).copied().collect();
    pb::WorkerHeartbeatResponse {
        new_tasks,
        tasks_to_delete,
        long_polled: false,
        active_tasks_digest: digest,
        current_tasks_wanted: false,
    }
}

/// The answer to a heartbeat that sent only the digest `digest` of its running
/// tasks, given `active`, the digest of its active tasks now. The first read
/// decides what the worker runs (`decided`, set once): its active tasks then, if
/// they have that digest; if not, the worker's set is unknown, and the answer
/// asks for its list (`current_tasks_wanted`). While the active tasks still have
/// the worker's digest there is nothing to start or stop; once they changed, the
/// answer is the diff against the set the first read decided, as for a list.
///
/// The decided set is the state's own, shared (`Worker::active_tasks`), not a
/// copy: every held heartbeat keeps one, and copying a worker's set per
/// heartbeat cost ~4 % of the leader's CPU at 2,000 workers of 200 tasks each.
/// An applied change to the worker's set copies it then, once, while held.
fn answer_digest(
    s: &State,
    address: &str,
    digest: u64,
    active: u64,
    decided: &OnceLock<Option<Arc<BTreeSet<u64>>>>,
) -> pb::WorkerHeartbeatResponse {
    let decided = decided.get_or_init(|| {
        let tasks = active_of(s, address)?;
        (active == digest).then(|| Arc::clone(tasks))
    });
    match decided {
        Some(_) if active == digest => {
            pb::WorkerHeartbeatResponse { active_tasks_digest: active, ..Default::default() }
        }
        Some(current) => answer(s, address, current, active),
        None => pb::WorkerHeartbeatResponse { current_tasks_wanted: true, ..Default::default() },
    }
}

/// Why a heartbeat is refused: `None`, the worker is not registered (or was
/// declared lost); `Some`, the request is not the registered worker's.
pub(crate) type Refused = Option<StateError>;

/// A heartbeat's worker and what it says it runs.
#[derive(Clone, Copy)]
pub(crate) struct Asking<'a> {
    pub address: &'a str,
    pub running: &'a Running,
}

/// The answer at once if it has something to do or `wait` is zero; otherwise the
/// first non-empty answer after an applied change, or the empty one when `wait`
/// has passed. Each read first checks that the worker is `known` (a worker
/// declared lost while its poll is held is refused at that read). `on_read` runs
/// after each read that found the worker (the handler feeds the worker's liveness
/// timer with it, so a held heartbeat keeps the worker alive).
pub(crate) async fn long_poll(
    core: &Core,
    worker: Asking<'_>,
    digests: &WorkerDigests,
    wait: Duration,
    known: impl Fn(&State) -> Result<bool, StateError>,
    on_read: impl Fn(),
) -> Result<Result<pb::WorkerHeartbeatResponse, Refused>, ProposeError> {
    let ready = |a: &Result<pb::WorkerHeartbeatResponse, Refused>| match a {
        Err(_) => true,
        Ok(a) => {
            on_read();
            !a.new_tasks.is_empty() || !a.tasks_to_delete.is_empty() || a.current_tasks_wanted
        }
    };
    let decided = OnceLock::new();
    let address = worker.address;
    let read = |s: &State, generation| match known(s) {
        Ok(true) => Ok({
            let active = digests.digest(s, generation, address);
            match worker.running {
                Running::Listed(current) => answer(s, address, current, active),
                Running::Digest(digest) => answer_digest(s, address, *digest, active, &decided),
            }
        }),
        Ok(false) => Err(None),
        Err(e) => Err(Some(e)),
    };
    let mut resp = wait_for_change(core, wait, read, ready).await?;
    // Set unless the worker asked for no wait (or must send its list): an empty
    // answer that was held needs no pacing by the worker (`worker/src/heartbeat.rs`).
    if let Ok(resp) = &mut resp {
        resp.long_polled = !wait.is_zero() && !resp.current_tasks_wanted;
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::limits::Limits;
    use crate::state::{Mode, TargetWorkers};

    const W: &str = "w:1";

    /// One worker; each call adds a DYNAMIC job with an iteration (a task on it).
    fn add_job(s: &mut State, name: &str) {
        let limits = Limits::default();
        if s.workers.is_empty() {
            let def = sluice_dataset::DatasetDef::range(1000);
            let d = Command::RegisterDataset { dataset_id: Some("d".into()), def, limits };
            crate::apply(s, d).unwrap();
            let w = Command::RegisterWorker {
                address: W.into(),
                worker_uid: 1,
                functions: vec![],
                python_version: None,
                limits,
            };
            crate::apply(s, w).unwrap();
        }
        let job = Command::GetOrCreateJob {
            dataset_id: "d".into(),
            mode: Mode::Dynamic,
            job_name: Some(name.into()),
            target_workers: TargetWorkers::Auto,
            static_workers: vec![],
            cross_trainer_cache: false,
            num_consumers: None,
            limits,
        };
        crate::apply(s, job).unwrap();
        let job_id = *s.jobs_by_name.get(name).unwrap();
        let it =
            Command::GetOrCreateIteration { job_id, repetition: 0, elements_per_split: 1, limits };
        crate::apply(s, it).unwrap();
    }

    fn ids(r: &pb::WorkerHeartbeatResponse) -> Vec<u64> {
        r.new_tasks.iter().map(|t| t.task_id).collect()
    }

    #[test]
    fn a_heartbeat_with_the_active_digest_alone_is_answered_without_resending_tasks() {
        let mut s = State::default();
        add_job(&mut s, "a");
        let digests = WorkerDigests::default();
        let active: Vec<u64> = s.workers[W].active_tasks.iter().copied().collect();
        assert_eq!(active.len(), 1);

        // The listed heartbeat of a worker that runs nothing yet gets the task and
        // the digest of what it should run.
        let first = answer(&s, W, &BTreeSet::new(), digests.digest(&s, 1, W));
        assert_eq!(ids(&first), active);
        assert_eq!(first.active_tasks_digest, task_set_digest(active.iter().copied()));

        // Running it, the worker sends that digest alone: nothing to start or stop.
        let decided = OnceLock::new();
        let worker_digest = first.active_tasks_digest;
        let same = answer_digest(&s, W, worker_digest, digests.digest(&s, 1, W), &decided);
        assert!(same.new_tasks.is_empty() && same.tasks_to_delete.is_empty(), "{same:?}");
        assert!(!same.current_tasks_wanted);
        assert_eq!(same.active_tasks_digest, worker_digest);

        // A task assigned while that heartbeat is held (a new views generation):
        // a later read of the same heartbeat answers it, against the set the
        // digest named.
        add_job(&mut s, "b");
        let now = digests.digest(&s, 2, W);
        assert_ne!(now, worker_digest, "the cached digest follows the generation");
        let later = answer_digest(&s, W, worker_digest, now, &decided);
        let added: Vec<u64> =
            s.workers[W].active_tasks.iter().copied().filter(|t| !active.contains(t)).collect();
        assert_eq!(ids(&later), added);
        assert!(later.tasks_to_delete.is_empty() && !later.current_tasks_wanted);
        assert_eq!(later.active_tasks_digest, now);
    }

    #[test]
    fn a_held_digest_keeps_the_set_it_was_decided_against_while_apply_changes_the_workers() {
        let mut s = State::default();
        add_job(&mut s, "a");
        add_job(&mut s, "b");
        let digests = WorkerDigests::default();
        let before: BTreeSet<u64> = (*s.workers[W].active_tasks).clone();
        let worker_digest = digests.digest(&s, 1, W);
        let decided = OnceLock::new();
        let held = answer_digest(&s, W, worker_digest, worker_digest, &decided);
        assert!(held.new_tasks.is_empty() && held.tasks_to_delete.is_empty(), "{held:?}");
        let shared = Arc::clone(decided.get().unwrap().as_ref().unwrap());
        assert!(Arc::ptr_eq(&shared, &s.workers[W].active_tasks), "shared, not copied");

        // While held: one task ends, another starts. The held set stays what the
        // worker runs, so the answer is the same diff as its list would get.
        let done = *before.iter().next().unwrap();
        let finish =
            Command::FinishTasks { worker_address: W.into(), worker_uid: 1, task_ids: vec![done] };
        crate::apply(&mut s, finish).unwrap();
        add_job(&mut s, "c");
        assert_eq!(*shared, before, "apply copied the set before changing it");
        let now = digests.digest(&s, 2, W);
        let by_digest = answer_digest(&s, W, worker_digest, now, &decided);
        let by_list = answer(&s, W, &before, now);
        assert_eq!(by_digest, by_list);
        assert_eq!(by_digest.tasks_to_delete, vec![done]);
        assert_eq!(by_digest.new_tasks.len(), 1);
    }

    #[test]
    fn a_digest_that_is_not_the_active_one_asks_for_the_list_which_gets_the_full_diff() {
        let mut s = State::default();
        add_job(&mut s, "a");
        let active = WorkerDigests::default().digest(&s, 1, W);
        // The worker runs a stale task 999 only (digest of {999}).
        let stale = task_set_digest([999]);
        let wanted = answer_digest(&s, W, stale, active, &OnceLock::new());
        assert!(wanted.current_tasks_wanted, "{wanted:?}");
        assert!(wanted.new_tasks.is_empty() && wanted.tasks_to_delete.is_empty());

        // Its list then gets everything to start and to stop.
        let mut req = pb::WorkerHeartbeatRequest {
            current_tasks: vec![999],
            current_tasks_digest: stale,
            ..Default::default()
        };
        let Running::Listed(current) = Running::of(&mut req) else { panic!("a listed heartbeat") };
        let full = answer(&s, W, &current, active);
        assert_eq!(ids(&full), s.workers[W].active_tasks.iter().copied().collect::<Vec<_>>());
        assert_eq!(full.tasks_to_delete, vec![999]);
        assert!(!full.current_tasks_wanted);
    }

    #[test]
    fn only_an_omitted_list_is_read_as_a_digest() {
        // An older worker: no digest, its list (possibly empty) is what it runs.
        let mut old = pb::WorkerHeartbeatRequest { current_tasks: vec![], ..Default::default() };
        assert!(matches!(Running::of(&mut old), Running::Listed(l) if l.is_empty()));
        let mut new = pb::WorkerHeartbeatRequest {
            current_tasks_digest: 7,
            current_tasks_omitted: true,
            ..Default::default()
        };
        assert!(matches!(Running::of(&mut new), Running::Digest(7)));
    }
}
