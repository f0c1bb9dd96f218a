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
//! - [`apply`] — the pure state machine.
//! - [`core`] — [`Core`], the single owner of the state (in memory today; the Raft
//!   issue puts replication and a journal behind the same `propose`).
//! - `service`: the gRPC handlers; `convert`: wire ↔ domain and errors → `Status`;
//!   `status`: the `GetStatus` rendering.
//! - [`server`] — `run` / `spawn` on a bound listener with an injectable shutdown.
//! - [`config`], [`error`].

pub mod apply;
pub mod command;
pub mod config;
mod convert;
pub mod core;
pub mod error;
pub mod server;
mod service;
pub mod state;
mod status;

pub use apply::apply;
pub use command::{Command, Response};
pub use config::DispatcherConfig;
pub use core::Core;
pub use error::{DispatcherError, StateError};
pub use server::{run, spawn, DispatcherHandle};
pub use state::{Mode, State};
