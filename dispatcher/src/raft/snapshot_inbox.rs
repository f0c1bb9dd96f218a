//! Snapshot chunks from a leader, gathered here until the last one, so openraft
//! only ever sees a whole snapshot that has been checked.
//!
//! openraft 0.9, on the last chunk of an InstallSnapshot, moves its commit
//! point to the meta's last log id and purges the log up to it, and only then
//! hands the body to the state machine; a body the state machine cannot decode
//! then stops the node with its log purged and no snapshot to stand on, so it
//! never starts again (issue 31). So the peer service keeps the chunks itself
//! (`receive`), checks the whole body against its meta
//! (`applied::check_snapshot`) and passes openraft one request carrying
//! all of it, which openraft installs in one step. A body that fails the check
//! is refused and dropped: nothing reached openraft, nothing was purged.
//!
//! Bounded: one snapshot at a time (a chunk of another snapshot id starts
//! over, as openraft does), at most `MAX_SNAPSHOT_BYTES` of it, each chunk
//! within the gRPC message limit. Soft state: a restart drops a partial
//! snapshot; the leader's next chunk then finds no stream and is answered
//! `SnapshotMismatch`, on which the leader resends from offset 0.

use std::sync::Mutex;

use openraft::error::{InstallSnapshotError, SnapshotMismatch};
use openraft::raft::InstallSnapshotRequest;
use openraft::{BasicNode, SnapshotMeta, SnapshotSegmentId};

use super::codec::MAX_SNAPSHOT_BYTES;
use super::peer_checks::PeerRefusal;
use super::{NodeId, TypeConfig};

/// The snapshot being received. A std Mutex: only a copy of one chunk is done
/// under it, never an await.
#[derive(Default)]
pub struct SnapshotInbox {
    receiving: Mutex<Option<Receiving>>,
}

struct Receiving {
    meta: SnapshotMeta<NodeId, BasicNode>,
    body: Vec<u8>,
}

/// What a chunk completed.
#[derive(Debug)]
pub enum Received {
    /// Kept; more chunks to come.
    More,
    /// Not at an offset this node can take (openraft's own answer, on which
    /// the leader resends from the offset expected).
    Mismatch(InstallSnapshotError),
    /// The last chunk: the whole snapshot, as one request (offset 0, done).
    Complete(InstallSnapshotRequest<TypeConfig>),
}

impl SnapshotInbox {
    /// Adds `req`'s chunk. A chunk beyond the bound, or whose meta differs from
    /// its stream's first chunk, is refused and the stream dropped.
    pub fn receive(
        &self,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<Received, PeerRefusal> {
        let mut receiving = self.receiving.lock().unwrap_or_else(|p| p.into_inner());
        let end = req.offset.saturating_add(req.data.len() as u64);
        if end > MAX_SNAPSHOT_BYTES {
            *receiving = None;
            return Err(PeerRefusal::SnapshotTooLarge { end, max: MAX_SNAPSHOT_BYTES });
        }
        let id = req.meta.snapshot_id.clone();
        let mismatch = |expect: u64| {
            Received::Mismatch(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: SnapshotSegmentId { id: id.clone(), offset: expect },
                got: SnapshotSegmentId { id: id.clone(), offset: req.offset },
            }))
        };
        match receiving.as_mut() {
            Some(r) if r.meta.snapshot_id == id => {
                if r.meta != req.meta {
                    *receiving = None;
                    return Err(PeerRefusal::SnapshotMetaChanged { id });
                }
                // A resent chunk (the leader retries at the same offset) replaces
                // what followed it; a gap is never filled in.
                if req.offset > r.body.len() as u64 {
                    return Ok(mismatch(r.body.len() as u64));
                }
                r.body.truncate(req.offset as usize);
                r.body.extend_from_slice(&req.data);
            }
            _ if req.offset != 0 => return Ok(mismatch(0)),
            _ => *receiving = Some(Receiving { meta: req.meta.clone(), body: req.data }),
        }
        if !req.done {
            return Ok(Received::More);
        }
        let Receiving { meta, body } = receiving.take().expect("a chunk was just kept");
        Ok(Received::Complete(InstallSnapshotRequest {
            vote: req.vote,
            meta,
            offset: 0,
            data: body,
            done: true,
        }))
    }
}

#[cfg(test)]
#[path = "snapshot_inbox_tests.rs"]
mod tests;
