//! openraft's state machine around the pure [`crate::apply`].
//!
//! The state itself lives in memory; what makes it durable is the log plus the
//! latest snapshot in the journal. A snapshot is the whole [`State`] with the last
//! applied log id and membership; openraft takes one every `snapshot_every`
//! entries and then purges the log before it, so a restart replays at most that
//! many entries after loading the snapshot, however long the history.
//!
//! In the journal, the snapshot and its meta carry their format version
//! (`versioned.rs`); between nodes (InstallSnapshot) the snapshot is the plain
//! current layout, as older builds send and expect it.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use sluice_journal::Journal;
use tokio::sync::watch;

use super::applied::check_snapshot;
pub use super::applied::Applied;
use super::codec::{encode, encode_with_capacity, MAX_SNAPSHOT_BYTES};
use super::snapshot_mark::SnapshotMark;
use super::versioned::{seal, seal_encoded, unseal, Kind, Versioned};
use super::{CommandResult, NodeId, TypeConfig};

impl Versioned for SnapshotMeta<NodeId, BasicNode> {
    const KIND: Kind = Kind::SnapshotMeta;
}

/// Shared by the state machine (writer) and the RPC handlers (readers). A std
/// RwLock: `apply` and reads are short and synchronous, never across an await.
///
/// `applied` publishes the last applied log index, sent after the lock is
/// released. `views` publishes the views generation: it moves only with a batch
/// that may change a heartbeat's answer (`Command::may_change_views`) or an
/// installed snapshot, so a held heartbeat (`long_poll.rs`) wakes for those and
/// not for every grant. The generation is counted inside the write lock
/// (`generation`), so a reader that reads it under the read lock gets the
/// generation of the state it reads (`client_view.rs` caches digests by it); the
/// watch is sent after the lock is released, so a waiter woken by it reads the
/// new state. Soft state: both start at 0 and follow `apply` and
/// `install_snapshot`.
///
/// `encoding` keeps a writer from ever *waiting* on the std lock while a
/// snapshot holds it for reading. The std RwLock queues new readers behind a
/// waiting writer; `apply` waiting for the write lock while a snapshot of the 30
/// MiB state of 2,000 workers was encoded (260 ms) blocked every handler's read,
/// so both runtime threads of the leader stopped, its Raft heartbeats with them,
/// and the followers (150–300 ms election timeout) elected a new leader (the
/// scale bench). So a snapshot holds `encoding` for reading while it copies the
/// state (it encodes the copy after letting go: `build_snapshot`), and a writer
/// takes it for writing first, awaiting (its thread keeps serving) until the copy
/// is done; only then does it take the std lock, which no snapshot holds by then.
/// Reads never touch `encoding`.
#[derive(Clone)]
pub struct Shared {
    data: Arc<RwLock<Applied>>,
    encoding: Arc<tokio::sync::RwLock<()>>,
    /// Writes that found a snapshot copying the state and waited for it.
    waited_for_snapshots: Arc<AtomicU64>,
    applied: Arc<watch::Sender<u64>>,
    generation: Arc<AtomicU64>,
    views: Arc<watch::Sender<u64>>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            data: Arc::default(),
            encoding: Arc::default(),
            waited_for_snapshots: Arc::default(),
            applied: Arc::new(watch::channel(0).0),
            generation: Arc::default(),
            views: Arc::new(watch::channel(0).0),
        }
    }
}

