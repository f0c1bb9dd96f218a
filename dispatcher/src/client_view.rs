//! What a consumer sees of its iteration (`ClientHeartbeat`), and the long poll
//! that tells it the moment that changes.
//!
//! The wait itself (leader read first, then a local re-read at each views change,
//! until the deadline) is `long_poll.rs`'s, shared with the worker's heartbeat.
//! Nothing here is replicated: the digest is computed from the state on demand,
//! and cached per iteration and views generation ([`ViewDigests`], soft state:
//! a new leader starts empty), so the consumers of an iteration whose view did
//! not change cost a lookup each, not a pass over its tasks (one per worker).
//! A consumer that asks for it (`omit_unchanged_tasks`) gets an unchanged view
//! without its task list: the answer most heartbeats get no longer grows with
//! the number of workers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sluice_proto::v1 as pb;

use crate::core::Core;
use crate::error::ProposeError;
use crate::long_poll::wait_for_change;
use crate::state::{ClientId, Iteration, IterationId, State};

/// The most iterations whose digest is cached; past it the cache starts over.
const MAX_CACHED: usize = 65_536;

/// Soft state: each iteration's view digest at a views generation (`Core::views`:
/// it moves with every change a view can show), shared by its consumers.
#[derive(Default)]
pub(crate) struct ViewDigests {
    // A std Mutex: held for one map operation, never across an await or a digest.
    cache: Mutex<HashMap<IterationId, (u64, u64)>>,
}

impl ViewDigests {
    /// The digest of `it`'s view in `s`, read at views generation `generation`.
    fn digest(&self, s: &State, generation: u64, it: &Iteration) -> u64 {
        let cache = || self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((g, d)) = cache().get(&it.id) {
            if *g == generation {
                return *d;
            }
        }
        let d = digest_of(s, it);
        let mut c = cache();
        if c.len() >= MAX_CACHED {
            c.clear();
        }
        c.insert(it.id, (generation, d));
        d
    }
}

/// What a consumer asked: its id, the view it has, whether it keeps its task
/// list when that view is unchanged.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    pub client_id: ClientId,
    pub known_view: u64,
    pub omit_unchanged_tasks: bool,
}

/// The client's view of its iteration, with its digest (the task list left out
/// when `ask` allows it and the view is the one it knows); `None` if the client
/// is not known (released, or forgotten by an in-memory restart).
pub(crate) fn view(
    s: &State,
    generation: u64,
    ask: Ask,
    digests: &ViewDigests,
) -> Option<pb::ClientHeartbeatResponse> {
    let client_id = ask.client_id;
    let it = s.client_iteration(client_id)?;
    let view_digest = digests.digest(s, generation, it);
    let omitted = ask.omit_unchanged_tasks && ask.known_view == view_digest;
    let tasks = if omitted { vec![] } else { crate::convert::task_infos(s, it) };
    let mut resp = pb::ClientHeartbeatResponse {
        iteration_id: it.id,
        tasks,
        iteration_finished: it.finished,
        view_digest,
        tasks_omitted: omitted,
        ..Default::default()
    };
    // Exactly-once: the checkpoint watermark for this consumer's generation.
    // Not in the digest: a new watermark alone does not end a long poll.
    if let Some(p) = s.exactly_once.iterations.get(&it.id) {
        let generation = p.client_generations.get(&client_id).copied().unwrap_or(0);
        let (watermark, generation) = p.checkpoint(generation);
        resp.checkpoint_watermark = watermark;
        resp.checkpoint_generation = generation;
        resp.delivery = sluice_proto::v1::Delivery::ExactlyOnce as i32;
    }
    Some(resp)
}

/// The digest of the view of `it`, without rendering it (`digest_parts`).
fn digest_of(s: &State, it: &Iteration) -> u64 {
    let removed = |id| it.coordinated.as_ref().is_some_and(|rr| rr.removed.contains_key(&id));
    let tasks: Vec<_> = it.tasks.iter().filter_map(|t| s.tasks.get(t)).collect();
    let parts = tasks.iter().map(|t| TaskPart {
        id: t.id,
        address: t.worker_address.as_str(),
        finished: t.finished,
        lost: s.lost_task_held_elements(t),
        removed: removed(t.id),
    });
    digest_parts(it.id, parts, it.finished)
}

/// What a reader acts on of one task: its digest covers every field of
/// `pb::TaskInfo` that can change (`starting_round` is set once, at creation). A
/// reader that asked for `omit_unchanged_tasks` keeps its list while the digest
/// stands, so a change the digest missed would never reach it: a task marked
/// lost after it finished (`orphan_finished_tasks`) changes only `lost`.
struct TaskPart<'a> {
    id: u64,
    address: &'a str,
    finished: bool,
    lost: bool,
    removed: bool,
}

