//! The ids of the dispatcher's state, in one place: `state.rs` re-exports
//! them, and the state's sections (`exactly_once.rs`, `owners.rs`), which
//! `state.rs` holds, name them from here without depending on it.

pub type DatasetId = String;
pub type JobId = u64;
pub type IterationId = u64;
pub type TaskId = u64;
pub type ClientId = u64;
