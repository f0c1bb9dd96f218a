//! Membership addresses: a node's entry in the Raft membership is `CLIENT` or
//! `CLIENT/RAFT` (the nodes added since start carry their Raft port, see
//! `membership`). A leaf module, so the network, the membership changes and the
//! core's leader hints share it without depending on each other.

use std::collections::BTreeMap;

use super::{NodeId, Raft};

/// The client port of a membership address (`CLIENT` or `CLIENT/RAFT`).
pub(crate) fn client_part(addr: &str) -> &str {
    addr.split_once('/').map_or(addr, |(c, _)| c)
}

/// The Raft port of a membership address, when it names one (`CLIENT/RAFT`).
pub(crate) fn raft_part(addr: &str) -> Option<&str> {
    addr.split_once('/').map(|(_, r)| r)
}

/// Where clients reach node `id`: its client port in the membership (which holds
/// the nodes added since start), else in `--peers` (`members`).
pub(crate) fn client_address_of(
    raft: &Raft,
    members: &BTreeMap<NodeId, String>,
    id: NodeId,
) -> Option<String> {
    let m = raft.metrics().borrow().clone();
    match m.membership_config.membership().get_node(&id) {
        Some(node) => Some(client_part(&node.addr).to_string()),
        None => members.get(&id).cloned(),
    }
}