impl Shared {
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> RwLockWriteGuard<'_, Applied> {
        self.data.write().unwrap_or_else(|p| p.into_inner())
    }
    /// A writer's turn: once no snapshot is copying the state (see `encoding`).
    async fn turn_to_write(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        match self.encoding.try_write() {
            Ok(turn) => turn,
            Err(_) => {
                self.waited_for_snapshots.fetch_add(1, Ordering::Relaxed);
                self.encoding.write().await
            }
        }
    }
    /// Changes whenever the state does (after the change is visible to `read`).
    pub fn applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }
    fn publish_applied(&self) {
        let index = self.read().last_applied.map_or(0, |l| l.index);
        self.applied.send_replace(index);
    }
    /// Changes whenever a heartbeat's answer may have (after the change is
    /// visible to `read`): the views generation.
    pub fn views(&self) -> watch::Receiver<u64> {
        self.views.subscribe()
    }
    /// The views generation of the state `guard` reads (call with the guard held).
    pub fn generation(&self, _guard: &RwLockReadGuard<'_, Applied>) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// Counts a views change; called with the write lock held.
    fn views_changed(&self, _guard: &RwLockWriteGuard<'_, Applied>) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
    fn publish_views(&self, generation: u64) {
        self.views.send_replace(generation);
    }
}

#[derive(Clone)]
pub struct StateMachine {
    data: Shared,
    journal: Arc<dyn Journal>,
    snapshots_built: Arc<AtomicU64>,
    /// The size of the last snapshot built (the next one's buffer).
    last_snapshot_bytes: Arc<AtomicUsize>,
    encode_hook: EncodeHook,
    /// How far the journal's snapshot covers the log (`snapshot_mark.rs`).
    mark: SnapshotMark,
}

/// Runs between a snapshot's copy of the state and its encoding: nothing, but a
/// test holds the encoding there to show that applies go on meanwhile.
#[derive(Clone, Default)]
struct EncodeHook(Option<Arc<dyn Fn() + Send + Sync>>);

impl EncodeHook {
    fn before_encoding(&self) {
        if let Some(hook) = &self.0 {
            hook()
        }
    }
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(AnyError::new(&e)).into()
}
fn snap_write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, AnyError::new(&e)).into()
}
fn snap_read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_snapshot(None, AnyError::new(&e)).into()
}

impl StateMachine {
    /// Loads the latest snapshot from the journal, if any.
    pub async fn open(journal: Arc<dyn Journal>) -> Result<Self, StorageError<NodeId>> {
        let data = Shared::default();
        if let Some((_meta, body)) = journal.read_snapshot().await.map_err(snap_read_err)? {
            *data.write() = unseal(&body, &journal.location()).map_err(snap_read_err)?;
        }
        let mark = SnapshotMark::new(data.read().last_applied);
        Ok(StateMachine {
            data,
            journal,
            snapshots_built: Arc::new(AtomicU64::new(0)),
            last_snapshot_bytes: Arc::default(),
            encode_hook: EncodeHook::default(),
            mark,
        })
    }

    pub fn shared(&self) -> Shared {
        self.data.clone()
    }

    /// How far the journal's snapshot covers the log: for the log store's
    /// purge and the peer service (`snapshot_mark.rs`).
    pub fn snapshot_mark(&self) -> SnapshotMark {
        self.mark.clone()
    }

