//! The envelope: what this build writes it reads back; what builds before the
//! envelope wrote is read as version 1; a newer version or another kind is
//! refused with what to do; a layout change migrates the older version (a
//! test-only v1 → v2 change); and what goes to peers stays the plain layout.

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta,
    StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

use super::*;
use crate::command::Command;
use crate::raft::state_machine::{Applied, StateMachine};
use crate::raft::{NodeId, TypeConfig};

const LOC: &str = "sled:/somewhere/node-1";

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Command::ReleaseClient { client_id: 7 }),
    }
}

fn applied() -> Applied {
    Applied { last_applied: Some(log_id(3, 9)), ..Applied::default() }
}

fn meta() -> SnapshotMeta<NodeId, BasicNode> {
    SnapshotMeta {
        last_log_id: Some(log_id(3, 9)),
        last_membership: StoredMembership::default(),
        snapshot_id: "3-1-9-0".into(),
    }
}

/// Round trip through `seal`/`unseal`, compared by encoding (openraft's types
/// are not all `PartialEq`).
fn round_trip<T: Versioned>(value: &T) {
    let sealed = seal(value).unwrap();
    assert_eq!(sealed[..4], MAGIC);
    assert_eq!(sealed[4..6], CURRENT.to_le_bytes());
    assert_eq!(sealed[6], T::KIND as u8);
    let back: T = unseal(&sealed, LOC).unwrap();
    assert_eq!(encode(&back).unwrap(), encode(value).unwrap());
}

#[test]
fn every_kind_is_written_with_its_header_and_read_back() {
    round_trip(&entry(1, 1));
    round_trip(&Vote::<NodeId>::new_committed(4, 2));
    round_trip(&log_id(2, 5));
    round_trip(&meta());
    round_trip(&applied());
}

/// Reads `value` as a build before the envelope wrote it (plain bincode).
fn unversioned_round_trip<T: Versioned>(value: &T) {
    let plain = encode(value).unwrap();
    let back: T = unseal(&plain, LOC).unwrap();
    assert_eq!(encode(&back).unwrap(), plain);
}

#[test]
fn records_written_before_the_header_are_read_as_version_1() {
    // Terms whose bytes look most like a header: the first seven bytes equal to
    // one, the eighth not 0xFF (a term of 2^56 * 0xFF or more never occurs).
    let lookalike = u64::from_le_bytes([0xFF, b'S', b'L', b'V', 1, 0, 1, 0xFE]);
    for term in [0, 1, 255, u32::MAX as u64, lookalike] {
        unversioned_round_trip(&entry(term, 3));
        unversioned_round_trip(&Vote::<NodeId>::new(term, 2));
        unversioned_round_trip(&log_id(term, 3));
    }
    unversioned_round_trip(&meta());
    unversioned_round_trip(&SnapshotMeta::<NodeId, BasicNode>::default());
    unversioned_round_trip(&applied());
    unversioned_round_trip(&Applied::default());
}

#[test]
fn a_newer_version_is_refused_with_what_to_do() {
    let mut bytes = seal(&entry(1, 1)).unwrap();
    bytes[4..6].copy_from_slice(&(CURRENT + 1).to_le_bytes());
    let err = unseal::<Entry<TypeConfig>>(&bytes, LOC).unwrap_err();
    assert!(matches!(err, FormatError::Newer { found, .. } if found == CURRENT + 1), "{err:?}");
    let msg = err.to_string();
    let want = format!(
        "work_dir {LOC} was written by a newer Sluice (format {}, this build reads up to \
         {CURRENT}): upgrade this binary or restore a backup; nothing was changed",
        CURRENT + 1
    );
    assert!(msg.starts_with(&want), "{msg}");
}

#[test]
fn a_record_of_another_kind_or_a_damaged_payload_is_refused() {
    let vote = seal(&Vote::<NodeId>::new(1, 1)).unwrap();
    let err = unseal::<Entry<TypeConfig>>(&vote, LOC).unwrap_err();
    assert!(err.to_string().contains("header says kind 2, expected 1"), "{err}");
    let mut cut = seal(&applied()).unwrap();
    cut.truncate(12);
    let err = unseal::<Applied>(&cut, LOC).unwrap_err();
    assert!(matches!(err, FormatError::Undecodable { version: CURRENT, .. }), "{err:?}");
    assert!(err.to_string().contains("restore this node's journal"), "{err}");
}

