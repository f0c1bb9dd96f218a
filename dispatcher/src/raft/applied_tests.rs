use openraft::{CommittedLeaderId, LogId, SnapshotMeta};

use super::*;
use crate::raft::codec::encode;

fn log_id(term: u64, node: NodeId, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

fn meta(last: Option<LogId<NodeId>>) -> SnapshotMeta<NodeId, BasicNode> {
    SnapshotMeta { last_log_id: last, snapshot_id: "s".into(), ..Default::default() }
}

#[test]
fn a_snapshot_must_decode_to_where_its_meta_says() {
    let at = Some(log_id(3, 2, 40));
    let applied = Applied { last_applied: at, ..Applied::default() };
    let body = encode(&applied).unwrap();
    check_snapshot(&meta(at), &body).unwrap();

    let r = check_snapshot(&meta(Some(log_id(3, 2, 1_000_000_000))), &body);
    assert!(matches!(r, Err(PeerRefusal::SnapshotInconsistent { .. })), "{r:?}");
    let r = check_snapshot(&meta(at), &[0xff; 291]);
    assert!(matches!(r, Err(PeerRefusal::SnapshotUndecodable { .. })), "{r:?}");
}
