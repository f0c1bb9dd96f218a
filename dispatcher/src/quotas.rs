//! Quotas per client identity, and the byte cap on dataset definitions (issue
//! 31, defect 6): the caps of `limits.rs` bound what all callers together make a
//! dispatcher hold, so one token could fill them and starve every other; a
//! quota bounds what one token's holder makes it hold.
//!
//! The identity is the name of the bearer token a caller presented
//! (`--auth-tokens`, `sluice_security::Caller`). A dispatcher without a token
//! file has no identities to tell apart: every caller is the same one, and only
//! the dispatcher-wide caps bound it (docs/security.md).
//!
//! The RPC handler wraps each command that may create something in
//! `Command::Charged` with a [`Charge`]: the caller's identity, the size of a
//! dataset definition, and the quotas, all stamped, so `apply` decides from the
//! command alone and every replica (and a replay) refuses the same commands.
//! [`Admission`] is what `apply` checks with, at the places that create: the
//! dispatcher-wide cap first, then the owner's quota. Who owns what is the
//! state's `owners` section (`owners.rs`).

use serde::{Deserialize, Serialize};

use crate::error::StateError;
use crate::limits::Limits;
use crate::state::State;

/// What one client identity may make a dispatcher hold, and the byte cap on
/// all dataset definitions together. Configuration (`DispatcherConfig::quotas`,
/// `sluice dispatcher --quota-*`, `--max-dataset-bytes`), stamped into commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Datasets one identity registered that are held (`--quota-datasets`).
    pub datasets: u64,
    /// Bytes of the dataset definitions one identity registered that are held
    /// (`--quota-dataset-bytes`).
    pub dataset_bytes: u64,
    /// Jobs one identity created that are held (`--quota-jobs`).
    pub jobs: u64,
    /// Iterations one identity created that are held, live or finished and not
    /// yet forgotten (`--quota-iterations`).
    pub iterations: u64,
    /// Of those, the live ones (`--quota-live-iterations`): each has a task on
    /// every worker, so this bounds the share of any worker's
    /// `--max-tasks-per-worker` one identity takes.
    pub live_iterations: u64,
    /// Consumers (client ids) one identity holds (`--quota-clients`).
    pub clients: u64,
    /// Bytes of all held dataset definitions, whoever registered them
    /// (`--max-dataset-bytes`).
    pub max_dataset_bytes: u64,
}

impl Default for Quotas {
    /// A quarter of a worker's task cap for live iterations (so four
    /// identities at their quota leave every worker room), a tenth of the
    /// dispatcher-wide caps for the rest. Definitions are small (a file list, a
    /// pipeline); one that carries data (`from_tensor_slices`) is held several
    /// times over in memory (issue 33 measured ~3.3× its size in RSS), so 256
    /// MiB in all keeps a dispatcher under about a GiB of them, and 64 MiB per
    /// identity lets no fewer than four fill it.
    fn default() -> Self {
        let caps = Limits::default();
        Quotas {
            datasets: caps.max_datasets / 10,
            dataset_bytes: 64 << 20,
            jobs: caps.max_jobs / 10,
            iterations: caps.max_iterations / 10,
            live_iterations: caps.max_tasks_per_worker / 4,
            clients: caps.max_clients / 10,
            max_dataset_bytes: 256 << 20,
        }
    }
}

impl Quotas {
    /// Every quota must allow something.
    pub fn validate(&self) -> Result<(), String> {
        let all = [
            ("--quota-datasets", self.datasets),
            ("--quota-dataset-bytes", self.dataset_bytes),
            ("--quota-jobs", self.jobs),
            ("--quota-iterations", self.iterations),
            ("--quota-live-iterations", self.live_iterations),
            ("--quota-clients", self.clients),
            ("--max-dataset-bytes", self.max_dataset_bytes),
        ];
        match all.iter().find(|(_, v)| *v == 0) {
            Some((flag, _)) => Err(format!("{flag} must be at least 1")),
            None => Ok(()),
        }
    }
}

/// What the handler stamps around a command that may create something.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The caller's token name; `None` on a dispatcher without tokens.
    pub owner: Option<String>,
    /// A `RegisterDataset`'s definition as the dispatcher holds it (after
    /// `list_files` was listed), encoded; 0 for other commands.
    pub bytes: u64,
    pub quotas: Quotas,
}

/// What `apply` admits new things with: the command's caps and its charge
/// (`None`: a command logged by a build before quotas, or proposed by the
/// dispatcher itself).
pub(crate) struct Admission<'a> {
    pub limits: &'a Limits,
    pub charge: Option<&'a Charge>,
}