/// A layout change, the way a real one is made (module docs): version 1's type
/// frozen in `v1`, the current type with a new field, and `migrate` converting.
mod v1 {
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    pub struct Worker {
        pub address: String,
        pub uid: u64,
    }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Worker {
    address: String,
    uid: u64,
    zone: Option<String>,
}

impl From<v1::Worker> for Worker {
    fn from(w: v1::Worker) -> Self {
        Worker { address: w.address, uid: w.uid, zone: None }
    }
}

impl Versioned for Worker {
    const KIND: Kind = Kind::Snapshot;
    fn migrate(version: u16, payload: &[u8]) -> Result<Self, bincode::Error> {
        match version {
            1 => decode::<v1::Worker>(payload).map(Worker::from),
            _ => decode(payload),
        }
    }
}

#[test]
fn a_layout_change_migrates_the_older_version() {
    let old = v1::Worker { address: "w:1".into(), uid: 9 };
    let migrated = Worker { address: "w:1".into(), uid: 9, zone: None };
    // As version 1 wrote it (with the header), and as builds before the header did.
    let mut sealed_v1 = header(Kind::Snapshot, 1).to_vec();
    sealed_v1.extend_from_slice(&encode(&old).unwrap());
    let plain_v1 = encode(&old).unwrap();
    // As "version 2" writes it.
    let now = Worker { address: "w:2".into(), uid: 3, zone: Some("a".into()) };
    let mut sealed_v2 = header(Kind::Snapshot, 2).to_vec();
    sealed_v2.extend_from_slice(&encode(&now).unwrap());
    assert_eq!(unseal_up_to::<Worker>(&sealed_v1, 2, LOC).unwrap(), migrated);
    assert_eq!(unseal_up_to::<Worker>(&plain_v1, 2, LOC).unwrap(), migrated);
    assert_eq!(unseal_up_to::<Worker>(&sealed_v2, 2, LOC).unwrap(), now);
    // And the build before the change refuses version 2 rather than misread it.
    let err = unseal_up_to::<Worker>(&sealed_v2, 1, LOC).unwrap_err();
    assert!(matches!(err, FormatError::Newer { found: 2, supported: 1, .. }), "{err:?}");
}

#[tokio::test]
async fn the_journal_holds_the_snapshot_versioned_and_peers_get_the_plain_layout() {
    let (journal, _) = sluice_journal::open("memory://versioned-snapshot").await.unwrap();
    let mut sm = StateMachine::open(journal.clone()).await.unwrap();
    let built = sm.build_snapshot().await.unwrap();
    // What a peer of a build before the envelope decodes: the plain layout.
    let plain: Applied = decode(built.snapshot.get_ref()).unwrap();
    assert_eq!(encode(&plain).unwrap(), *built.snapshot.get_ref());
    let (stored_meta, stored) = journal.read_snapshot().await.unwrap().unwrap();
    assert_eq!(stored[..4], MAGIC);
    assert_eq!(stored_meta[..4], MAGIC);
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.snapshot.get_ref(), built.snapshot.get_ref());
    // A restart reads the versioned snapshot back.
    assert!(StateMachine::open(journal).await.is_ok());
}

#[tokio::test]
async fn check_journal_refuses_a_newer_entry_anywhere_in_the_log() {
    let (journal, _) = sluice_journal::open("memory://versioned-check").await.unwrap();
    let mut newer = seal(&entry(1, 2)).unwrap();
    newer[4..6].copy_from_slice(&(CURRENT + 7).to_le_bytes());
    let ok = seal(&entry(1, 1)).unwrap();
    journal.append(vec![(1, ok.clone().into()), (2, newer.into()), (3, ok.into())]).await.unwrap();
    let err = check_journal(&*journal).await.unwrap_err().to_string();
    assert!(err.contains("newer Sluice") && err.contains("(log entry)"), "{err}");
}

/// The real version 1 → 2 change: a snapshot of version 1 (sealed, unversioned,
/// or from a peer of the previous build) opens with an empty exactly-once
/// section and everything else as it was.
mod layout_v2 {
    use sluice_positions::{RecordSet, UnitRecords};

    use super::*;
    use crate::exactly_once::Progress;
    use crate::raft::applied::decode_peer_snapshot;
    use crate::raft::layout_v1;
    use crate::state::State;

    /// A version-1 snapshot with some state in it, as version 1 encoded it.
    fn v1_snapshot() -> (Applied, Vec<u8>) {
        let mut state = State { next_job_id: 5007, ..State::default() };
        state.jobs_by_name.insert("train".into(), 5003);
        let applied = Applied { state, ..applied() };
        let old = layout_v1::Applied {
            last_applied: applied.last_applied,
            membership: applied.membership.clone(),
            // Version 2 only appends: version 1's state is a prefix of its bytes.
            state: decode::<layout_v1::State>(&encode(&applied.state).unwrap()).unwrap(),
        };
        (applied, encode(&old).unwrap())
    }

