//! openraft's log storage on a [`Journal`].
//!
//! Durability: `append` returns at once with the entries readable (from memory),
//! and acknowledges them (`LogFlushed`) only after the journal's append returned,
//! which is after the fsync (sled, `file://`) or the completed PUT (`s3://`,
//! `gs://`). A single writer task merges every append queued while a write is in
//! flight into the next one, so concurrent proposals share one fsync or PUT (group
//! commit, `group_commit.rs`). Truncate, purge and votes wait until every earlier
//! append is durable, and are durable themselves before they return.
//!
//! Every record is written with its format version (`versioned.rs`) and read
//! back through it, so an older record is migrated and a newer one refused.
//!
//! A purge up to a snapshot being installed from the leader waits until that
//! snapshot is durable, and is refused if its install failed
//! (`snapshot_mark.rs`), so the journal never holds a purge point beyond its
//! snapshot, on which the node could not start.
//!
//! Soft state: `last_log_id` and `last_purged` are caches of what the journal holds
//! plus the appends in flight, rebuilt at open.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use sluice_journal::Journal;

use super::group_commit::{self, Op, Pending};
use super::snapshot_mark::{SnapshotMark, INSTALL_WAIT};
use super::versioned::{seal, unseal, Kind, Versioned};
use super::{NodeId, TypeConfig};

// What the log store persists, and as which kind (`versioned.rs`): version 1 is
// today's layout of each.
impl Versioned for Entry<TypeConfig> {
    const KIND: Kind = Kind::Entry;
}
impl Versioned for Vote<NodeId> {
    const KIND: Kind = Kind::Vote;
}
/// The purge marker: the last purged log id.
impl Versioned for LogId<NodeId> {
    const KIND: Kind = Kind::PurgeMarker;
}

#[derive(Clone)]
pub struct LogStore {
    journal: Arc<dyn Journal>,
    // A std Mutex: two small fields, never held across an await.
    marks: Arc<Mutex<Marks>>,
    /// Appended, not yet durable, readable.
    pending: Pending,
    writer: tokio::sync::mpsc::Sender<Op>,
    /// What a purge waits for (`gated_by`); none in the storage suite, whose
    /// purges have no snapshot behind them.
    snapshots: Option<SnapshotMark>,
}

#[derive(Clone, Copy, Default)]
struct Marks {
    last_log_id: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
}

fn io_read(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_logs(AnyError::new(&e)).into()
}
fn io_write(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl LogStore {
    /// Reads the journal's marks: the last entry's log id and the purge marker.
    pub async fn open(journal: Arc<dyn Journal>) -> Result<Self, StorageError<NodeId>> {
        let state = journal.state().await.map_err(io_read)?;
        let location = journal.location();
        let last_purged: Option<LogId<NodeId>> = match &state.purged_marker {
            Some(m) => Some(unseal(m, &location).map_err(io_read)?),
            None => None,
        };
        let last_log_id = match state.last_index {
            Some(i) => {
                let entries = journal.read(i, i + 1).await.map_err(io_read)?;
                let (_, bytes) = entries.first().ok_or_else(|| {
                    io_read(std::io::Error::other(format!(
                        "journal {} says its last entry is {i} but has none there",
                        journal.location()
                    )))
                })?;
                let entry: Entry<TypeConfig> = unseal(bytes, &location).map_err(io_read)?;
                Some(entry.log_id)
            }
            None => last_purged,
        };
        let marks = Marks { last_log_id, last_purged };
        let pending = Pending::default();
        let writer = group_commit::start(journal.clone(), pending.clone());
        let marks = Arc::new(Mutex::new(marks));
        Ok(LogStore { journal, marks, pending, writer, snapshots: None })
    }

    /// Purges wait for the snapshot install that covers them (`snapshot_mark.rs`).
    pub fn gated_by(mut self, snapshots: SnapshotMark) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    /// The purge point the journal holds (for the start-up check in `core.rs`).
    pub fn last_purged(&self) -> Option<LogId<NodeId>> {
        self.marks().last_purged
    }

    /// Waits until every append queued before it is durable.
    async fn barrier(&self) -> Result<(), StorageError<NodeId>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stopped = || io_write(std::io::Error::other("the log writer stopped"));
        self.writer.send(Op::Barrier(tx)).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?.map_err(|e| io_write(std::io::Error::other(e)))
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let from = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i + 1,
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(i) => i + 1,
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        // Pending first: an entry flushed between the two reads is then in both
        // (merged by index), never in neither.
        let mut all: std::collections::BTreeMap<u64, Bytes> = group_commit::lock(&self.pending)
            .range(from..to)
            .map(|(i, b)| (*i, b.clone()))
            .collect();
        let raw = self.journal.read(from, to).await.map_err(io_read)?;
        all.extend(raw);
        let mut out = Vec::with_capacity(all.len());
        let location = self.journal.location();
        for b in all.values() {
            out.push(unseal(b, &location).map_err(io_read)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let m = *self.marks();
        Ok(LogState { last_purged_log_id: m.last_purged, last_log_id: m.last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.barrier().await?;
        let bytes = seal(vote).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.journal
            .save_vote(Bytes::from(bytes))
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let vote = self
            .journal
            .read_vote()
            .await
            .map_err(|e| StorageIOError::read_vote(AnyError::new(&e)))?;
        match vote {
            Some(b) => Ok(Some(
                unseal(&b, &self.journal.location())
                    .map_err(|e| StorageIOError::read_vote(AnyError::new(&e)))?,
            )),
            None => Ok(None),
        }
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Vec::new();
        let mut last = None;
        let purged = self.marks().last_purged.map(|l| l.index);
        for entry in entries {
            // An entry at or below the purge point is already reflected in the
            // applied state (openraft purges only applied entries): nothing to keep.
            if purged.is_some_and(|p| entry.log_id.index <= p) {
                continue;
            }
            last = Some(entry.log_id);
            batch.push((entry.log_id.index, Bytes::from(seal(&entry).map_err(io_write)?)));
        }
        // Readable now, durable when the writer calls back (group commit).
        group_commit::lock(&self.pending).extend(batch.iter().cloned());
        self.marks().last_log_id = last;
        self.writer
            .send(Op::Append { entries: batch, callback })
            .await
            .map_err(|_| io_write(std::io::Error::other("the log writer stopped")))
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.barrier().await?;
        self.journal.truncate(log_id.index).await.map_err(io_write)?;
        let previous = if log_id.index == 0 {
            None
        } else {
            let raw = self.journal.read(log_id.index - 1, log_id.index).await.map_err(io_read)?;
            match raw.first() {
                Some((_, b)) => {
                    let location = self.journal.location();
                    Some(unseal::<Entry<TypeConfig>>(b, &location).map_err(io_read)?.log_id)
                }
                None => None,
            }
        };
        let mut m = self.marks();
        m.last_log_id = previous.or(m.last_purged);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        if let Some(snapshots) = &self.snapshots {
            snapshots.covers(log_id, INSTALL_WAIT).await.map_err(io_write)?;
        }
        self.barrier().await?;
        let marker = Bytes::from(seal(&log_id).map_err(io_write)?);
        self.journal.purge(log_id.index, marker).await.map_err(io_write)?;
        let mut m = self.marks();
        m.last_purged = Some(log_id);
        if m.last_log_id < Some(log_id) {
            m.last_log_id = Some(log_id);
        }
        Ok(())
    }
}
