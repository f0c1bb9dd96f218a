//! [`WriteObserver`]: how a caller learns how long each durable write took,
//! without this crate knowing what it does with that (the dispatcher feeds a
//! Prometheus histogram, `sluice_journal_fsync_seconds`).
//!
//! A durable write is what a mutating [`Journal`](crate::Journal) call waits for
//! before it returns: the sled backend's flush and fsync, or the object-store
//! backend's create-if-absent PUT (retries included). Reads and the claim at open
//! are not timed.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Told the duration of every durable write of a journal opened with it
/// (`OpenOptions::observer`). Called on the writing task: keep it cheap.
pub trait WriteObserver: Send + Sync + Debug {
    fn durable_write(&self, took: Duration);
}

/// The observer of one journal handle, if any.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timing(pub(crate) Option<Arc<dyn WriteObserver>>);

impl Timing {
    /// Reports the time since `start` (a durable write that just ended).
    pub(crate) fn done(&self, start: Instant) {
        if let Some(o) = &self.0 {
            o.durable_write(start.elapsed());
        }
    }
}