    #[test]
    fn a_version_1_snapshot_migrates_with_an_empty_section() {
        let (want, plain) = v1_snapshot();
        let mut sealed = header(Kind::Snapshot, 1).to_vec();
        sealed.extend_from_slice(&plain);
        for bytes in [&sealed, &plain] {
            let got: Applied = unseal(bytes, LOC).unwrap();
            assert_eq!(got.state, want.state);
            assert!(got.state.exactly_once.jobs.is_empty());
            assert_eq!(got.last_applied, want.last_applied);
        }
        // A version-1 body does not decode as version 2 (it is shorter).
        assert!(decode::<Applied>(&plain).is_err());
        // From a peer of the previous build (no header): tried as v2, then v1.
        assert_eq!(decode_peer_snapshot(&plain).unwrap().state, want.state);
    }

    #[test]
    fn a_version_2_snapshot_keeps_the_section_and_a_version_1_peer_reads_the_rest() {
        let (mut applied, _) = v1_snapshot();
        let mut consumed = RecordSet::below(3);
        consumed.insert(sluice_positions::Run::record(5, 0));
        applied.state.exactly_once.jobs.insert(5003, UnitRecords::Counted);
        applied
            .state
            .exactly_once
            .iterations
            .insert(2001, Progress::new(UnitRecords::Counted, consumed));
        let sealed = seal(&applied).unwrap();
        assert_eq!(sealed[4..6], CURRENT.to_le_bytes());
        let back: Applied = unseal(&sealed, LOC).unwrap();
        assert_eq!(back.state, applied.state);
        let body = encode(&applied).unwrap();
        assert_eq!(decode_peer_snapshot(&body).unwrap().state, applied.state);
        // What a version-1 node makes of it: everything but the section.
        let old: layout_v1::Applied = decode(&body).unwrap();
        let mut without = applied.state.clone();
        without.exactly_once = Default::default();
        assert_eq!(State::from(old.state), without);
    }

    /// Version 2 → 3: a version-2 snapshot (sealed or from a peer) opens with
    /// no deterministic orders; a version-3 one keeps them, and a version-2
    /// node reads everything but them.
    #[test]
    fn a_version_2_snapshot_migrates_with_no_orders_and_version_3_keeps_them() {
        use crate::order::Order;
        use crate::raft::layout_v2;
        let (mut applied, _) = v1_snapshot();
        applied.state.exactly_once.jobs.insert(5003, UnitRecords::One);
        let v2 = decode::<layout_v2::Applied>(&encode(&applied).unwrap()).unwrap();
        let plain = encode(&v2).unwrap();
        assert!(decode::<Applied>(&plain).is_err(), "a version-2 body is shorter");
        let mut sealed = header(Kind::Snapshot, 2).to_vec();
        sealed.extend_from_slice(&plain);
        let got: Applied = unseal(&sealed, LOC).unwrap();
        assert_eq!(got.state, applied.state);
        assert_eq!(decode_peer_snapshot(&plain).unwrap().state, applied.state);

        applied.state.exactly_once.orders.insert(5003, Order { seed: 7, consumers: 2 });
        let back: Applied = unseal(&seal(&applied).unwrap(), LOC).unwrap();
        assert_eq!(back.state, applied.state);
        let old: layout_v2::Applied = decode(&encode(&applied).unwrap()).unwrap();
        let mut without = applied.state.clone();
        without.exactly_once.orders.clear();
        assert_eq!(State::from(old.state), without);
    }

    /// Version 3 → 4: `Command` gained `ReportConsumedSpans`; a version-3
    /// snapshot and entry open unchanged, and a journal holding a version-4
    /// record is refused by a version-3 build before it decodes anything.
    #[test]
    fn version_3_records_open_unchanged_and_a_version_3_build_refuses_version_4() {
        let (mut applied, _) = v1_snapshot();
        applied.state.exactly_once.jobs.insert(5003, UnitRecords::One);
        let plain = encode(&applied).unwrap();
        let mut sealed = header(Kind::Snapshot, 3).to_vec();
        sealed.extend_from_slice(&plain);
        let got: Applied = unseal(&sealed, LOC).unwrap();
        assert_eq!(got.state, applied.state);
        let spans = Entry::<TypeConfig> {
            log_id: log_id(4, 11),
            payload: EntryPayload::Normal(Command::ReportConsumedSpans {
                client_id: 7,
                generation: 1,
                runs: vec![],
                firsts: vec![(100, 4_000)],
                unit_ends: vec![],
                lost_tasks_done: vec![],
            }),
        };
        let sealed = seal(&spans).unwrap();
        assert_eq!(sealed[4..6], CURRENT.to_le_bytes());
        let back: Entry<TypeConfig> = unseal(&sealed, LOC).unwrap();
        assert_eq!(encode(&back).unwrap(), encode(&spans).unwrap());
        let err = unseal_up_to::<Entry<TypeConfig>>(&sealed, 3, LOC).map(|_| ()).unwrap_err();
        assert!(matches!(err, FormatError::Newer { found: CURRENT, supported: 3, .. }), "{err:?}");
    }

