//! What the simulated fleet saw, per operation: latencies, errors, and the
//! protocol events that are not latencies (held polls that timed out, views that
//! changed, re-registrations). One [`Ops`] is shared by every simulated worker and
//! consumer of one size; a std `Mutex` held only to push a sample (no `.await`
//! under it).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use crate::measure::Latency;

/// The operations timed, in the order the table lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    RegisterWorker,
    RegisterDataset,
    CreateJob,
    CreateIteration,
    /// A heartbeat answered at once (the first after registering, or one that
    /// reports finished tasks), or a held one answered with tasks to start/stop.
    WorkerHeartbeat,
    /// A held worker heartbeat that came back empty at the end of its hold: the
    /// time past the hold (how late the dispatcher answered).
    WorkerHeartbeatOverHold,
    /// A client heartbeat answered at once (the first, `known_view` 0).
    ClientHeartbeat,
    /// A held client heartbeat answered unchanged at the end of its hold: the
    /// time past the hold.
    ClientHeartbeatOverHold,
    /// `GetSplit`: one split granted (or end of splits).
    GetSplit,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::RegisterWorker => "RegisterWorker",
            Op::RegisterDataset => "RegisterDataset",
            Op::CreateJob => "GetOrCreateJob",
            Op::CreateIteration => "GetOrCreateIteration",
            Op::WorkerHeartbeat => "WorkerHeartbeat (answered at once)",
            Op::WorkerHeartbeatOverHold => "WorkerHeartbeat held: past the hold",
            Op::ClientHeartbeat => "ClientHeartbeat (answered at once)",
            Op::ClientHeartbeatOverHold => "ClientHeartbeat held: past the hold",
            Op::GetSplit => "GetSplit (grant)",
        }
    }
}

/// Events counted, not timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A held worker heartbeat answered early with tasks to start or stop.
    WorkerPollAnswered,
    /// A held client heartbeat answered early with a changed view.
    ClientViewChanged,
    /// The dispatcher no longer knew a worker (NotFound): it registered again.
    WorkerReRegistered,
    /// The dispatcher no longer knew a client (NotFound).
    ClientLost,
    /// Tasks the simulated workers were given (over all their answers).
    TasksStarted,
    /// A heartbeat that sent only its tasks' digest was asked for the list (the
    /// worker's tasks had changed on the dispatcher since the digest was named).
    WorkerTasksWanted,
}

/// The most latency samples kept per operation (about 32 MiB each at most);
/// later ones are counted, not kept.
const MAX_SAMPLES: usize = 2_000_000;

#[derive(Default)]
struct Samples {
    kept: Vec<Duration>,
    dropped: u64,
    errors: u64,
    last_error: Option<String>,
}

#[derive(Default)]
pub struct Ops {
    // Held only to push or read; never across an await.
    inner: Mutex<(BTreeMap<Op, Samples>, BTreeMap<Event, u64>)>,
}

/// One operation's figures.
#[derive(Clone, Debug, Serialize)]
pub struct OpFigures {
    pub op: Op,
    pub name: String,
    /// Calls that succeeded (timed); `latency` is over these.
    pub count: u64,
    pub latency: Option<Latency>,
    /// Calls that failed after the client's retries.
    pub errors: u64,
    pub last_error: Option<String>,
}

impl Ops {
    pub fn time(&self, op: Op, took: Duration) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let s = g.0.entry(op).or_default();
        if s.kept.len() < MAX_SAMPLES {
            s.kept.push(took);
        } else {
            s.dropped += 1;
        }
    }

    pub fn error(&self, op: Op, e: &dyn std::fmt::Display) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let s = g.0.entry(op).or_default();
        s.errors += 1;
        if s.last_error.is_none() {
            s.last_error = Some(e.to_string());
        }
    }

    pub fn count(&self, event: Event, n: u64) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *g.1.entry(event).or_default() += n;
    }

    /// How many times `event` happened.
    pub fn events(&self, event: Event) -> u64 {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.1.get(&event).copied().unwrap_or(0)
    }

    /// Drops every sample and count so far (the start of a measured window).
    pub fn reset(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *g = Default::default();
    }

    /// The figures of every operation seen, and the event counts.
    pub fn figures(&self) -> (Vec<OpFigures>, BTreeMap<Event, u64>) {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let ops =
            g.0.iter()
                .map(|(op, s)| OpFigures {
                    op: *op,
                    name: op.name().to_string(),
                    count: s.kept.len() as u64 + s.dropped,
                    latency: Latency::of(s.kept.clone()),
                    errors: s.errors,
                    last_error: s.last_error.clone(),
                })
                .collect();
        (ops, g.1.clone())
    }
}
