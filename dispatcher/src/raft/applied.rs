//! What the state machine holds and a snapshot carries ([`Applied`]): the
//! dispatcher's state and where it stands in the log, with its persisted layouts
//! (`versioned.rs`), the decoding of a peer's snapshot body (any layout an
//! earlier build sends), and the check that a body is what its meta says
//! ([`check_snapshot`]), which both the peer service (before openraft sees a
//! snapshot) and the state machine (before anything is durable) run.
//!
//! A module of its own so that the peer checks and the state machine both
//! depend on it, not on each other.

use openraft::{BasicNode, LogId, SnapshotMeta, StoredMembership};
use serde::{Deserialize, Serialize};

use super::codec::decode;
use super::peer_checks::PeerRefusal;
use super::versioned::{Kind, Versioned};
use super::{layout_v1, layout_v2, layout_v4, NodeId};
use crate::state::State;

/// What the state machine holds: the dispatcher's state and where it stands in the log.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub state: State,
}

// What a snapshot persists, and as which kind (`versioned.rs`). A change to
// `State`'s layout bumps the format and migrates here (`versioned.rs` docs):
// version 1 had no exactly-once section (`layout_v1.rs`), version 2 no
// deterministic orders in it (`layout_v2.rs`), versions 3 and 4 no owners
// section (`layout_v4.rs`).
impl Versioned for Applied {
    const KIND: Kind = Kind::Snapshot;
    fn migrate(version: u16, payload: &[u8]) -> Result<Self, bincode::Error> {
        match version {
            1 => decode::<layout_v1::Applied>(payload).map(Applied::from),
            2 => decode::<layout_v2::Applied>(payload).map(Applied::from),
            3 | 4 => decode::<layout_v4::Applied>(payload).map(Applied::from),
            _ => decode(payload),
        }
    }
}

/// Version 1 → 2 (`layout_v1.rs`): the state gains an empty exactly-once section.
impl From<layout_v1::Applied> for Applied {
    fn from(a: layout_v1::Applied) -> Self {
        Applied { last_applied: a.last_applied, membership: a.membership, state: a.state.into() }
    }
}

/// Version 2 → 3 (`layout_v2.rs`): no job had a deterministic order.
impl From<layout_v2::Applied> for Applied {
    fn from(a: layout_v2::Applied) -> Self {
        Applied { last_applied: a.last_applied, membership: a.membership, state: a.state.into() }
    }
}

/// Versions 3 and 4 → 5 (`layout_v4.rs`): nothing was charged to anyone.
impl From<layout_v4::Applied> for Applied {
    fn from(a: layout_v4::Applied) -> Self {
        Applied { last_applied: a.last_applied, membership: a.membership, state: a.state.into() }
    }
}

/// A snapshot body from a peer (InstallSnapshot carries no header): the current
/// layout, or, failing that, version 4's, 2's or 1's (a peer of an earlier build),
/// migrated. An older body never decodes as a newer one: each version only appends.
pub(crate) fn decode_peer_snapshot(body: &[u8]) -> Result<Applied, bincode::Error> {
    decode::<Applied>(body).or_else(|current| {
        decode::<layout_v4::Applied>(body)
            .map(Applied::from)
            .or_else(|_| decode::<layout_v2::Applied>(body).map(Applied::from))
            .or_else(|_| decode::<layout_v1::Applied>(body).map(Applied::from))
            .map_err(|_| current)
    })
}
/// A snapshot's body against its meta: it decodes (`decode_peer_snapshot`),
/// and what it decodes to stands where the meta says (last applied log id and
/// membership), so installing it leaves the state machine where openraft, from
/// the meta, believes it is. The decoded state is returned.
pub fn check_snapshot(
    meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
    body: &[u8],
) -> Result<Applied, PeerRefusal> {
    let max = super::codec::MAX_SNAPSHOT_BYTES;
    if body.len() as u64 > max {
        return Err(PeerRefusal::SnapshotTooLarge { end: body.len() as u64, max });
    }
    let applied = decode_peer_snapshot(body)
        .map_err(|e| PeerRefusal::SnapshotUndecodable { error: e.to_string() })?;
    if applied.last_applied != meta.last_log_id {
        return Err(PeerRefusal::SnapshotInconsistent {
            what: "last applied log id",
            body: format!("{:?}", applied.last_applied),
            meta: format!("{:?}", meta.last_log_id),
        });
    }
    if applied.membership != meta.last_membership {
        return Err(PeerRefusal::SnapshotInconsistent {
            what: "membership",
            body: applied.membership.to_string(),
            meta: meta.last_membership.to_string(),
        });
    }
    Ok(applied)
}

#[cfg(test)]
#[path = "applied_tests.rs"]
mod tests;