    /// Version 4 → 5: a version-4 snapshot (sealed or from a peer) opens with
    /// nothing owned; a version-5 one keeps its owners section, a version-4
    /// node reads everything but it, and a version-4 build refuses a journal
    /// that may hold a charged command.
    #[test]
    fn a_version_4_snapshot_migrates_with_no_owners_and_version_5_keeps_them() {
        use crate::owners::DatasetRecord;
        use crate::quotas::{Charge, Quotas};
        use crate::raft::layout_v4;
        let (mut applied, _) = v1_snapshot();
        let v4 = decode::<layout_v4::Applied>(&encode(&applied).unwrap()).unwrap();
        let plain = encode(&v4).unwrap();
        assert!(decode::<Applied>(&plain).is_err(), "a version-4 body is shorter");
        let mut sealed = header(Kind::Snapshot, 4).to_vec();
        sealed.extend_from_slice(&plain);
        let got: Applied = unseal(&sealed, LOC).unwrap();
        assert_eq!(got.state, applied.state);
        assert_eq!(decode_peer_snapshot(&plain).unwrap().state, applied.state);

        let record = DatasetRecord { owner: Some("a".into()), bytes: 9, uses: 2 };
        applied.state.owners.datasets.insert("d".into(), record);
        applied.state.owners.jobs.insert(5003, "a".into());
        let back: Applied = unseal(&seal(&applied).unwrap(), LOC).unwrap();
        assert_eq!(back.state, applied.state);
        let old: layout_v4::Applied = decode(&encode(&applied).unwrap()).unwrap();
        let mut without = applied.state.clone();
        without.owners = Default::default();
        assert_eq!(State::from(old.state), without);

        let charge = Charge { owner: Some("a".into()), bytes: 0, quotas: Quotas::default() };
        let charged = Entry::<TypeConfig> {
            log_id: log_id(4, 12),
            payload: EntryPayload::Normal(Command::Charged {
                charge,
                command: Box::new(Command::ReleaseClient { client_id: 1 }),
            }),
        };
        let sealed = seal(&charged).unwrap();
        let err = unseal_up_to::<Entry<TypeConfig>>(&sealed, 4, LOC).map(|_| ()).unwrap_err();
        assert!(matches!(err, FormatError::Newer { found: 5, supported: 4, .. }), "{err:?}");
    }

    #[test]
    fn version_1_log_entries_decode_as_the_current_command() {
        let plain = encode(&entry(2, 4)).unwrap();
        let mut sealed = header(Kind::Entry, 1).to_vec();
        sealed.extend_from_slice(&plain);
        let got: Entry<TypeConfig> = unseal(&sealed, LOC).unwrap();
        assert_eq!(encode(&got).unwrap(), plain);
    }
}

/// `Worker::active_tasks` is an `Arc` of its set (shared with held heartbeats,
/// `worker_view.rs`): it must encode as the plain set did, byte for byte, so
/// snapshots keep their layout version, and read back as the same set.
#[test]
fn a_workers_shared_task_set_is_encoded_as_the_plain_set() {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use crate::state::Worker;

    /// `Worker` as it was with a plain `BTreeSet` of active tasks.
    #[derive(Serialize)]
    struct PlainWorker {
        address: String,
        worker_uid: u64,
        functions: BTreeSet<String>,
        active_tasks: BTreeSet<u64>,
        lost: bool,
        python_version: Option<String>,
    }
    let tasks: BTreeSet<u64> = (4000..4200).chain([9_000_000_000]).collect();
    let plain = PlainWorker {
        address: "w:1".into(),
        worker_uid: 7,
        functions: BTreeSet::from(["map:square".to_string()]),
        active_tasks: tasks.clone(),
        lost: false,
        python_version: Some("3.11.7".into()),
    };
    let shared = Worker {
        address: plain.address.clone(),
        worker_uid: plain.worker_uid,
        functions: plain.functions.clone(),
        active_tasks: Arc::new(tasks),
        lost: plain.lost,
        python_version: plain.python_version.clone(),
    };
    let bytes = encode(&plain).unwrap();
    assert_eq!(encode(&shared).unwrap(), bytes);
    let back: Worker = decode(&bytes).unwrap();
    assert_eq!(back, shared);
}
