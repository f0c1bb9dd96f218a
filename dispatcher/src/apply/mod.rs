//! The pure state machine: `apply(&mut State, Command) -> Result<Response, StateError>`.
//!
//! No I/O, clock or randomness: the same commands applied to the same state give
//! the same state and answers on every replica and on replay (the RPC handler
//! stamps ids from outside and times into a command before it is proposed). A
//! refused command leaves the state unchanged: every check happens before the
//! first mutation.
//!
//! This file only routes a command to the module that owns what it changes:
//!
//! ```text
//!  apply ─┬─ RegisterDataset, GetOrCreateJob ─────────────► jobs
//!         ├─ GetOrCreateJob { num_consumers: Some }, Coordinated* ─► coordinated ─► jobs
//!         ├─ GetOrCreateIteration, ReleaseClient, FinishTasks ─► iterations
//!         ├─ RegisterWorker ─► workers ─► iterations::new_task, coordinated::add_task,
//!         │                               liveness::record_restart_loss
//!         ├─ GetSplit ─► splits
//!         ├─ WorkerLost, GcIteration ─► liveness
//!         ├─ ForgetIteration, ForgetDataset ─► forget
//!         ├─ Charged ─► apply, with the charge (`quotas.rs`) for jobs, iterations
//!         ├─ GetOrCreateExactlyOnceJob, ReportConsumed, RestoreIteration,
//!         │  SweepIteration ─► exactly_once
//!         │     (and the hooks iterations, liveness, splits, forget call there)
//!         └─ Batch ─► apply, once per command
//! ```
//!
//! Sub-modules call each other one way only (along the arrows) and never back into
//! this file; the queries they share (`State::takes_part`, `State::iteration_complete`,
//! `State::is_removed`, `Job::shard_of`, …) are methods of `State` in `state.rs`.

mod coordinated;
mod exactly_once;
mod forget;
mod iterations;
mod jobs;
mod liveness;
mod splits;
mod workers;

pub use splits::{next_split, MAX_SPLITS_PER_GRANT};

use crate::command::{Command, Response};
use crate::error::StateError;
use crate::quotas::{Admission, Charge};
use crate::state::State;
pub(crate) use exactly_once::consumed::Reported;
use jobs::NewJob;

pub fn apply(state: &mut State, cmd: Command) -> Result<Response, StateError> {
    apply_charged(state, cmd, None)
}

