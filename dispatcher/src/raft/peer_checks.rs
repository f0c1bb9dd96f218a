//! What a peer's Raft message must satisfy before openraft sees it.
//!
//! openraft 0.9 trusts its peers: a message no correct peer sends can reach an
//! assertion in its engine (a vote naming this node as leader makes it a leader
//! of a term it never won, or trips `become_following`'s check; entries out of
//! order trip the log id list's), or, for a snapshot, make it purge the log
//! before the state machine finds the body undecodable (issue 31). Without a
//! peer secret or a peer CA of its own, anyone who reaches the Raft port is a
//! peer, so the peer service refuses such messages here, with an
//! `InvalidArgument` naming what was wrong, and the node keeps serving.
//!
//! These are shape checks of one message against what every correct peer
//! sends; they do not (cannot, without authentication) tell a forged but
//! well-formed message from a real one (docs/security.md, "Trust model").
//! Senders that are not members are not refused: a lagging follower must take
//! AppendEntries from a leader added after its last membership entry.

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{LogId, Vote};

use super::{NodeId, TypeConfig};

/// Why a peer's message was refused (mapped to a `Status` in `peer_service`).
#[derive(Debug, thiserror::Error)]
pub enum PeerRefusal {
    #[error(
        "its vote {vote} names this node ({me}) as the leader or candidate, which no peer \
         sends (a forged or misaddressed message)"
    )]
    NamesThisNode { vote: Vote<NodeId>, me: NodeId },
    #[error(
        "a vote request with the committed vote {0}: candidates ask with an uncommitted \
         vote (a forged message)"
    )]
    CommittedVoteRequest(Vote<NodeId>),
    #[error(
        "the uncommitted vote {0}: only an elected leader replicates, with its committed \
         vote (a forged message)"
    )]
    UncommittedLeader(Vote<NodeId>),
    #[error(
        "log id {log_id} is of a later term than the sender's vote {vote}, or of another \
         leader in its term (a forged message)"
    )]
    NewerThanVote { log_id: LogId<NodeId>, vote: Vote<NodeId> },
    #[error(
        "entry {position} has log id {log_id} after {previous:?}: entries must follow \
         the previous log id at consecutive indexes, terms never decreasing (a forged \
         message)"
    )]
    EntriesOutOfOrder { position: usize, log_id: LogId<NodeId>, previous: Option<LogId<NodeId>> },
    #[error("a snapshot without a last log id (a forged message)")]
    SnapshotWithoutLogId,
    #[error(
        "a snapshot of more than {max} bytes (a chunk ends at byte {end}): this node \
         buffers at most that much of one snapshot"
    )]
    SnapshotTooLarge { end: u64, max: u64 },
    #[error(
        "a chunk of snapshot {id} whose meta differs from its first chunk's (resend the \
         snapshot from offset 0)"
    )]
    SnapshotMetaChanged { id: String },
    #[error(
        "the snapshot body does not decode as this build's state: {error} (a forged body, \
         or a leader of a newer build: upgrade this node); nothing was installed or purged"
    )]
    SnapshotUndecodable { error: String },
    #[error(
        "the snapshot body's {what} is {body} but its meta says {meta} (a forged or \
         corrupted snapshot); nothing was installed or purged"
    )]
    SnapshotInconsistent { what: &'static str, body: String, meta: String },
}

/// A `log_id` a message carries must be of a term before the vote's, or of the
/// vote's own leader: a leader holds no entry of a later term, nor of another
/// leader in its term.
fn within_vote(log_id: &LogId<NodeId>, vote: &Vote<NodeId>) -> Result<(), PeerRefusal> {
    let (by, of) = (log_id.leader_id, vote.leader_id);
    if by.term < of.term || (by.term == of.term && by.node_id == of.node_id) {
        Ok(())
    } else {
        Err(PeerRefusal::NewerThanVote { log_id: *log_id, vote: *vote })
    }
}

fn not_naming(me: NodeId, vote: &Vote<NodeId>) -> Result<(), PeerRefusal> {
    if vote.leader_id.voted_for() == Some(me) {
        return Err(PeerRefusal::NamesThisNode { vote: *vote, me });
    }
    Ok(())
}

/// From a leader: a committed vote that is not this node's.
fn from_leader(me: NodeId, vote: &Vote<NodeId>) -> Result<(), PeerRefusal> {
    not_naming(me, vote)?;
    if !vote.is_committed() {
        return Err(PeerRefusal::UncommittedLeader(*vote));
    }
    Ok(())
}

/// A candidate asks with an uncommitted vote for itself (never for this node),
/// and its last log id is within that vote.
pub fn check_vote(me: NodeId, req: &VoteRequest<NodeId>) -> Result<(), PeerRefusal> {
    not_naming(me, &req.vote)?;
    if req.vote.is_committed() {
        return Err(PeerRefusal::CommittedVoteRequest(req.vote));
    }
    req.last_log_id.iter().try_for_each(|l| within_vote(l, &req.vote))
}

/// A leader's entries follow `prev_log_id` at consecutive indexes, their terms
/// never decrease, and none is newer than the leader's vote; so is its commit.
pub fn check_append(me: NodeId, req: &AppendEntriesRequest<TypeConfig>) -> Result<(), PeerRefusal> {
    from_leader(me, &req.vote)?;
    let mut previous = req.prev_log_id;
    for log_id in previous.iter().chain(req.leader_commit.iter()) {
        within_vote(log_id, &req.vote)?;
    }
    for (position, entry) in req.entries.iter().enumerate() {
        let log_id = entry.log_id;
        let next = previous.map_or(0, |p| p.index + 1);
        let ordered = previous.is_none_or(|p| {
            let (before, by) = (p.leader_id, log_id.leader_id);
            before.term < by.term || before == by
        });
        if log_id.index != next || !ordered {
            return Err(PeerRefusal::EntriesOutOfOrder { position, log_id, previous });
        }
        within_vote(&log_id, &req.vote)?;
        previous = Some(log_id);
    }
    Ok(())
}

/// A leader's snapshot chunk: a last log id within its vote.
pub fn check_snapshot_chunk(
    me: NodeId,
    req: &InstallSnapshotRequest<TypeConfig>,
) -> Result<(), PeerRefusal> {
    from_leader(me, &req.vote)?;
    let last = req.meta.last_log_id.as_ref().ok_or(PeerRefusal::SnapshotWithoutLogId)?;
    within_vote(last, &req.vote)
}

#[cfg(test)]
#[path = "peer_checks_tests.rs"]
mod tests;
