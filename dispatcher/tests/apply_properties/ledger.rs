//! What the properties remember across a sequence: every split range granted,
//! for (c), and every id seen with what it named, for (d).

use std::collections::BTreeMap;

use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{Command, Response, State};

/// Returns `Err(message)` from the enclosing function unless `cond` holds.
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}
pub(crate) use check;

/// A GetSplit request's idempotency key: (task, worker uid, sequence).
type SplitKey = (u64, u64, u64);

/// A split range as granted: (iteration, provider, epoch) and `[begin, end)`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Grant {
    source: (u64, u32, u64),
    begin: u64,
    end: u64,
}

#[derive(Default)]
pub struct Ledger {
    /// The last range each key was granted: a retry of the key gets it again.
    by_key: BTreeMap<SplitKey, Grant>,
    /// Every range granted from one source, with the key it went to.
    by_source: BTreeMap<(u64, u32, u64), Vec<(Grant, SplitKey)>>,
    /// (kind, id) → what the id named when first seen.
    seen: BTreeMap<(&'static str, String), String>,
}

impl Ledger {
    /// Checks an applied (not refused) command: (c) on its grant, (d) on its
    /// answer and on every id of the state after it.
    pub fn record(
        &mut self,
        pre: &State,
        cmd: &Command,
        answer: &Response,
        post: &State,
    ) -> Result<(), String> {
        only_the_registered_incarnation(pre, cmd)?;
        within_caps(cmd, pre, post)?;
        self.grant(pre, cmd, answer)?;
        answered_ids_are_fresh(pre, cmd, answer)?;
        self.ids(pre, forgotten(pre, cmd, answer), post)
    }

    /// (c) No element of an epoch of an iteration's source is granted twice; a
    /// retried key getting its own range again is not a second grant.
    fn grant(&mut self, pre: &State, cmd: &Command, answer: &Response) -> Result<(), String> {
        let Command::GetSplit { task_id, worker_uid, sequence, provider, repetition, .. } = cmd
        else {
            return Ok(());
        };
        let (begin, end) = match answer {
            Response::Split(SplitAnswer::Split { begin, end })
            | Response::SplitSkipping { answer: SplitAnswer::Split { begin, end }, .. } => {
                (*begin, *end)
            }
            _ => return Ok(()),
        };
        let Some(task) = pre.tasks.get(task_id) else {
            return Err(format!("(c) a split for unknown task {task_id}"));
        };
        check!(begin < end, "(c) an empty range {begin}..{end}");
        let key = (*task_id, *worker_uid, *sequence);
        let source = (task.iteration_id, *provider, *repetition);
        let grant = Grant { source, begin, end };
        if let Some(last) = self.by_key.get(&key) {
            if (last.source.0, last.begin, last.end) == (source.0, begin, end) {
                return Ok(()); // a retry: the same grant again
            }
        }
        let granted = self.by_source.entry(source).or_default();
        let exactly_once = pre.exactly_once.iterations.contains_key(&task.iteration_id);
        for (other, other_key) in granted.iter() {
            // Exactly-once: a lost task's units are handed out again.
            let orphaned = pre.tasks.get(&other_key.0).is_some_and(|t| t.lost);
            check!(
                end <= other.begin || other.end <= begin || (exactly_once && orphaned),
                "(c) iteration {} epoch {repetition}: {begin}..{end} granted to {key:?} overlaps \
                 {}..{} granted to {other_key:?}",
                source.0,
                other.begin,
                other.end
            );
        }
        granted.push((grant, key));
        self.by_key.insert(key, grant);
        Ok(())
    }

