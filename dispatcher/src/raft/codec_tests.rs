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
