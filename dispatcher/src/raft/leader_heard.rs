//! When this node last heard from a leader (an AppendEntries, heartbeats
//! included), so that a follower refusing a call knows whether the leader it
//! would name is alive.
//!
//! Why: after a leader dies, its followers keep naming it until one of them
//! stands for election (openraft's lease, then an election timeout: a few
//! hundred milliseconds). A client told to go there finds it down and backs
//! off, and the backoff then adds to the failover (issue 33). A follower that
//! has not heard from its leader for [`SILENT_AFTER_HEARTBEATS`] heartbeats
//! instead holds the refusal until the group names another leader or the
//! leader is heard again, bounded by what an election takes (`Core::held`):
//! the client then goes straight to the new leader, without a backoff.
//!
//! Soft state of this process, written by the Raft peer service.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A leader not heard for this many heartbeat intervals is taken for silent.
pub(crate) const SILENT_AFTER_HEARTBEATS: u32 = 2;

/// Shared by the peer service (writes) and the core (reads).
#[derive(Clone, Debug)]
pub(crate) struct LeaderHeard {
    base: Instant,
    /// Milliseconds from `base` to the last AppendEntries, plus one; 0: never.
    last: Arc<AtomicU64>,
}

impl Default for LeaderHeard {
    fn default() -> Self {
        LeaderHeard { base: Instant::now(), last: Arc::default() }
    }
}

impl LeaderHeard {
    /// An AppendEntries from a leader arrived.
    pub(crate) fn heard(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last.store(ms + 1, Ordering::Relaxed);
    }

    /// How long since a leader was last heard; `None`: never, in this process.
    pub(crate) fn silent_for(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            t => Some(self.base.elapsed().saturating_sub(Duration::from_millis(t - 1))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_heard_is_none_and_a_heartbeat_resets_the_silence() {
        let heard = LeaderHeard::default();
        assert_eq!(heard.silent_for(), None);
        heard.heard();
        let silence = heard.silent_for().expect("heard once");
        assert!(silence < Duration::from_secs(3600), "{silence:?}");
        let clone = heard.clone();
        clone.heard();
        assert!(heard.silent_for().is_some(), "clones share what was heard");
    }
}
