//! The leader's soft record of drained consumers, for the end-of-epoch sweep of
//! exactly-once iterations (docs/exactly-once.md; the replicated half is
//! `apply/exactly_once/sweep.rs`).
//!
//! A consumer's heartbeat says, in `ConsumedReport.drained_tasks`, that it holds
//! nothing of its iteration's first n tasks (0: it may hold something). The
//! leader keeps the latest n per consumer here, in memory only: consumers send
//! it again about once a second while it holds, so a new leader learns it
//! within a second. When every consumer of an iteration said the same n and
//! `State::sweep_due` holds, the leader proposes `SweepIteration`, which checks
//! it all again against the replicated state.

use std::collections::HashMap;
use std::sync::Mutex;

use sluice_proto::v1 as pb;

use crate::command::Command;
use crate::state::{ClientId, State};

/// Consumers tracked at most; beyond that the record starts again empty (it
/// is refilled within a second by the consumers that are still drained).
const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Default)]
pub(crate) struct DrainedConsumers {
    /// client → the n of its last heartbeat that said it is drained.
    drained: Mutex<HashMap<ClientId, u64>>,
}

impl DrainedConsumers {
    /// Notes what `client_id`'s heartbeat said (0 forgets it).
    pub(crate) fn note(&self, client_id: ClientId, report: &pb::ConsumedReport) {
        let mut d = self.drained.lock().unwrap_or_else(|e| e.into_inner());
        if report.drained_tasks == 0 {
            d.remove(&client_id);
            return;
        }
        if d.len() >= MAX_TRACKED && !d.contains_key(&client_id) {
            d.clear();
        }
        d.insert(client_id, report.drained_tasks);
    }

    /// A released consumer is forgotten.
    pub(crate) fn forget(&self, client_id: ClientId) {
        self.drained.lock().unwrap_or_else(|e| e.into_inner()).remove(&client_id);
    }

    /// The sweep to propose for `client_id`'s iteration, if every consumer of it
    /// said it holds nothing of the same `tasks` tasks and the state says the
    /// sweep is due.
    pub(crate) fn sweep_for(&self, s: &State, client_id: ClientId) -> Option<Command> {
        let d = self.drained.lock().unwrap_or_else(|e| e.into_inner());
        let tasks = *d.get(&client_id)?;
        let iteration_id = *s.clients.get(&client_id)?;
        let it = s.iterations.get(&iteration_id)?;
        let drained: Vec<ClientId> =
            it.clients.iter().copied().filter(|c| d.get(c) == Some(&tasks)).collect();
        s.sweep_due(iteration_id, tasks, &drained).then_some(Command::SweepIteration {
            iteration_id,
            tasks,
            drained,
        })
    }
}
