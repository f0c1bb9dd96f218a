//! Sluice's dispatcher: the registry of datasets, jobs, iterations, tasks and
//! workers, and the split cursors of dynamic sharding.
//!
//! # Layout
//! ```text
//!  gRPC request ──► service ──(Command)──► core::Core::propose ──► apply(&mut State, Command)
//!                     ▲                         │                        (pure: no I/O,
//!                     └──────(Response)─────────┘                         clock, randomness)
//! ```
//! - [`state`] — [`State`], the whole replicated state, and its types.
//! - [`command`] — [`Command`] / [`Response`], one per whole operation.
//! - [`apply`] — the pure state machine; `cache_check`: what a cross-trainer cache
//!   job requires (checked by `apply` when the job is created).
//! - [`core`] — [`Core`], the single owner of the state: commands go through Raft
//!   ([`raft`]) and its journal before they are applied and answered.
//! - `coordinated`: coordinated reads, the replicated half (pending tasks,
//!   promotion, removal; called by `apply`); `coordinated_reads`: the
//!   leader's soft half (pause reports, removal votes) and the protocol's doc.
//! - [`raft`] — openraft glue: log storage and snapshots on `sluice-journal`, the
//!   state machine around `apply`, and the peer RPCs.
//! - `client_view`: a consumer's view of its iteration and the `ClientHeartbeat`
//!   long poll, woken by the state machine's applied index.
//! - `worker_view`: a worker's heartbeat answer (tasks to start and to delete) and
//!   the long poll that holds an empty one until there is a task for it.
//! - `service`: the gRPC handlers; `convert`: wire ↔ domain and errors → `Status`;
//!   `status`: the `GetStatus` rendering.
//! - `liveness`: the leader's timers (soft state) that propose `WorkerLost`,
//!   `ReleaseClient` and `GcIteration`; `apply_liveness`: what those do in `apply`.
//! - [`server`] — `run` / `spawn` on a bound listener with an injectable shutdown.
//! - `metrics`: the Prometheus gauges (computed from the state at scrape time) and
//!   counters served at `GET /metrics` (`run_with_metrics`).
//! - [`config`], [`error`].

pub mod apply;
mod cache_check;
mod client_view;
pub mod command;
pub mod config;
mod convert;
mod coordinated_reads;
pub mod core;
mod counters;
mod def_serde;
pub mod error;
mod liveness;
mod long_poll;
mod metrics;
pub mod raft;
pub mod server;
mod service;
pub mod state;
mod status;
mod worker_view;

pub use apply::apply;
pub use command::{Command, Response};
pub use config::{parse_peers, DispatcherConfig};
pub use core::Core;
pub use error::{DispatcherError, ProposeError, StateError};
pub use server::{run, run_with_metrics, spawn, DispatcherHandle};
pub use state::{Mode, State, TargetWorkers};
