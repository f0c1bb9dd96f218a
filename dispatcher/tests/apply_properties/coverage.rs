//! What the sequences reached: every command kind applied and refused, and the
//! cases the properties are about (grants and their retries, lost workers,
//! restarts, collection, coordinated promotion and removal). Asserted after a
//! full run, so a property cannot pass because nothing exercised it.

use std::collections::BTreeMap;

use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{Command, Response, State, StateError};

#[derive(Default)]
pub struct Coverage {
    applied: BTreeMap<&'static str, u64>,
    refused: BTreeMap<&'static str, u64>,
    events: BTreeMap<&'static str, u64>,
}

/// Kinds that are never refused: a leader's WorkerLost is a no-op at worst, and
/// a batch answers for each of its commands.
const NEVER_REFUSED: [&str; 3] = ["WorkerLost", "Batch", "ForgetIteration"];

const KINDS: [&str; 16] = [
    "RegisterDataset",
    "GetOrCreateJob",
    "GetOrCreateIteration",
    "ReleaseClient",
    "RegisterWorker",
    "FinishTasks",
    "GetSplit",
    "Batch",
    "WorkerLost",
    "GcIteration",
    "CoordinatedPromoteTasks",
    "CoordinatedRemoveTask",
    "ForgetIteration",
    "GetOrCreateExactlyOnceJob",
    "ReportConsumed",
    "RestoreIteration",
];

const EVENTS: [&str; 19] = [
    "split granted",
    "split retried",
    "end of splits",
    "coordinated job",
    "static job",
    "iteration finished",
    "worker lost",
    "restart loses its ranges",
    "iteration collected",
    "tasks promoted",
    "task voted out",
    "another incarnation refused",
    "refused at a cap",
    "iteration forgotten",
    "job forgotten",
    "exactly-once job",
    "split wait",
    "grant with skip runs",
    "orphans made",
];

impl Coverage {
    pub fn count(&mut self, pre: &State, cmd: &Command, answer: &Result<Response, StateError>) {
        let r = match answer {
            Ok(r) => r,
            Err(e) => {
                *self.refused.entry(cmd.name()).or_default() += 1;
                if let Some(event) = refusal_event(e) {
                    *self.events.entry(event).or_default() += 1;
                }
                return;
            }
        };
        *self.applied.entry(cmd.name()).or_default() += 1;
        let event = match (cmd, r) {
            (Command::GetSplit { task_id, worker_uid, sequence, .. }, Response::Split(a)) => {
                let last = pre.tasks[task_id].last_split;
                if last.is_some_and(|l| (l.worker_uid, l.sequence) == (*worker_uid, *sequence)) {
                    Some("split retried")
                } else if *a == SplitAnswer::EndOfSplits {
                    Some("end of splits")
                } else if *a == SplitAnswer::Wait {
                    Some("split wait")
                } else {
                    Some("split granted")
                }
            }
            (_, Response::SplitSkipping { .. }) => Some("grant with skip runs"),
            (_, Response::Job { exactly_once: true, .. }) => Some("exactly-once job"),
            (_, Response::WorkerLost { changed: true })
                if pre.exactly_once.iterations.values().any(|p| !p.granted.is_empty()) =>
            {
                Some("orphans made")
            }
            (Command::GetOrCreateJob { num_consumers: Some(_), .. }, _) => Some("coordinated job"),
            (Command::GetOrCreateJob { mode, .. }, _) if mode.static_policy().is_some() => {
                Some("static job")
            }
            (_, Response::TasksFinished { finished_iterations })
                if !finished_iterations.is_empty() =>
            {
                Some("iteration finished")
            }
            (_, Response::WorkerLost { changed: true }) => Some("worker lost"),
            (Command::RegisterWorker { address, worker_uid, .. }, _) => pre
                .workers
                .get(address)
                .filter(|w| w.worker_uid != *worker_uid && !w.lost)
                .filter(|w| w.active_tasks.iter().any(|t| pre.tasks[t].last_split.is_some()))
                .map(|_| "restart loses its ranges"),
            (_, Response::IterationCollected { changed: true }) => Some("iteration collected"),
            (_, Response::CoordinatedPromoted { task_ids }) if !task_ids.is_empty() => {
                Some("tasks promoted")
            }
            (_, Response::CoordinatedRemoved) => Some("task voted out"),
            (_, Response::IterationForgotten { job_forgotten: true, .. }) => Some("job forgotten"),
            (_, Response::IterationForgotten { changed: true, .. }) => Some("iteration forgotten"),
            _ => None,
        };
        if let Some(e) = event {
            *self.events.entry(e).or_default() += 1;
        }
    }

    pub fn batch(&mut self) {
        *self.applied.entry("Batch").or_default() += 1;
    }

    /// Fails naming what no sequence reached; the counts go to stderr either way
    /// (seen with `--nocapture`), for whoever tunes the generator.
    pub fn assert_reached(&self) {
        eprintln!(
            "applied {:?}\nrefused {:?}\nevents {:?}",
            self.applied, self.refused, self.events
        );
        let missing: Vec<String> = KINDS
            .iter()
            .filter(|k| !self.applied.contains_key(*k))
            .map(|k| format!("{k} applied"))
            .chain(
                KINDS
                    .iter()
                    .filter(|k| !NEVER_REFUSED.contains(k) && !self.refused.contains_key(*k))
                    .map(|k| format!("{k} refused")),
            )
            .chain(EVENTS.iter().filter(|e| !self.events.contains_key(*e)).map(|e| e.to_string()))
            .collect();
        assert!(
            missing.is_empty(),
            "the sequences never reached: {missing:?} (applied {:?}, refused {:?}, events {:?})",
            self.applied,
            self.refused,
            self.events
        );
    }
}

/// The refusals worth reaching, by what they say.
fn refusal_event(e: &StateError) -> Option<&'static str> {
    match e {
        StateError::FailedPrecondition(m) if m.contains("carries worker_uid") => {
            Some("another incarnation refused")
        }
        StateError::ResourceExhausted(_) => Some("refused at a cap"),
        _ => None,
    }
}