    /// (d) An id names one thing for ever: what it named never changes, nothing
    /// but a client or what a `ForgetIteration` forgot (`forgotten`) is ever
    /// removed, and a removed id never comes back.
    fn ids(
        &mut self,
        pre: &State,
        forgotten: BTreeMap<(&'static str, String), ()>,
        post: &State,
    ) -> Result<(), String> {
        let before = identities(pre);
        let after = identities(post);
        for ((kind, id), what) in &after {
            match self.seen.get(&(*kind, id.clone())) {
                None => {
                    self.seen.insert((*kind, id.clone()), what.clone());
                }
                Some(was) => {
                    check!(was == what, "(d) {kind} {id} named {was}, now {what}");
                    check!(
                        before.contains_key(&(*kind, id.clone())),
                        "(d) {kind} id {id} used again after it was removed"
                    );
                }
            }
        }
        for ((kind, id), _) in before {
            check!(
                kind == "client"
                    || after.contains_key(&(kind, id.clone()))
                    || forgotten.contains_key(&(kind, id.clone())),
                "(d) {kind} {id} was removed"
            );
        }
        for (id, t) in &pre.tasks {
            let Some(now) = post.tasks.get(id) else { continue };
            check!(!t.finished || now.finished, "(d) task {id} finished, then not");
            check!(!t.lost || now.lost, "(d) task {id} lost, then not");
        }
        for (id, it) in &pre.iterations {
            let Some(now) = post.iterations.get(id) else { continue };
            check!(!it.finished || now.finished, "(d) iteration {id} finished, then not");
            check!(
                !it.garbage_collected || now.garbage_collected,
                "(d) iteration {id} collected, then not"
            );
        }
        Ok(())
    }
}

/// (kind, id) → the fields that say what the id names (those fixed at creation).
fn identities(s: &State) -> BTreeMap<(&'static str, String), String> {
    let mut out = BTreeMap::new();
    for (id, d) in &s.datasets {
        out.insert(("dataset", id.clone()), format!("{:?}", d.def));
    }
    for (id, j) in &s.jobs {
        let what = (
            &j.name,
            j.anonymous,
            &j.dataset_id,
            j.mode,
            j.target_workers,
            &j.static_workers,
            j.cross_trainer_cache,
            j.num_consumers,
        );
        out.insert(("job", id.to_string()), format!("{what:?}"));
    }
    for (id, it) in &s.iterations {
        let what = (it.job_id, it.repetition, it.elements_per_split);
        out.insert(("iteration", id.to_string()), format!("{what:?}"));
    }
    for (id, t) in &s.tasks {
        let what = (t.iteration_id, &t.worker_address, t.worker_index);
        out.insert(("task", id.to_string()), format!("{what:?}"));
    }
    for (id, iteration) in &s.clients {
        out.insert(("client", id.to_string()), iteration.to_string());
    }
    out
}

/// (d) An answer that creates something names a new id; one that finds something
/// names the id it had.
fn answered_ids_are_fresh(pre: &State, cmd: &Command, answer: &Response) -> Result<(), String> {
    match (cmd, answer) {
        (
            Command::RegisterDataset { dataset_id, .. },
            Response::DatasetRegistered { dataset_id: id },
        ) => match dataset_id {
            Some(asked) => check!(asked == id, "(d) dataset `{asked}` registered as `{id}`"),
            None => check!(!pre.datasets.contains_key(id), "(d) dataset id `{id}` given twice"),
        },
        (Command::GetOrCreateJob { job_name, .. }, Response::Job { job_id, .. }) => {
            match job_name.as_ref().and_then(|n| pre.jobs_by_name.get(n)) {
                Some(existing) => {
                    check!(job_id == existing, "(d) job {existing} answered as {job_id}")
                }
                None => check!(!pre.jobs.contains_key(job_id), "(d) job id {job_id} given twice"),
            }
        }
        (
            Command::GetOrCreateIteration { job_id, repetition, .. },
            Response::Iteration { iteration_id, client_id },
        ) => {
            let live = pre.jobs[job_id]
                .iterations
                .get(repetition)
                .filter(|id| !pre.iterations[id].garbage_collected);
            match live {
                Some(existing) => {
                    check!(
                        iteration_id == existing,
                        "(d) iteration {existing} answered as {iteration_id}"
                    )
                }
                None => check!(
                    !pre.iterations.contains_key(iteration_id),
                    "(d) iteration id {iteration_id} given twice"
                ),
            }
            check!(!pre.clients.contains_key(client_id), "(d) client id {client_id} given twice");
        }
        _ => {}
    }
    Ok(())
}

/// (e) A split or a task report is answered only for the process its worker is
/// registered as: another incarnation's is refused (so never applied).
fn only_the_registered_incarnation(pre: &State, cmd: &Command) -> Result<(), String> {
    let (address, uid) = match cmd {
        Command::GetSplit { task_id, worker_uid, .. } => match pre.tasks.get(task_id) {
            Some(t) => (t.worker_address.as_str(), *worker_uid),
            None => return Err(format!("(e) a split applied for unknown task {task_id}")),
        },
        Command::FinishTasks { worker_address, worker_uid, .. } => {
            (worker_address.as_str(), *worker_uid)
        }
        _ => return Ok(()),
    };
    let registered = pre.workers.get(address).map(|w| w.worker_uid);
    check!(
        registered == Some(uid),
        "(e) {} from worker_uid {uid} applied; {address} is registered as {registered:?}",
        cmd.name()
    );
    Ok(())
}

/// (f) An applied command that carries caps took no count past them: a count
/// it raised is at most its cap (a count already over a cap, left by an earlier
/// command with higher caps, may stay; it may not grow).
fn within_caps(cmd: &Command, pre: &State, post: &State) -> Result<(), String> {
    let limits = match cmd {
        Command::RegisterDataset { limits, .. }
        | Command::GetOrCreateJob { limits, .. }
        | Command::GetOrCreateIteration { limits, .. }
        | Command::RegisterWorker { limits, .. } => limits,
        _ => return Ok(()),
    };
    let tasks = |s: &State| -> Vec<(String, usize)> {
        s.workers.values().map(|w| (w.address.clone(), w.active_tasks.len())).collect()
    };
    let pre_tasks: std::collections::BTreeMap<String, usize> = tasks(pre).into_iter().collect();
    let mut counts = vec![
        ("datasets", pre.datasets.len(), post.datasets.len(), limits.max_datasets),
        ("jobs", pre.jobs.len(), post.jobs.len(), limits.max_jobs),
        ("iterations", pre.iterations.len(), post.iterations.len(), limits.max_iterations),
        ("clients", pre.clients.len(), post.clients.len(), limits.max_clients),
    ];
    for (address, n) in tasks(post) {
        let before = pre_tasks.get(&address).copied().unwrap_or(0);
        counts.push(("tasks of a worker", before, n, limits.max_tasks_per_worker));
    }
    for (what, before, after, cap) in counts {
        check!(
            after <= before || after as u64 <= cap,
            "(f) {} raised {what} from {before} to {after}, over its cap {cap}",
            cmd.name()
        );
    }
    if let Command::GetOrCreateJob { num_consumers: Some(n), .. } = cmd {
        check!(
            *n <= limits.max_num_consumers,
            "(f) a job with num_consumers={n} over the cap {} was applied",
            limits.max_num_consumers
        );
    }
    Ok(())
}

/// What an applied `ForgetIteration` may remove: the iteration when it had
/// stopped handing out work with no consumer, its tasks, and its job when the
/// answer says the job went too.
fn forgotten(
    pre: &State,
    cmd: &Command,
    answer: &Response,
) -> BTreeMap<(&'static str, String), ()> {
    let mut out = BTreeMap::new();
    let (
        Command::ForgetIteration { iteration_id },
        Response::IterationForgotten { job_forgotten, .. },
    ) = (cmd, answer)
    else {
        return out;
    };
    let Some(it) = pre.iterations.get(iteration_id) else { return out };
    if it.is_live() || !it.clients.is_empty() {
        return out;
    }
    out.insert(("iteration", iteration_id.to_string()), ());
    for t in pre.tasks.values().filter(|t| t.iteration_id == *iteration_id) {
        out.insert(("task", t.id.to_string()), ());
    }
    if *job_forgotten {
        out.insert(("job", it.job_id.to_string()), ());
    }
    out
}
