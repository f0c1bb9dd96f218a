use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, SnapshotMeta, Vote};

use super::*;

const ME: NodeId = 1;

fn log_id(term: u64, node: NodeId, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

fn entry(term: u64, node: NodeId, index: u64) -> Entry<TypeConfig> {
    Entry { log_id: log_id(term, node, index), payload: EntryPayload::Blank }
}

fn append(
    vote: Vote<NodeId>,
    prev: Option<LogId<NodeId>>,
    entries: Vec<Entry<TypeConfig>>,
) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest { vote, prev_log_id: prev, leader_commit: prev, entries }
}

#[test]
fn a_vote_naming_this_node_is_refused_in_every_message() {
    for vote in [Vote::new(7, ME), Vote::new_committed(7, ME)] {
        let req = VoteRequest { vote, last_log_id: None };
        assert!(matches!(check_vote(ME, &req), Err(PeerRefusal::NamesThisNode { .. })));
        let req = append(vote, None, vec![]);
        assert!(matches!(check_append(ME, &req), Err(PeerRefusal::NamesThisNode { .. })));
    }
    // Another candidate's request is the control.
    check_vote(ME, &VoteRequest { vote: Vote::new(7, 2), last_log_id: Some(log_id(6, 3, 9)) })
        .unwrap();
}

#[test]
fn a_vote_request_is_uncommitted_and_replication_is_committed() {
    let req = VoteRequest { vote: Vote::new_committed(7, 2), last_log_id: None };
    assert!(matches!(check_vote(ME, &req), Err(PeerRefusal::CommittedVoteRequest(_))));
    let req = append(Vote::new(7, 2), None, vec![]);
    assert!(matches!(check_append(ME, &req), Err(PeerRefusal::UncommittedLeader(_))));
}

#[test]
fn entries_must_follow_in_order_and_within_the_leaders_vote() {
    let vote = Vote::new_committed(5, 2);
    let prev = Some(log_id(4, 3, 10));
    check_append(ME, &append(vote, prev, vec![entry(4, 3, 11), entry(5, 2, 12)])).unwrap();
    for entries in [
        vec![entry(5, 2, 12)],                  // a gap after prev
        vec![entry(5, 2, 11), entry(5, 2, 11)], // an index repeated
        vec![entry(5, 2, 11), entry(4, 3, 12)], // a term going back
        vec![entry(4, 4, 11)],                  // prev's term, another leader
    ] {
        let r = check_append(ME, &append(vote, prev, entries.clone()));
        assert!(matches!(r, Err(PeerRefusal::EntriesOutOfOrder { .. })), "{entries:?}: {r:?}");
    }
    for entries in [vec![entry(6, 2, 11)], vec![entry(5, 3, 11)]] {
        let r = check_append(ME, &append(vote, prev, entries.clone()));
        assert!(matches!(r, Err(PeerRefusal::NewerThanVote { .. })), "{entries:?}: {r:?}");
    }
}

fn meta(last: Option<LogId<NodeId>>) -> SnapshotMeta<NodeId, openraft::BasicNode> {
    SnapshotMeta { last_log_id: last, snapshot_id: "s".into(), ..Default::default() }
}

#[test]
fn a_snapshot_chunk_needs_a_last_log_id_within_the_vote() {
    let req = |vote, last| InstallSnapshotRequest::<TypeConfig> {
        vote,
        meta: meta(last),
        offset: 0,
        data: vec![],
        done: true,
    };
    check_snapshot_chunk(ME, &req(Vote::new_committed(3, 2), Some(log_id(3, 2, 9)))).unwrap();
    let r = check_snapshot_chunk(ME, &req(Vote::new_committed(3, 2), None));
    assert!(matches!(r, Err(PeerRefusal::SnapshotWithoutLogId)), "{r:?}");
    let r = check_snapshot_chunk(ME, &req(Vote::new_committed(3, 2), Some(log_id(4, 2, 9))));
    assert!(matches!(r, Err(PeerRefusal::NewerThanVote { .. })), "{r:?}");
    let r = check_snapshot_chunk(ME, &req(Vote::new_committed(3, ME), Some(log_id(3, ME, 9))));
    assert!(matches!(r, Err(PeerRefusal::NamesThisNode { .. })), "{r:?}");
}