/// `apply`, with the charge of the `Charged` around `cmd` if there is one.
fn apply_charged(
    state: &mut State,
    cmd: Command,
    charge: Option<&Charge>,
) -> Result<Response, StateError> {
    match cmd {
        Command::RegisterDataset { dataset_id, def, limits } => {
            jobs::register_dataset(state, dataset_id, def, &Admission { limits: &limits, charge })
        }
        Command::GetOrCreateJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
            limits,
        } => {
            let job = NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache };
            match num_consumers {
                // A plain request may join an exactly-once job: it reads it
                // exactly-once (the answer says so).
                Some(n) => coordinated::get_or_create_job(
                    state,
                    job,
                    static_workers,
                    n,
                    &Admission { limits: &limits, charge },
                ),
                None => {
                    coordinated::refuse_plain_join(state, job.job_name.as_deref())?;
                    jobs::get_or_create_job(
                        state,
                        job,
                        static_workers,
                        &Admission { limits: &limits, charge },
                    )
                }
            }
        }
        Command::GetOrCreateIteration { job_id, repetition, elements_per_split, limits } => {
            iterations::get_or_create_iteration(
                state,
                job_id,
                repetition,
                elements_per_split,
                &Admission { limits: &limits, charge },
            )
        }
        Command::ReleaseClient { client_id } => iterations::release_client(state, client_id),
        Command::RegisterWorker { address, worker_uid, functions, python_version, limits } => {
            let capabilities = workers::Capabilities { functions, python_version };
            let registered = workers::register_worker(
                state,
                address.clone(),
                worker_uid,
                capabilities,
                &limits,
            )?;
            // A worker that can read lost units again, where no task can.
            exactly_once::orphans::ensure_readers(state, limits.max_tasks_per_worker);
            // Its answer lists its tasks as they are now.
            Ok(match registered {
                Response::WorkerRegistered { .. } => Response::WorkerRegistered {
                    tasks: state.worker_tasks(&address).iter().map(|t| t.id).collect(),
                },
                r => r,
            })
        }
        Command::FinishTasks { worker_address, worker_uid, task_ids } => {
            iterations::finish_tasks(state, &worker_address, worker_uid, &task_ids)
        }
        Command::GetSplit { task_id, worker_uid, sequence, provider, repetition, max_splits } => {
            splits::get_split(
                state, task_id, worker_uid, sequence, provider, repetition, max_splits,
            )
        }
        Command::Batch(cmds) => Ok(Response::Batch(
            cmds.into_iter()
                .map(|c| match c {
                    Command::Batch(_) => {
                        Err(StateError::InvalidArgument("batches do not nest".into()))
                    }
                    c => apply(state, c),
                })
                .collect(),
        )),
        Command::WorkerLost { address, worker_uid } => {
            liveness::worker_lost(state, &address, worker_uid)
        }
        Command::GcIteration { iteration_id } => liveness::gc_iteration(state, iteration_id),
        Command::CoordinatedPromoteTasks { iteration_id, starting_round } => {
            coordinated::promote_tasks(state, iteration_id, starting_round)
        }
        Command::CoordinatedRemoveTask { task_id, round } => {
            coordinated::remove_task(state, task_id, round)
        }
        Command::ForgetIteration { iteration_id } => forget::forget_iteration(state, iteration_id),
        Command::GetOrCreateExactlyOnceJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
            replay,
            limits,
        } => {
            let job = NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache };
            exactly_once::jobs::get_or_create(
                state,
                job,
                static_workers,
                num_consumers,
                replay,
                &Admission { limits: &limits, charge },
            )
        }
        Command::GetOrCreateOrderedJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
            replay,
            limits,
            order,
            ordered,
        } => {
            let job = NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache };
            let eo =
                exactly_once::jobs::ExactlyOnceJob { job, static_workers, num_consumers, replay };
            exactly_once::jobs::get_or_create_ordered(
                state,
                eo,
                order,
                ordered,
                &Admission { limits: &limits, charge },
            )
        }
        Command::ReportConsumed { client_id, generation, runs, unit_ends, lost_tasks_done } => {
            let records = Reported { runs: &runs, firsts: &[], unit_ends: &unit_ends };
            exactly_once::consumed::report(state, client_id, generation, records, &lost_tasks_done)
        }
        Command::ReportConsumedSpans {
            client_id,
            generation,
            runs,
            firsts,
            unit_ends,
            lost_tasks_done,
        } => {
            let records = Reported { runs: &runs, firsts: &firsts, unit_ends: &unit_ends };
            exactly_once::consumed::report(state, client_id, generation, records, &lost_tasks_done)
        }
        Command::RestoreIteration { job_id, repetition, elements_per_split, position, limits } => {
            exactly_once::restore::restore(
                state,
                job_id,
                repetition,
                elements_per_split,
                position,
                &Admission { limits: &limits, charge },
            )
        }
        Command::SweepIteration { iteration_id, tasks, drained } => {
            Ok(exactly_once::sweep::sweep(state, iteration_id, tasks, &drained))
        }
        Command::Charged { charge: c, command } => match (charge, *command) {
            (Some(_), _) | (_, Command::Charged { .. }) => {
                Err(StateError::InvalidArgument("charges do not nest".into()))
            }
            (_, Command::Batch(_)) => {
                Err(StateError::InvalidArgument("a batch is not charged; its commands are".into()))
            }
            (None, inner) => apply_charged(state, inner, Some(&c)),
        },
        Command::ForgetDataset { dataset_id, uses } => {
            forget::forget_dataset(state, &dataset_id, uses)
        }
    }
}
