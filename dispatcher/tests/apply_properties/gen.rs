//! Random commands from a small alphabet of ids, so that a sequence keeps hitting
//! both what exists and what does not: a few worker addresses (and an empty one),
//! dataset ids the counter hands out and ids nobody registered, job and iteration
//! ids from just below to just past the counters, uids that are and are not the
//! worker's, split sequences that follow, repeat or skip the last one.
//!
//! The generator looks at the state (read-only) to aim its ids; it is
//! deterministic for a seed and a state, so a seed reproduces a whole sequence.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_dataset::{DatasetDef, ShardArg};
use sluice_dispatcher::state::{Iteration, Task};
use sluice_dispatcher::{Command, Limits, Mode, State, TargetWorkers};

/// Worker addresses; the empty one is refused.
const ADDRESSES: [&str; 4] = ["w1:1", "w2:1", "w3:1", ""];
/// The first automatic dataset ids, explicit ones and one never registered.
const DATASET_IDS: [&str; 6] = ["1000", "1001", "1002", "a", "b", "never"];
/// Anonymous, two shared names, and an empty one (refused).
const JOB_NAMES: [Option<&str>; 8] =
    [None, None, None, Some("j1"), Some("j1"), Some("j2"), Some("j2"), Some("")];
/// OFF and DYNAMIC twice as often as each static mode.
const MODES: [Mode; 8] = [
    Mode::Off,
    Mode::Off,
    Mode::Dynamic,
    Mode::Dynamic,
    Mode::File,
    Mode::Data,
    Mode::FileOrData,
    Mode::Hint,
];
const TARGETS: [TargetWorkers; 3] = [TargetWorkers::Auto, TargetWorkers::Any, TargetWorkers::Local];

/// Definitions that each mode accepts or refuses: finite, infinite (coordinated
/// reads and the cache need one), files (FILE), a SHARD_HINT placeholder (HINT
/// only) and a zip (not DYNAMIC).
fn def(i: usize) -> DatasetDef {
    match i {
        0 => DatasetDef::range(7),
        1 => DatasetDef::range(5).repeat_forever(),
        2 => DatasetDef::text_lines(vec!["/d/f0.txt", "/d/f1.txt", "/d/f2.txt"]),
        3 => DatasetDef::range(9).shard(ShardArg::Hint, ShardArg::Hint),
        _ => DatasetDef::range(4).zip(vec![DatasetDef::range(4)]),
    }
}