/// FNV-1a over what the reader acts on: stable across processes, so a digest from
/// one dispatcher means the same to the next leader of the same version (across a
/// version that changes it, a reader's first answer from the new leader counts as
/// a change: one full answer). Never 0 (0 is "no view yet"). A collision only
/// delays an answer to the wait's deadline.
fn digest_parts<'a>(
    iteration_id: u64,
    tasks: impl ExactSizeIterator<Item = TaskPart<'a>>,
    iteration_finished: bool,
) -> u64 {
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    h.write(&iteration_id.to_le_bytes());
    h.write(&(tasks.len() as u64).to_le_bytes());
    for t in tasks {
        h.write(&t.id.to_le_bytes());
        h.write(&(t.address.len() as u64).to_le_bytes());
        h.write(t.address.as_bytes());
        h.write(&[t.finished as u8 | (t.lost as u8) << 1 | (t.removed as u8) << 2]);
    }
    h.write(&[iteration_finished as u8]);
    h.finish().max(1)
}

/// Answers with the client's view once it differs from `known_view` (at once if
/// it already does, or if `known_view` is 0), or when `wait` has passed (the
/// handler caps it with `DispatcherConfig::max_client_wait`); `None` at once if
/// the client is not known. `on_read` runs after each read that found the client
/// (the handler feeds the liveness timer with it).
pub(crate) async fn long_poll(
    core: &Core,
    ask: Ask,
    digests: &ViewDigests,
    wait: Duration,
    on_read: impl Fn(),
) -> Result<Option<pb::ClientHeartbeatResponse>, ProposeError> {
    let known_view = ask.known_view;
    let ready = |current: &Option<pb::ClientHeartbeatResponse>| match current {
        None => true,
        Some(resp) => {
            on_read();
            known_view == 0 || resp.view_digest != known_view
        }
    };
    wait_for_change(core, wait, |s, generation| view(s, generation, ask, digests), ready).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::limits::Limits;
    use crate::state::{Mode, TargetWorkers};

    /// The digest of a rendered answer (what the reader acts on).
    fn digest(resp: &pb::ClientHeartbeatResponse) -> u64 {
        let tasks = resp.tasks.iter().map(|t| TaskPart {
            id: t.task_id,
            address: t.worker_address.as_str(),
            finished: t.finished,
            lost: t.lost,
            removed: t.coordinated_removed,
        });
        digest_parts(resp.iteration_id, tasks, resp.iteration_finished)
    }

    /// Two workers, a DYNAMIC job, its iteration with one client.
    fn iteration_with_a_client() -> (State, ClientId) {
        let mut s = State::default();
        let limits = Limits::default();
        let def = sluice_dataset::DatasetDef::range(1000);
        crate::apply(
            &mut s,
            Command::RegisterDataset { dataset_id: Some("d".into()), def, limits },
        )
        .unwrap();
        for (i, address) in ["w:1", "w:2"].into_iter().enumerate() {
            let w = Command::RegisterWorker {
                address: address.into(),
                worker_uid: i as u64,
                functions: vec![],
                python_version: None,
                limits,
            };
            crate::apply(&mut s, w).unwrap();
        }
        let job = Command::GetOrCreateJob {
            dataset_id: "d".into(),
            mode: Mode::Dynamic,
            job_name: Some("j".into()),
            target_workers: TargetWorkers::Auto,
            static_workers: vec![],
            cross_trainer_cache: false,
            num_consumers: None,
            limits,
        };
        crate::apply(&mut s, job).unwrap();
        let job_id = *s.jobs_by_name.get("j").unwrap();
        let it =
            Command::GetOrCreateIteration { job_id, repetition: 0, elements_per_split: 1, limits };
        crate::apply(&mut s, it).unwrap();
        let client_id = *s.clients.keys().next().unwrap();
        (s, client_id)
    }

    #[test]
    fn an_unchanged_view_omits_its_task_list_only_when_asked() {
        let (s, client_id) = iteration_with_a_client();
        let digests = ViewDigests::default();
        let ask = Ask { client_id, known_view: 0, omit_unchanged_tasks: true };
        let first = view(&s, 1, ask, &digests).unwrap();
        assert_eq!(first.tasks.len(), 2);
        assert!(!first.tasks_omitted);
        assert_eq!(first.view_digest, digest(&first), "the cached digest is the view's");

        let known = Ask { known_view: first.view_digest, ..ask };
        let same = view(&s, 1, known, &digests).unwrap();
        assert!(same.tasks_omitted && same.tasks.is_empty());
        assert_eq!((same.view_digest, same.iteration_id), (first.view_digest, first.iteration_id));

        let old_client = Ask { omit_unchanged_tasks: false, ..known };
        let full = view(&s, 1, old_client, &digests).unwrap();
        assert!(!full.tasks_omitted);
        assert_eq!(full.tasks, first.tasks);
    }

    #[test]
    fn a_new_views_generation_recomputes_the_digest() {
        let (mut s, client_id) = iteration_with_a_client();
        let digests = ViewDigests::default();
        let ask = Ask { client_id, known_view: 0, omit_unchanged_tasks: true };
        let before = view(&s, 1, ask, &digests).unwrap();
        let task = before.tasks[0].task_id;
        let address = before.tasks[0].worker_address.clone();
        let worker_uid = s.workers[&address].worker_uid;
        let finish =
            Command::FinishTasks { worker_address: address, worker_uid, task_ids: vec![task] };
        crate::apply(&mut s, finish).unwrap();
        let known = Ask { known_view: before.view_digest, ..ask };
        // Same generation: the cached digest stands (the state machine moves the
        // generation with every such change, so this never happens in service).
        assert!(view(&s, 1, known, &digests).unwrap().tasks_omitted);
        let after = view(&s, 2, known, &digests).unwrap();
        assert!(!after.tasks_omitted);
        assert_ne!(after.view_digest, before.view_digest);
        assert!(after.tasks.iter().any(|t| t.task_id == task && t.finished));
    }

    #[test]
    fn a_task_marked_lost_after_it_finished_changes_the_view() {
        // A finished task of a live exactly-once iteration whose worker is lost
        // becomes lost without finishing again: only `lost` changes, and a reader
        // that keeps its list while the digest stands must still learn it.
        let (mut s, client_id) = iteration_with_a_client();
        let digests = ViewDigests::default();
        let ask = Ask { client_id, known_view: 0, omit_unchanged_tasks: true };
        let task = view(&s, 1, ask, &digests).unwrap().tasks[0].task_id;
        // It was granted a split, so its loss may cost its readers elements
        // (`State::lost_task_held_elements`).
        let t = s.tasks.get_mut(&task).unwrap();
        let worker_uid = 0;
        let answer = crate::state::SplitAnswer::Split { begin: 0, end: 10 };
        t.last_split = Some(crate::state::SplitRecord { worker_uid, sequence: 1, answer });
        t.finished = true;
        let before = view(&s, 2, ask, &digests).unwrap();
        s.tasks.get_mut(&task).unwrap().lost = true;
        let known = Ask { known_view: before.view_digest, ..ask };
        let after = view(&s, 3, known, &digests).unwrap();
        assert_ne!(after.view_digest, before.view_digest, "lost is part of the view");
        assert!(!after.tasks_omitted);
        assert!(after.tasks.iter().any(|t| t.task_id == task && t.lost && t.finished));
        assert_eq!(after.view_digest, digest(&after), "the cached digest is the view's");
    }

    #[test]
    fn grants_do_not_change_a_view_and_other_commands_may() {
        let get_split = || Command::GetSplit {
            task_id: 1,
            worker_uid: 1,
            sequence: 0,
            provider: 0,
            repetition: 0,
            max_splits: 1,
        };
        assert!(!get_split().may_change_views());
        assert!(!Command::Batch(vec![get_split(), get_split()]).may_change_views());
        let release = Command::ReleaseClient { client_id: 1 };
        assert!(release.may_change_views());
        assert!(Command::Batch(vec![get_split(), release]).may_change_views());
    }

    fn resp(finished: bool, iteration_finished: bool) -> pb::ClientHeartbeatResponse {
        pb::ClientHeartbeatResponse {
            iteration_id: 7,
            tasks: vec![pb::TaskInfo {
                task_id: 3,
                worker_address: "127.0.0.1:1".into(),
                finished,
                ..Default::default()
            }],
            iteration_finished,
            ..Default::default()
        }
    }

    #[test]
    fn the_digest_changes_with_every_field_the_reader_acts_on() {
        let base = digest(&resp(false, false));
        assert_eq!(base, digest(&resp(false, false)), "deterministic");
        assert_ne!(base, 0);
        assert_ne!(base, digest(&resp(true, false)), "a task finished");
        assert_ne!(digest(&resp(true, false)), digest(&resp(true, true)), "iteration finished");
        let mut moved = resp(false, false);
        moved.tasks[0].worker_address = "127.0.0.1:2".into();
        assert_ne!(base, digest(&moved), "a task on another worker");
        let mut more = resp(false, false);
        more.tasks.push(pb::TaskInfo { task_id: 4, ..Default::default() });
        assert_ne!(base, digest(&more), "a new task");
    }

    #[test]
    fn the_digest_ignores_what_the_reader_does_not_act_on() {
        let mut r = resp(false, false);
        let base = digest(&r);
        r.coordinated_pause = true;
        r.view_digest = 42;
        assert_eq!(base, digest(&r));
    }
}
