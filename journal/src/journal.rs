//! The [`Journal`] trait and its durability contract.
//!
//! A journal is what Raft needs from a disk: an append-only log of opaque entries indexed by
//! `u64`, the vote, and the latest snapshot. It knows nothing about Raft: the glue in the
//! dispatcher encodes log ids, votes and snapshot metadata into the opaque byte strings.
//!
//! # The contract, in one paragraph
//! Every mutating method is **durable when it returns `Ok`**: the bytes are fsync'd (sled) or
//! the PUT has completed (object store), so a crash or power loss right after cannot lose them.
//! A crash *during* a call may lose that call's effect, wholly or (for a batch) from some entry
//! on; it never loses an earlier acknowledged call's effect, and never leaves a hole: after
//! restart the log is a contiguous prefix of what was being written. That is exactly what Raft
//! assumes: an entry, a vote or a snapshot counts only once the storage acknowledged it, and
//! anything unacknowledged may be missing after a restart (the leader re-sends it).
//! After an `Err`, the outcome of that call is unknown: the glue must treat the error as fatal
//! to the node (openraft does) and reopen, which recovers what is durable.

use bytes::Bytes;

use crate::JournalError;

/// Durable storage for a Raft node: the log, the vote and the snapshot.
///
/// Implementations are `Send + Sync`; calls may come from several tasks at once. Writes are
/// serialized internally (one at a time, in call order of acquiring the internal writer lock);
/// reads do not wait for a write in progress and see either its before or its after.
#[async_trait::async_trait]
pub trait Journal: Send + Sync + 'static {
    /// What is durable now (as recovered at open, then as changed by this handle's acknowledged
    /// writes). Never performs I/O on the object-store backend.
    async fn state(&self) -> Result<LogState, JournalError>;

    /// Appends entries whose indexes are contiguous and start at `state().last_index + 1` (or at
    /// `purged_index + 1` when the log is empty after a purge; any index when nothing was ever
    /// written or purged). An empty batch is a no-op.
    ///
    /// **Durable** (fsync'd / PUT completed) when it returns `Ok`. One call = one durable write:
    /// the caller batches (group commit).
    ///
    /// **A crash during the call** may lose the whole batch, never a part of it: both backends
    /// write it atomically (one sled batch, one PUT). So a record that fails its checksum is
    /// never a torn write, even at the tail: it is `Corrupt`, and the journal does not open.
    /// Safe for Raft because none of it was acknowledged: a follower re-requests missing
    /// entries, a leader re-replicates them.
    ///
    /// Errors: `InvalidArgument` for a non-contiguous batch (nothing written); `Fenced` when
    /// another writer owns the journal.
    async fn append(&self, entries: Vec<(u64, Bytes)>) -> Result<(), JournalError>;

    /// Entries with `from <= index < to` that exist, in order. May include entries of an append
    /// that has not returned yet (Raft never asks for those).
    async fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, Bytes)>, JournalError>;

    /// Removes every entry with `index >= from` (Raft's conflicting suffix). **Durable** on
    /// return. Truncating at or below `purged_index` is an `InvalidArgument` (Raft never
    /// truncates committed entries, and purged ones are committed).
    ///
    /// **A crash during the call** leaves the suffix either all present or all gone; if present,
    /// Raft finds the same conflict again after restart and truncates again.
    async fn truncate(&self, from: u64) -> Result<(), JournalError>;

    /// Removes every entry with `index <= upto` and records `marker` (opaque; the glue stores
    /// the purged log id there). `upto` may be beyond the last entry (after a snapshot install);
    /// the next append then starts at `upto + 1`. `upto` below the current `purged_index` is an
    /// `InvalidArgument`. **Durable** on return; space may be reclaimed later.
    ///
    /// **A crash during the call** leaves either the old purge point (entries still there,
    /// which is harmless: they are covered by a snapshot and Raft purges again) or the new one.
    async fn purge(&self, upto: u64, marker: Bytes) -> Result<(), JournalError>;

    /// Replaces the previous vote. **Durable** on return.
    ///
    /// **A crash during the call** leaves the old or the new vote. Safe because Raft only acts
    /// on a vote (answers a RequestVote, becomes a candidate) after this returns.
    async fn save_vote(&self, vote: Bytes) -> Result<(), JournalError>;

    /// The last saved vote, if any.
    async fn read_vote(&self) -> Result<Option<Bytes>, JournalError>;

    /// Replaces the previous snapshot (older ones may be deleted). `meta` and `data` are stored
    /// together, atomically. **Durable** on return.
    ///
    /// **A crash during the call** leaves the old or the new snapshot, never a mix. Safe
    /// because the glue purges the log only after this returns.
    async fn save_snapshot(&self, meta: Bytes, data: Bytes) -> Result<(), JournalError>;

    /// The last saved snapshot as `(meta, data)`, if any.
    async fn read_snapshot(&self) -> Result<Option<(Bytes, Bytes)>, JournalError>;

    /// Where it lives, for messages ("sled:/path", "s3://bucket/prefix").
    fn location(&self) -> String;
}

/// The durable marks of the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    /// The highest index ever purged (entries `<= purged_index` are gone).
    pub purged_index: Option<u64>,
    /// The marker recorded by the last purge.
    pub purged_marker: Option<Bytes>,
    /// The first entry present.
    pub first_index: Option<u64>,
    /// The last entry present.
    pub last_index: Option<u64>,
}

/// What recovery found and did at open.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// Entries present after recovery.
    pub entries: u64,
}

impl LogState {
    /// Checks that `entries` may be appended now; returns the batch's last index.
    pub(crate) fn check_append(&self, entries: &[(u64, Bytes)]) -> Result<u64, JournalError> {
        let first = entries[0].0;
        let expected = match (self.last_index, self.purged_index) {
            (Some(last), _) => Some(last + 1),
            (None, Some(purged)) => Some(purged + 1),
            (None, None) => None,
        };
        if let Some(expected) = expected {
            if first != expected {
                return Err(JournalError::InvalidArgument(format!(
                    "append must start at index {expected}, got {first} (state {self:?})"
                )));
            }
        }
        for pair in entries.windows(2) {
            if pair[1].0 != pair[0].0 + 1 {
                return Err(JournalError::InvalidArgument(format!(
                    "append batch is not contiguous: {} follows {}",
                    pair[1].0, pair[0].0
                )));
            }
        }
        Ok(entries[entries.len() - 1].0)
    }

    /// Checks a truncate at `from`.
    pub(crate) fn check_truncate(&self, from: u64) -> Result<(), JournalError> {
        match self.purged_index {
            Some(purged) if from <= purged => Err(JournalError::InvalidArgument(format!(
                "truncate({from}) would cut purged entries (purged_index {purged})"
            ))),
            _ => Ok(()),
        }
    }

    /// Checks a purge up to `upto`.
    pub(crate) fn check_purge(&self, upto: u64) -> Result<(), JournalError> {
        match self.purged_index {
            Some(purged) if upto < purged => Err(JournalError::InvalidArgument(format!(
                "purge({upto}) goes backwards (purged_index {purged})"
            ))),
            _ => Ok(()),
        }
    }
}