    /// `install_snapshot` up to the journal write: checked against its meta
    /// (`check_snapshot`, as the peer service did), then durable.
    async fn save_installed(
        &self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        body: &[u8],
    ) -> Result<Applied, StorageError<NodeId>> {
        let applied = check_snapshot(meta, body).map_err(sm_err)?;
        // Stored as this build's layout (the body may be a version-1 peer's).
        let body = encode(&applied).map_err(snap_write_err)?;
        // Durable first: a crash after this keeps the snapshot the log was cut at.
        let meta_bytes = seal(meta).map_err(snap_write_err)?;
        let stored = seal_encoded(Kind::Snapshot, &body);
        self.journal
            .save_snapshot(Bytes::from(meta_bytes), Bytes::from(stored))
            .await
            .map_err(snap_write_err)?;
        Ok(applied)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        // The state is copied under its read lock and encoded from the copy, so
        // `apply` waits only for the copy: the task map is persistent
        // (`state::TaskMap`), so the copy of the 30 MiB state of 2,000 workers and
        // 200 jobs is a few milliseconds, where encoding it under the lock stopped
        // every apply, and so every grant, for 33-300 ms (the scale bench). During
        // the copy `apply` waits on `encoding`, not on the lock, and both run off
        // the runtime's threads, which keep serving reads. Timed for the log line
        // (the scale bench reads it).
        let started = std::time::Instant::now();
        let data = self.data.clone();
        // One pass, into a buffer the size of the last snapshot (plus an eighth).
        let capacity = self.last_snapshot_bytes.load(Ordering::Relaxed);
        let capacity = capacity + capacity / 8;
        // Writers wait for this (asynchronously) instead of on the std lock.
        let encoding = self.data.encoding.clone().read_owned().await;
        let hook = self.encode_hook.clone();
        let (body, last_applied, membership, locked) = tokio::task::spawn_blocking(move || {
            let copy = {
                let d = data.read();
                d.clone()
            };
            drop(encoding);
            let locked = started.elapsed();
            hook.before_encoding();
            encode_with_capacity(&copy, capacity)
                .map(|body| (body, copy.last_applied, copy.membership.clone(), locked))
        })
        .await
        .map_err(snap_write_err)?
        .map_err(snap_write_err)?;
        self.last_snapshot_bytes.store(body.len(), Ordering::Relaxed);
        if body.len() as u64 > MAX_SNAPSHOT_BYTES {
            tracing::warn!(
                bytes = body.len(),
                max = MAX_SNAPSHOT_BYTES,
                "this snapshot is larger than a follower takes: a follower that needs it \
                 to catch up will refuse it (MAX_SNAPSHOT_BYTES)"
            );
        }
        let n = self.snapshots_built.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{n}", l.leader_id, l.index),
            None => format!("empty-{n}"),
        };
        let meta =
            SnapshotMeta { last_log_id: last_applied, last_membership: membership, snapshot_id };
        let encoded = started.elapsed();
        let meta_bytes = seal(&meta).map_err(snap_write_err)?;
        let stored = seal_encoded(Kind::Snapshot, &body);
        self.journal
            .save_snapshot(Bytes::from(meta_bytes), Bytes::from(stored))
            .await
            .map_err(snap_write_err)?;
        self.mark.saved(last_applied);
        tracing::info!(
            index = ?last_applied.map(|l| l.index),
            bytes = body.len(),
            lock_ms = locked.as_secs_f64() * 1e3,
            encode_ms = encoded.as_secs_f64() * 1e3,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "snapshot saved"
        );
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(body)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let d = self.data.read();
        Ok((d.last_applied, d.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // A snapshot being encoded holds the read lock: wait here, not on it.
        let _turn = self.data.turn_to_write().await;
        let mut d = self.data.write();
        let mut out = Vec::new();
        let mut views_changed = false;
        for entry in entries {
            d.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => out.push(None),
                EntryPayload::Membership(m) => {
                    d.membership = StoredMembership::new(Some(entry.log_id), m);
                    out.push(None);
                }
                EntryPayload::Normal(cmd) => {
                    views_changed |= cmd.may_change_views();
                    out.push(Some(crate::apply::apply(&mut d.state, cmd)))
                }
            }
        }
        let generation = views_changed.then(|| self.data.views_changed(&d));
        drop(d);
        self.data.publish_applied();
        if let Some(generation) = generation {
            self.data.publish_views(generation);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        // openraft has already issued the purge up to `meta`'s last log id; the
        // log store holds it until the snapshot is durable, and drops it if this
        // fails (`snapshot_mark.rs`), so a failure here leaves the journal on its
        // previous snapshot and log, from which the node starts again.
        let body = snapshot.into_inner();
        let applied = match self.save_installed(meta, &body).await {
            Ok(applied) => applied,
            Err(e) => {
                self.mark.failed(meta.last_log_id);
                tracing::error!(
                    index = ?meta.last_log_id.map(|l| l.index),
                    "installing the leader's snapshot failed, the log is kept: {e}"
                );
                return Err(e);
            }
        };
        self.mark.saved(meta.last_log_id);
        let generation = {
            let _turn = self.data.turn_to_write().await;
            let mut d = self.data.write();
            *d = applied;
            self.data.views_changed(&d)
        };
        self.data.publish_applied();
        self.data.publish_views(generation);
        tracing::info!(index = ?meta.last_log_id.map(|l| l.index), "snapshot installed from the leader");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        match self.journal.read_snapshot().await.map_err(snap_read_err)? {
            Some((meta, body)) => {
                // Sent to a peer as the plain current layout: decoded (migrated if
                // older) and encoded again.
                let location = self.journal.location();
                let meta: SnapshotMeta<NodeId, BasicNode> =
                    unseal(&meta, &location).map_err(snap_read_err)?;
                let applied: Applied = unseal(&body, &location).map_err(snap_read_err)?;
                let body = encode(&applied).map_err(snap_read_err)?;
                Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(body)) }))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
#[path = "state_machine_tests.rs"]
mod tests;