pub struct Gen {
    pub(crate) rng: ChaCha8Rng,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.rng.gen_range(0..n)
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        *from.choose(&mut self.rng).expect("a non-empty alphabet")
    }

    /// An id in `[first, next]`: every id handed out so far, and the next one
    /// (not yet known).
    fn id(&mut self, first: u64, next: u64) -> u64 {
        self.rng.gen_range(first..=next.max(first))
    }

    /// Mostly one of `preferred` (ids worth aiming at), else any id in
    /// `[first, next]`; `None` (build something instead) most of the times there
    /// is nothing to aim at.
    fn aimed(&mut self, preferred: &[u64], first: u64, next: u64) -> Option<u64> {
        match preferred.choose(&mut self.rng) {
            Some(id) if self.chance(0.8) => Some(*id),
            None if self.chance(0.75) => None,
            _ => Some(self.id(first, next)),
        }
    }

    /// One of the workers; now and then the empty address.
    fn address(&mut self) -> String {
        let workers = if self.chance(0.9) { &ADDRESSES[..3] } else { &ADDRESSES[..] };
        self.pick(workers).to_string()
    }

    /// Mostly the uid `address` is registered with; sometimes another one.
    fn uid(&mut self, state: &State, address: &str) -> u64 {
        match state.workers.get(address) {
            Some(w) if self.chance(0.8) => w.worker_uid,
            _ => self.rng.gen_range(1..=4),
        }
    }

    /// Mostly the default caps; now and then small ones that the sequence's
    /// counts reach, so commands keep being refused at a cap.
    fn limits(&mut self) -> Limits {
        if self.chance(0.7) {
            return Limits::default();
        }
        let mut small = || self.rng.gen_range(1..=6);
        Limits {
            max_datasets: small(),
            max_jobs: small(),
            max_iterations: small(),
            max_clients: small(),
            max_tasks_per_worker: small(),
            max_num_consumers: small() as u32,
        }
    }

    pub fn command(&mut self, state: &State) -> Command {
        match self.below(100) {
            0..=5 => Command::Batch((0..self.below(4)).map(|_| self.batched(state)).collect()),
            _ => self.single(state),
        }
    }

    /// A command of a batch: rarely a nested batch, which is refused.
    fn batched(&mut self, state: &State) -> Command {
        if self.chance(0.1) {
            Command::Batch(vec![])
        } else {
            self.single(state)
        }
    }

    /// A command aimed at what exists. When nothing it could aim at exists yet,
    /// mostly something that builds instead (and otherwise an unknown id), so a
    /// sequence does not spend its length on "not found".
    fn single(&mut self, state: &State) -> Command {
        if self.chance(0.15) {
            return crate::eo::command(self, state);
        }
        let aimed = match self.below(100) {
            0..=44 => return self.building(state),
            45..=69 => self.split(state, dynamic_tasks(state)),
            70..=77 => Some(self.finish(state)),
            78..=82 => {
                let clients: Vec<u64> = state.clients.keys().copied().collect();
                self.aimed(&clients, 3000, state.next_client_id)
                    .map(|client_id| Command::ReleaseClient { client_id })
            }
            83..=85 => {
                let address = self.address();
                let worker_uid = self.uid(state, &address);
                Some(Command::WorkerLost { address, worker_uid })
            }
            86..=87 => {
                let done: Vec<u64> = state
                    .iterations
                    .values()
                    .filter(|it| !it.is_live() && it.clients.is_empty())
                    .map(|it| it.id)
                    .collect();
                self.aimed(&done, 2000, state.next_iteration_id)
                    .map(|iteration_id| Command::ForgetIteration { iteration_id })
            }
            88..=91 => {
                let abandoned: Vec<u64> = state
                    .iterations
                    .values()
                    .filter(|it| it.clients.is_empty())
                    .map(|it| it.id)
                    .collect();
                self.aimed(&abandoned, 2000, state.next_iteration_id)
                    .map(|iteration_id| Command::GcIteration { iteration_id })
            }
            92..=95 => {
                let waiting = waiting_to_join(state);
                let starting_round = self.rng.gen_range(0..5);
                self.aimed(&waiting, 2000, state.next_iteration_id).map(|iteration_id| {
                    Command::CoordinatedPromoteTasks { iteration_id, starting_round }
                })
            }
            _ => {
                let coordinated = coordinated_tasks(state);
                let round = self.rng.gen_range(0..5);
                self.aimed(&coordinated, 4000, state.next_task_id)
                    .map(|task_id| Command::CoordinatedRemoveTask { task_id, round })
            }
        };
        match aimed {
            Some(cmd) => cmd,
            None => self.building(state),
        }
    }

    /// Registers a dataset or a worker, or creates a job or an iteration.
    fn building(&mut self, state: &State) -> Command {
        match self.below(4) {
            0 => self.register_dataset(),
            1 => self.job(state),
            2 => self.iteration(state),
            _ => {
                let address = self.address();
                let worker_uid = self.rng.gen_range(1..=4);
                Command::RegisterWorker {
                    address,
                    worker_uid,
                    functions: vec![],
                    python_version: None,
                    limits: self.limits(),
                }
            }
        }
    }

    fn register_dataset(&mut self) -> Command {
        // "never" stays unregistered; an empty id is refused.
        let dataset_id = match self.below(10) {
            0 | 1 => Some(self.pick(&DATASET_IDS[..5]).to_string()),
            2 => Some(String::new()),
            _ => None,
        };
        Command::RegisterDataset { dataset_id, def: def(self.below(5)), limits: self.limits() }
    }

    fn job(&mut self, state: &State) -> Command {
        let mut static_workers: Vec<String> =
            ADDRESSES[..3].iter().filter(|_| self.chance(0.6)).map(|a| a.to_string()).collect();
        static_workers.shuffle(&mut self.rng);
        let num_consumers = match self.below(16) {
            0 => Some(0),
            1 => Some(1),
            2 | 3 => Some(2),
            _ => None,
        };
        let registered: Vec<&String> = state.datasets.keys().collect();
        let dataset_id = match registered.choose(&mut self.rng) {
            Some(id) if self.chance(0.85) => id.to_string(),
            _ => self.pick(&DATASET_IDS).to_string(),
        };
        Command::GetOrCreateJob {
            dataset_id,
            mode: self.pick(&MODES),
            job_name: self.pick(&JOB_NAMES).map(String::from),
            target_workers: self.pick(&TARGETS),
            static_workers,
            cross_trainer_cache: self.chance(0.05),
            num_consumers,
            limits: self.limits(),
        }
    }

    fn iteration(&mut self, state: &State) -> Command {
        let jobs: Vec<u64> = state.jobs.keys().copied().collect();
        let job_id = match jobs.choose(&mut self.rng) {
            Some(id) if self.chance(0.8) => *id,
            _ => self.id(5000, state.next_job_id),
        };
        Command::GetOrCreateIteration {
            job_id,
            repetition: self.rng.gen_range(0..3),
            elements_per_split: if self.chance(0.1) { 0 } else { self.rng.gen_range(1..4) },
            limits: self.limits(),
        }
    }

    /// A split request, mostly for a task of a live DYNAMIC iteration, from its
    /// worker's uid or another, with the next sequence, the same again (a retry)
    /// or any.
    fn split(&mut self, state: &State, dynamic: Vec<u64>) -> Option<Command> {
        let task_id = self.aimed(&dynamic, 4000, state.next_task_id)?;
        let task = state.tasks.get(&task_id);
        let worker_uid = match task {
            Some(t) => self.uid(state, &t.worker_address),
            None => self.rng.gen_range(1..=4),
        };
        let last = task.and_then(|t| t.last_split).filter(|l| l.worker_uid == worker_uid);
        let sequence = match (last, self.below(10)) {
            (Some(l), 0..=5) => l.sequence + 1,
            (Some(l), 6..=7) => l.sequence,
            _ => self.rng.gen_range(0..4),
        };
        Some(Command::GetSplit {
            task_id,
            worker_uid,
            sequence,
            provider: u32::from(self.chance(0.05)),
            repetition: self.rng.gen_range(0..3),
            max_splits: self.rng.gen_range(0..4),
        })
    }

    /// Some of a registered worker's active tasks, and now and then any task id.
    fn finish(&mut self, state: &State) -> Command {
        let registered: Vec<&String> = state.workers.keys().collect();
        let worker_address = match registered.choose(&mut self.rng) {
            Some(a) if self.chance(0.8) => a.to_string(),
            _ => self.address(),
        };
        let mut task_ids: Vec<u64> = state
            .workers
            .get(&worker_address)
            .map(|w| w.active_tasks.iter().copied().filter(|_| self.chance(0.5)).collect())
            .unwrap_or_default();
        if self.chance(0.3) {
            task_ids.push(self.id(4000, state.next_task_id));
        }
        let worker_uid = self.uid(state, &worker_address);
        Command::FinishTasks { worker_address, worker_uid, task_ids }
    }
}

/// Tasks of live DYNAMIC iterations: those that can be granted splits.
fn dynamic_tasks(state: &State) -> Vec<u64> {
    let takes_splits = |t: &&Task| {
        let it = &state.iterations[&t.iteration_id];
        it.is_live() && !it.cursors.is_empty()
    };
    state.tasks.values().filter(takes_splits).map(|t| t.id).collect()
}

/// Coordinated iterations with tasks waiting to join the rounds.
fn waiting_to_join(state: &State) -> Vec<u64> {
    let waiting = |it: &&Iteration| it.coordinated.as_ref().is_some_and(|c| !c.pending.is_empty());
    state.iterations.values().filter(waiting).map(|it| it.id).collect()
}

/// Tasks of coordinated iterations: those that can be voted out.
fn coordinated_tasks(state: &State) -> Vec<u64> {
    let coordinated = |t: &&Task| state.iterations[&t.iteration_id].coordinated.is_some();
    state.tasks.values().filter(coordinated).map(|t| t.id).collect()
}
