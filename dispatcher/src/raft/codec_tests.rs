//! The bounded codec keeps the format of `bincode::serialize`, and refuses what
//! a forged message could use to allocate or recurse without bound.

use openraft::raft::AppendEntriesRequest;
use openraft::{Entry, EntryPayload, LogId, Vote};
use sluice_dataset::DatasetDef;

use super::*;
use crate::command::Command;
use crate::limits::Limits;
use crate::raft::TypeConfig;
use crate::state::State;

fn entry(index: u64, cmd: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(cmd),
    }
}

fn append(entries: Vec<Entry<TypeConfig>>) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: None,
        leader_commit: None,
        entries,
    }
}

#[test]
fn the_bytes_are_those_of_bincode_serialize() {
    let cmd = Command::RegisterDataset {
        dataset_id: Some("d".into()),
        def: DatasetDef::range(3),
        limits: Limits::default(),
    };
    let batch = Command::Batch(vec![cmd.clone(), Command::ReleaseClient { client_id: 7 }]);
    let rpc = append(vec![entry(1, cmd.clone()), entry(2, batch.clone())]);
    assert_eq!(encode(&cmd).unwrap(), bincode::serialize(&cmd).unwrap());
    for capacity in [0, 3, 1 << 16] {
        assert_eq!(encode_with_capacity(&batch, capacity).unwrap(), encode(&batch).unwrap());
    }
    assert_eq!(encode(&batch).unwrap(), bincode::serialize(&batch).unwrap());
    assert_eq!(encode(&rpc).unwrap(), bincode::serialize(&rpc).unwrap());
    assert_eq!(encode(&State::default()).unwrap(), bincode::serialize(&State::default()).unwrap());
    assert_eq!(encoded_len(&rpc).unwrap(), encode(&rpc).unwrap().len() as u64);
    // And what the old codec wrote decodes.
    let back: Command = decode(&bincode::serialize(&batch).unwrap()).unwrap();
    assert_eq!(back, batch);
}

#[test]
fn a_length_prefix_beyond_the_input_is_refused_before_allocating() {
    // RegisterDataset (variant 0) whose id (Some) claims a 2^60-byte string.
    let mut bytes = vec![0, 0, 0, 0, 1];
    bytes.extend_from_slice(&(1u64 << 60).to_le_bytes());
    bytes.extend_from_slice(b"abc");
    let err = decode::<Command>(&bytes).unwrap_err();
    assert!(matches!(*err, bincode::ErrorKind::SizeLimit), "{err:?}");
    // An AppendEntries whose entries claim 2^62 elements (the length precedes
    // `leader_commit`, here None: one byte).
    let mut rpc = encode(&append(vec![])).unwrap();
    let n = rpc.len();
    rpc[n - 9..n - 1].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let err = decode::<AppendEntriesRequest<TypeConfig>>(&rpc).unwrap_err();
    assert!(matches!(*err, bincode::ErrorKind::SizeLimit), "{err:?}");
}

#[test]
fn a_batch_inside_a_batch_is_refused_when_decoded_however_deep() {
    let nested = Command::Batch(vec![Command::Batch(vec![])]);
    let err = decode::<Command>(&encode(&nested).unwrap()).unwrap_err().to_string();
    assert!(err.contains("batches do not nest"), "{err}");
    // A forged entry nesting a million batches: refused at the second level,
    // not a stack overflow. Batch is variant 7 (u32), its length a u64.
    let mut bytes = vec![];
    for _ in 0..1_000_000 {
        bytes.extend_from_slice(&7u32.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
    }
    let err = decode::<Command>(&bytes).unwrap_err().to_string();
    assert!(err.contains("batches do not nest"), "{err}");
    // A flat batch still decodes, and the next decode on this thread is not
    // affected by the refusal.
    let flat = Command::Batch(vec![Command::ReleaseClient { client_id: 1 }]);
    assert_eq!(decode::<Command>(&encode(&flat).unwrap()).unwrap(), flat);
}

/// The state's task map is persistent (`state::TaskMap`), but its bytes are a plain
/// `BTreeMap`'s: snapshots written before it, and peers of earlier builds, read the
/// same layout.
#[test]
fn the_task_map_encodes_as_the_btree_map_it_replaced() {
    use crate::state::{Task, TaskMap};
    let task = |id: u64| Task {
        id,
        iteration_id: 2000 + id % 3,
        worker_address: format!("127.0.0.1:{}", 5000 + id),
        worker_index: (id % 4) as u32,
        finished: id.is_multiple_of(2),
        last_split: None,
        lost: id.is_multiple_of(5),
        starting_round: id,
    };
    // Inserted out of order, so the encoding's key order is the map's, not theirs.
    let ids = [4007u64, 4001, 4100, 4003, 4050, 4000];
    let persistent: TaskMap = ids.iter().map(|&id| (id, task(id))).collect();
    let plain: std::collections::BTreeMap<u64, Task> =
        ids.iter().map(|&id| (id, task(id))).collect();
    let bytes = encode(&persistent).unwrap();
    assert_eq!(bytes, encode(&plain).unwrap());
    assert_eq!(decode::<Tasks>(&bytes).unwrap().0, persistent);
}

/// The state's task map as `State` decodes it.
#[derive(Debug, serde::Deserialize)]
struct Tasks(
    #[serde(deserialize_with = "crate::state::deserialize_task_map")] crate::state::TaskMap,
);

/// imbl's own decoder reserves the length prefix's count of entries first (the
/// fuzz corpus found a snapshot asking for 1.3 TB); the state's reserves nothing.
#[test]
fn a_task_map_claiming_more_entries_than_its_bytes_is_refused_before_allocating() {
    let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
    bytes.extend_from_slice(&7u64.to_le_bytes());
    let err = decode::<Tasks>(&bytes).unwrap_err();
    assert!(matches!(*err, bincode::ErrorKind::SizeLimit), "{err:?}");
}

#[test]
fn a_charged_command_inside_a_charged_one_is_refused_when_decoded_however_deep() {
    use crate::quotas::{Charge, Quotas};
    let charge = Charge { owner: Some("a".into()), bytes: 0, quotas: Quotas::default() };
    let leaf = Command::ReleaseClient { client_id: 1 };
    let charged = |c: Command| Command::Charged { charge: charge.clone(), command: Box::new(c) };
    let nested = charged(charged(leaf.clone()));
    let err = decode::<Command>(&encode(&nested).unwrap()).unwrap_err().to_string();
    assert!(err.contains("charges do not nest"), "{err}");
    // Alternating wrappers are refused at the first repeat: a batch in a
    // charge in a batch.
    let mixed = Command::Batch(vec![charged(Command::Batch(vec![leaf.clone()]))]);
    let err = decode::<Command>(&encode(&mixed).unwrap()).unwrap_err().to_string();
    assert!(err.contains("batches do not nest"), "{err}");
    // One level of each decodes, and the refusals left no mark on this thread.
    let flat = Command::Batch(vec![charged(leaf.clone()), leaf]);
    assert_eq!(decode::<Command>(&encode(&flat).unwrap()).unwrap(), flat);
}
