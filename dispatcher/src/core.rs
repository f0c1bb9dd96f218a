//! [`Core`]: the one owner of the dispatcher's [`State`].
//!
//! Handlers never touch the state directly: they `propose` a [`Command`] (which is
//! applied by the pure `apply`) and `read` snapshots of it. Today the state lives
//! in memory and a proposal is applied at once; replication and journaling slot in
//! behind `propose` without changing any handler.

use std::sync::Mutex;

use crate::apply::apply;
use crate::command::{Command, Response};
use crate::error::StateError;
use crate::state::State;

#[derive(Default)]
pub struct Core {
    // A std Mutex: every critical section is a short, synchronous `apply` or read,
    // never held across an `.await`.
    state: Mutex<State>,
}

impl Core {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `cmd`; returns its answer once it is applied (and, with a journal,
    /// durable).
    pub async fn propose(&self, cmd: Command) -> Result<Response, StateError> {
        let name = cmd.name();
        let result = apply(&mut self.lock(), cmd);
        if let Err(e) = &result {
            tracing::debug!(command = name, error = %e, "command refused");
        }
        result
    }

    /// Runs `f` on the current state.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic inside `apply` would be a bug; the state is still consistent
        // because apply checks before it mutates, so keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
