//! When this node last had an answer from each peer's Raft port, for the status
//! page's quorum table ("reachable as this node sees it").
//!
//! Soft state of this process, written by every Raft RPC's outcome
//! (`network.rs`): a leader sends each follower a heartbeat every
//! `heartbeat_interval`, so its view is fresh; a follower calls peers only to ask
//! for votes, so it has no view of the other followers (the page says so rather
//! than guess). Bounded by the group's members.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::NodeId;

/// What this node last saw of one peer.
#[derive(Clone, Debug, Default)]
pub struct Contact {
    /// The last answer (any answer, also a refusal: the peer is up).
    pub answered: Option<Instant>,
    /// The last failure to get an answer, with why.
    pub failed: Option<(Instant, String)>,
}

/// Shared by the Raft network (writes) and the status page (reads). A std
/// `Mutex`: each section is one map operation, no `.await`.
#[derive(Clone, Default)]
pub struct PeerContacts(Arc<Mutex<BTreeMap<NodeId, Contact>>>);

impl PeerContacts {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Contact>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn answered(&self, peer: NodeId) {
        self.map().entry(peer).or_default().answered = Some(Instant::now());
    }

    pub(crate) fn failed(&self, peer: NodeId, why: String) {
        self.map().entry(peer).or_default().failed = Some((Instant::now(), why));
    }

    /// What this node saw of each peer it called.
    pub fn snapshot(&self) -> BTreeMap<NodeId, Contact> {
        self.map().clone()
    }
}
