//! Replication: the dispatcher's commands go through an openraft group whose log
//! and snapshots live in a [`sluice_journal::Journal`].
//!
//! ```text
//!  Core::propose(cmd) ──► Raft::client_write ──► LogStore::append ──► Journal (fsync / PUT)
//!                               │ committed on a quorum
//!                               ▼
//!                       StateMachine::apply ──► crate::apply(&mut State, cmd) ──► Response
//!
//!  peers: network::PeerNetwork ──RaftPeer gRPC──► peer_service::PeerService ──► Raft::{append_entries, vote, install_snapshot}
//! ```
//! - [`TypeConfig`]: openraft's types for Sluice (`D = Command`, `R = CommandResult`).
//! - `bootstrap`: a node starting with an empty journal decides with its peers
//!   whether the group is new (initialize) or it was wiped (rejoin as a learner; no
//!   vote until caught up).
//! - `codec`: the one place that encodes openraft and state types (bincode),
//!   with the byte bounds: decoding limited to the input, a log entry at most
//!   [`MAX_ENTRY_BYTES`] (refused when proposed), a Raft RPC at most
//!   [`MAX_RAFT_MESSAGE_BYTES`] (an AppendEntries over it is sent in pieces).
//! - `versioned`: the format version in front of every record the dispatcher
//!   persists, migrations of older ones, the refusal of newer ones
//!   (`check_journal`, before a work_dir is opened for writing); `layout_v1`:
//!   the state as layout version 1 persisted it, frozen, and its migration;
//!   `layout_v2`: the same for version 2; `layout_v4`: for versions 3 and 4.
//! - `log_store`: `RaftLogStorage` on the journal.
//! - `state_machine`: `RaftStateMachine` around the pure `apply`; snapshots are the
//!   whole `State`, saved to the journal; the log before a snapshot is purged.
//! - `network` / `peer_service`: Raft RPCs over tonic, both directions;
//!   `peer_checks`: what a peer's message must satisfy before openraft sees it;
//!   `snapshot_inbox`: a leader's snapshot chunks, gathered and checked before
//!   openraft installs them; `snapshot_mark`: how far the journal's snapshot
//!   covers the log, so a purge never passes it;
//!   `contacts`: when each peer last answered this node (soft, for the status page).
//!   `leader_heard`: when this node last heard from a leader (soft: a follower
//!   holds a refusal while its leader is silent, `Core::held`).
//! - `addresses`: a membership entry's client and Raft ports (a leaf).
//! - `membership`: adding and removing voters while the group serves (the
//!   operator's `sluice admin add-dispatcher` / `remove-dispatcher`).

// openraft's StorageError is large by design and is what its traits return.
#![allow(clippy::result_large_err)]

pub(crate) mod applied;
pub(crate) mod bootstrap;
// Public so tests can speak Raft to a node as a peer (or a forger) would.
pub mod codec;
pub(crate) mod contacts;
pub(crate) mod leader_heard;
pub use codec::{MAX_ENTRY_BYTES, MAX_RAFT_MESSAGE_BYTES, MAX_SNAPSHOT_BYTES};
pub(crate) mod addresses;
pub(crate) mod group_commit;
pub(crate) mod layout_v1;
pub(crate) mod layout_v2;
pub(crate) mod layout_v4;
pub mod log_store;
pub mod membership;
pub(crate) mod network;
pub(crate) mod peer_checks;
pub(crate) mod peer_service;
pub(crate) mod snapshot_inbox;
pub mod snapshot_mark;
pub mod state_machine;
pub mod versioned;

use std::io::Cursor;

use crate::command::{Command, Response};
use crate::error::StateError;

/// What applying one command answers; carried back to the proposer through Raft.
/// `None` for Raft's own entries (blank, membership).
pub type CommandResult = Option<Result<Response, StateError>>;

openraft::declare_raft_types!(
    /// openraft's type configuration for the dispatcher group.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
