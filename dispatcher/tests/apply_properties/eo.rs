//! Exactly-once commands for the random sequences: jobs asked with
//! `require_exactly_once` (replayable with either rule, or not), consumed
//! reports aimed at exactly-once consumers (acknowledging their lost tasks or
//! not), restores aimed at exactly-once jobs (matching or not), and split
//! requests that exhaust an exactly-once iteration's cursor.

use rand::seq::SliceRandom;
use rand::Rng;
use sluice_dispatcher::command::RestorePoint;
use sluice_dispatcher::{Command, Limits, Mode, State, TargetWorkers};
use sluice_positions::{RecordSet, Run, UnitRecords};

use crate::gen::Gen;

pub fn command(g: &mut Gen, state: &State) -> Command {
    match g.below(5) {
        0 => job(g, state),
        1 => report(g, state),
        2 => restore(g, state),
        _ => split(g, state).unwrap_or_else(|| job(g, state)),
    }
}

/// A split request of an exactly-once task from its worker's process, with the
/// next sequence, for the iteration's one epoch and as many splits as allowed:
/// exhausts the cursor, so that `Wait` is reached.
fn split(g: &mut Gen, state: &State) -> Option<Command> {
    let tasks: Vec<&sluice_dispatcher::state::Task> = state
        .tasks
        .values()
        .filter(|t| !t.finished && state.exactly_once.iterations.contains_key(&t.iteration_id))
        .collect();
    let task = tasks.choose(&mut g.rng)?;
    let worker_uid = state.workers.get(&task.worker_address)?.worker_uid;
    let sequence =
        task.last_split.filter(|l| l.worker_uid == worker_uid).map_or(0, |l| l.sequence + 1);
    Some(Command::GetSplit {
        task_id: task.id,
        worker_uid,
        sequence,
        provider: 0,
        repetition: 0,
        max_splits: 1024,
    })
}

fn job(g: &mut Gen, state: &State) -> Command {
    let datasets: Vec<&String> = state.datasets.keys().collect();
    let dataset_id = datasets.choose(&mut g.rng).map_or("never".to_string(), |d| d.to_string());
    let replay = match g.below(5) {
        0 | 1 => Ok(UnitRecords::One),
        2 | 3 => Ok(UnitRecords::Counted),
        _ => Err("stages[1].repeat cannot be replayed".into()),
    };
    Command::GetOrCreateExactlyOnceJob {
        dataset_id,
        mode: if g.chance(0.85) { Mode::Dynamic } else { Mode::Off },
        job_name: [None, Some("e1"), Some("e1"), Some("j1")][g.below(4)].map(String::from),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: g.chance(0.05),
        num_consumers: None,
        replay,
        limits: Limits::default(),
    }
}

fn runs(g: &mut Gen) -> Vec<Run> {
    (0..g.below(4))
        .map(|_| Run {
            unit: g.rng.gen_range(0..9),
            first: g.rng.gen_range(0..3),
            count: g.rng.gen_range(1..3),
        })
        .collect()
}

fn report(g: &mut Gen, state: &State) -> Command {
    let clients: Vec<(u64, u64)> = state
        .clients
        .iter()
        .filter(|(_, it)| state.exactly_once.iterations.contains_key(it))
        .map(|(c, it)| (*c, *it))
        .collect();
    let (client_id, iteration_id) = match clients.choose(&mut g.rng) {
        Some(c) if g.chance(0.9) => *c,
        _ => (g.rng.gen_range(3000..=state.next_client_id), 0),
    };
    let lost: Vec<u64> = state
        .iterations
        .get(&iteration_id)
        .map(|it| it.lost_tasks.iter().copied().filter(|_| g.chance(0.7)).collect())
        .unwrap_or_default();
    let unit_ends =
        (0..g.below(3)).map(|_| (g.rng.gen_range(0..9), g.rng.gen_range(0..4))).collect();
    let generation = g.rng.gen_range(0..3);
    if g.chance(0.5) {
        let firsts =
            (0..g.below(3)).map(|_| (g.rng.gen_range(0..9), g.rng.gen_range(0..4))).collect();
        return Command::ReportConsumedSpans {
            client_id,
            generation,
            runs: runs(g),
            firsts,
            unit_ends,
            lost_tasks_done: lost,
        };
    }
    Command::ReportConsumed {
        client_id,
        generation,
        runs: runs(g),
        unit_ends,
        lost_tasks_done: lost,
    }
}

fn restore(g: &mut Gen, state: &State) -> Command {
    let jobs: Vec<u64> = state.exactly_once.jobs.keys().copied().collect();
    let job_id = match jobs.choose(&mut g.rng) {
        Some(j) if g.chance(0.9) => *j,
        _ => g.rng.gen_range(5000..=state.next_job_id),
    };
    let job = state.jobs.get(&job_id);
    let job_name = match job {
        Some(j) if g.chance(0.9) => j.name.clone(),
        _ => "x".into(),
    };
    let dataset_id = match job {
        Some(j) if g.chance(0.9) => j.dataset_id.clone(),
        _ => "never".into(),
    };
    let repetition = g.rng.gen_range(0..2);
    let consumed = RecordSet::from_parts(g.rng.gen_range(0..5), runs(g), []);
    Command::RestoreIteration {
        job_id,
        repetition,
        elements_per_split: g.rng.gen_range(1..3),
        position: RestorePoint {
            job_name,
            dataset_id,
            repetition: if g.chance(0.9) { repetition } else { repetition + 1 },
            generation: g.rng.gen_range(0..3),
            consumed,
            key: g.rng.gen_range(1..4),
        },
        limits: Limits::default(),
    }
}
