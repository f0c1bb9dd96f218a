//! Entry point for the Raft message fuzz target (`fuzz/`) and its corpus-replay test
//! (`tests/fuzz_corpus.rs`); feature `fuzzing`, not an API.
//!
//! Why here: the codec (`raft::codec`) is crate-private, and the replay test that CI
//! runs on stable must call exactly what the fuzzer called.

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Entry, EntryPayload, LogId, SnapshotMeta, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::raft::applied::Applied;
use crate::raft::codec::{decode, encode};
use crate::raft::{NodeId, TypeConfig};
use crate::state::State;

type Infallible = openraft::error::Infallible;

/// Every payload the codec decodes from a peer or from the journal, picked by the
/// input's first byte: the three Raft requests (peer service), their three replies
/// (network), a log entry, a vote, a purge marker, a snapshot's meta and body. What
/// decodes must encode and decode again; the commands a decoded request or entry
/// carries are then applied to a fresh state, as a follower applying them would.
pub fn raft_message(data: &[u8]) {
    let Some((&kind, bytes)) = data.split_first() else { return };
    match kind % 11 {
        0 => {
            if let Some(req) = round_trip::<AppendEntriesRequest<TypeConfig>>(bytes) {
                apply_entries(req.entries);
            }
        }
        1 => drop(round_trip::<VoteRequest<NodeId>>(bytes)),
        2 => drop(round_trip::<InstallSnapshotRequest<TypeConfig>>(bytes)),
        3 => drop(
            round_trip::<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId, Infallible>>>(
                bytes,
            ),
        ),
        4 => drop(round_trip::<Result<VoteResponse<NodeId>, RaftError<NodeId, Infallible>>>(bytes)),
        5 => drop(round_trip::<
            Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
        >(bytes)),
        6 => {
            if let Some(entry) = round_trip::<Entry<TypeConfig>>(bytes) {
                apply_entries(vec![entry]);
            }
        }
        7 => drop(round_trip::<Vote<NodeId>>(bytes)),
        8 => drop(round_trip::<LogId<NodeId>>(bytes)),
        9 => drop(round_trip::<SnapshotMeta<NodeId, BasicNode>>(bytes)),
        _ => drop(round_trip::<Applied>(bytes)),
    }
}

/// Decodes `bytes` as `T`; what decodes must survive encode → decode.
fn round_trip<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let value: T = decode(bytes).ok()?;
    let again = encode(&value).expect("a decoded value encodes");
    Some(decode(&again).expect("an encoded value decodes"))
}

fn apply_entries(entries: Vec<Entry<TypeConfig>>) {
    let mut state = State::default();
    for entry in entries {
        if let EntryPayload::Normal(command) = entry.payload {
            let _ = crate::apply::apply(&mut state, command);
        }
    }
}
