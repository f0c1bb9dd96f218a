//! Sluice's dispatcher: the registry of datasets, jobs, iterations, tasks and
//! workers, and the split cursors of dynamic sharding.
//!
//! # Layout
//! ```text
//!  gRPC request ──► service ──(Command)──► core::Core::propose ──► apply(&mut State, Command)
//!                     ▲                         │                        (pure: no I/O,
//!                     └──────(Response)─────────┘                         clock, randomness)
//! ```
//! - [`state`] — [`State`], the whole replicated state, its types, and the
//!   read-only queries the state machine's modules share (`State::takes_part`,
//!   `State::iteration_complete`, …).
//! - [`command`] — [`Command`] / [`Response`], one per whole operation.
//! - [`apply`] — the pure state machine: `apply/mod.rs` only routes a command to
//!   the module that owns what it changes — `jobs` (datasets, jobs), `iterations`
//!   (iterations, their tasks and clients, FinishTasks), `workers`
//!   (RegisterWorker), `splits` (GetSplit), `liveness` (WorkerLost, GcIteration),
//!   `coordinated` (the replicated half of coordinated reads); calls between them
//!   go one way. `cache_check`: what a cross-trainer cache job requires (checked
//!   by `apply` when the job is created). `python_check`: whether the registered
//!   workers can run a pipeline's Python stages, and the refusals that say why not
//!   (used by `apply` and by `service` at job creation).
//! - [`core`] — [`Core`], the single owner of the state: commands go through Raft
//!   ([`raft`]) and its journal before they are applied and answered; `batcher`
//!   joins concurrent proposals into one log entry, within the entry cap.
//!   Concurrent leader reads share one leadership confirmation
//!   (`read_barrier`), so waiting long polls cost no quorum round each.
//! - [`raft`] — openraft glue: log storage and snapshots on `sluice-journal`, the
//!   state machine around `apply`, and the peer RPCs; `raft::membership` adds
//!   and removes voters while the group serves.
//! - [`admin`] — the operator's client of those membership changes (`sluice
//!   admin`, Python's `sluice.admin`).
//! - `coordinated_reads`: coordinated reads, the leader's soft half (pause
//!   reports, removal votes) and the protocol's doc.
//! - `long_poll`: the wait both heartbeat long polls share — re-read at each
//!   change of the state machine's applied index until the answer is worth
//!   sending or the wait ends. `client_view`: a consumer's view of its iteration
//!   (`ClientHeartbeat`); `worker_view`: a worker's heartbeat answer (tasks to
//!   start and to delete), held while it would be empty.
//! - `service`: the gRPC handlers; `convert`: wire ↔ domain and errors → `Status`;
//!   `status`: the `GetStatus` rendering. `status_page`: the HTML status page
//!   (and `/status.json`) beside `/metrics`, built on that rendering, with a
//!   sampled throughput history (soft state) drawn as an SVG chart.
//! - `health`: the standard gRPC health service's status, from Raft's metrics
//!   (SERVING while a leader is known and the log applied; docs/operations.md).
//! - `liveness`: the leader's timers (soft state) that propose `WorkerLost`,
//!   `ReleaseClient` and `GcIteration`; `apply::liveness`: what those do.
//!   `worker_reports`: what workers' heartbeats report beside liveness (elements
//!   `ignore_errors` skipped; soft state) for `status` and `metrics`.
//! - [`server`] — `run` / `spawn` on the client listener (and the Raft listener of
//!   a group) with an injectable shutdown.
//! - [`access`] — who may call what: the TLS of each listener, the token guard of
//!   the client port (client and worker roles) and of the Raft port (peers only).
//!   `worker_identity`: a worker bound to the token it registered with (soft
//!   state, checked by `service`).
//! - `metrics`: the Prometheus gauges (computed from the state at scrape time)
//!   served at `GET /metrics` (`run_with_metrics`) with `counters`, this
//!   process's counters (commands proposed and failed, GetSplit requests), which
//!   `Core` and the handlers increment.
//! - [`limits`]: the caps on what callers can make one dispatcher hold
//!   (stamped into commands, enforced by `apply`).
//! - [`exactly_once`]: the replicated state of exactly-once delivery (the
//!   trailing section of `State`); `apply/exactly_once/` changes it.
//!   The replayability check is the dataset crate's (`DatasetDef::exactly_once`);
//!   `eo_wire`: the exactly-once requests as commands, and delivery answers;
//!   `drained`: the leader's soft record of drained exactly-once consumers (the
//!   end-of-epoch sweep). [`order`]: the seeded order of a deterministic-order
//!   job's splits (pure).
//! - [`config`], [`error`] (`StateError`, `ProposeError`, `DispatcherError`).
//! - `fuzzing` (feature `fuzzing`): the Raft codec's entry point for the fuzz target in
//!   `fuzz/` and the corpus-replay test (`tests/fuzz_corpus.rs`); not an API.

pub mod access;
pub mod admin;
pub mod apply;
mod batcher;
mod cache_check;
mod client_view;
pub mod command;
pub mod config;
mod convert;
mod coordinated_reads;
pub mod core;
mod counters;
mod def_serde;
mod drained;
mod eo_wire;
pub mod error;
pub mod exactly_once;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod health;
pub mod ids;
mod leader_down;
pub mod limits;
mod liveness;
mod long_poll;
mod metrics;
pub mod order;
pub mod owners;
mod python_check;
pub mod quotas;
pub mod raft;
mod read_barrier;
pub mod server;
mod service;
pub mod state;
mod status;
mod status_page;
mod worker_identity;
mod worker_reports;
mod worker_view;

pub use access::DispatcherSecurity;
pub use apply::apply;
pub use command::{Command, Response};
pub use config::{parse_group, parse_peers, DispatcherConfig, DEFAULT_RAFT_PORT_OFFSET};
pub use core::Core;
pub use error::{DispatcherError, ProposeError, StateError};
pub use limits::Limits;
pub use quotas::Quotas;
pub use server::{
    run, run_with_listeners, run_with_metrics, spawn, spawn_with_listeners, spawn_with_raft,
    DispatcherHandle, Listeners,
};
pub use state::{Mode, State, TargetWorkers};