/// The kinds of things a quota counts.
#[derive(Clone, Copy)]
pub(crate) enum Held {
    Datasets,
    Jobs,
    Iterations,
    LiveIterations,
    Clients,
}

impl Held {
    fn describe(self, q: &Quotas) -> (&'static str, u64, &'static str) {
        match self {
            Held::Datasets => ("datasets", q.datasets, "--quota-datasets"),
            Held::Jobs => ("jobs", q.jobs, "--quota-jobs"),
            Held::Iterations => ("iterations", q.iterations, "--quota-iterations"),
            Held::LiveIterations => {
                ("unfinished iterations", q.live_iterations, "--quota-live-iterations")
            }
            Held::Clients => ("consumers (clients)", q.clients, "--quota-clients"),
        }
    }
}

impl Admission<'_> {
    /// The owner a new thing is recorded under: an identified caller's name.
    pub fn owner(&self) -> Option<&str> {
        self.charge.and_then(|c| c.owner.as_deref())
    }

    /// Refuses one more `what` when its owner holds its quota of them.
    pub fn check(&self, state: &State, what: Held) -> Result<(), StateError> {
        let (Some(owner), Some(charge)) = (self.owner(), self.charge) else { return Ok(()) };
        let (name, quota, flag) = what.describe(&charge.quotas);
        let held = held(state, owner, what);
        if (held as u64) < quota {
            return Ok(());
        }
        Err(StateError::ResourceExhausted(format!(
            "the client `{owner}` holds {held} {name}, its quota ({flag} {quota}); release \
             what it no longer uses or wait for finished work to be forgotten \
             (--finished-job-ttl-secs, --unused-dataset-ttl-secs), or raise {flag} on every \
             dispatcher"
        )))
    }

    /// Refuses a new dataset definition of the charged size when it would take
    /// all held definitions past `--max-dataset-bytes`, or its owner's past
    /// `--quota-dataset-bytes`.
    pub fn check_dataset_bytes(&self, state: &State) -> Result<(), StateError> {
        let Some(charge) = self.charge else { return Ok(()) };
        let q = &charge.quotas;
        let all = state.owners.dataset_bytes(None);
        if all.saturating_add(charge.bytes) > q.max_dataset_bytes {
            return Err(StateError::ResourceExhausted(format!(
                "this dataset definition is {} bytes and the dispatcher holds {all} bytes of \
                 definitions, its cap (--max-dataset-bytes {}); keep large data in files \
                 (from_tensor_slices copies it into the definition), wait for unused datasets \
                 to be forgotten (--unused-dataset-ttl-secs), or raise the cap on every \
                 dispatcher",
                charge.bytes, q.max_dataset_bytes
            )));
        }
        let Some(owner) = self.owner() else { return Ok(()) };
        let mine = state.owners.dataset_bytes(Some(owner));
        if mine.saturating_add(charge.bytes) > q.dataset_bytes {
            return Err(StateError::ResourceExhausted(format!(
                "this dataset definition is {} bytes and the client `{owner}` holds {mine} \
                 bytes of definitions, its quota (--quota-dataset-bytes {}); keep large data \
                 in files, wait for its unused datasets to be forgotten \
                 (--unused-dataset-ttl-secs), or raise the quota on every dispatcher",
                charge.bytes, q.dataset_bytes
            )));
        }
        Ok(())
    }
}

/// How many `what` that `owner` made are held now: the owners section's
/// entries whose object the state still holds.
fn held(state: &State, owner: &str, what: Held) -> usize {
    let o = &state.owners;
    let mine = |o: &String| o == owner;
    match what {
        Held::Datasets => o
            .datasets
            .iter()
            .filter(|(id, r)| r.owner.as_deref() == Some(owner) && state.datasets.contains_key(*id))
            .count(),
        Held::Jobs => {
            o.jobs.iter().filter(|(id, w)| mine(w) && state.jobs.contains_key(id)).count()
        }
        Held::Iterations => o
            .iterations
            .iter()
            .filter(|(id, w)| mine(w) && state.iterations.contains_key(id))
            .count(),
        Held::LiveIterations => o
            .iterations
            .iter()
            .filter(|(id, w)| mine(w) && state.iterations.get(id).is_some_and(|it| it.is_live()))
            .count(),
        Held::Clients => {
            o.clients.iter().filter(|(id, w)| mine(w) && state.clients.contains_key(id)).count()
        }
    }
}
