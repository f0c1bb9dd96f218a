//! Versions of what the dispatcher persists: every log entry, vote, purge marker,
//! snapshot meta and snapshot the dispatcher hands its journal is wrapped in an
//! 8-byte header naming the payload's kind and format version, so a later build
//! knows which layout it is reading, converts an older one to the current types
//! (a *migration*), and refuses a newer one with a message that says what to do,
//! before anything is written (`check_journal`, run at start on a read-only
//! handle).
//!
//! ```text
//!  header: 0xFF 'S' 'L' 'V' | u16 version (LE) | u8 kind | 0xFF      then the bincode payload (codec.rs)
//! ```
//!
//! # Versions (bump [`CURRENT`] and add a line when a persisted layout changes)
//! - **1**: `Command`, `State` (in `applied::Applied`) and openraft 0.9's
//!   `Entry`, `Vote`, `LogId` and `SnapshotMeta`, as bincode (codec.rs). Builds
//!   before this header wrote the same layouts without it ("unversioned"); they
//!   are read as version 1 (below).
//! - **2**: `State` gains its trailing `exactly_once` section (issue 17,
//!   docs/exactly-once.md) and `Command` / `SplitAnswer` gain variants at their
//!   ends. A version-1 snapshot is decoded as the frozen `layout_v1::Applied` and
//!   migrated (an empty section); a version-1 log entry, vote, purge marker or
//!   snapshot meta decodes as the current type unchanged (appended enum variants
//!   keep the indices of the old ones).
//! - **3**: the exactly-once section gains its trailing `orders` (deterministic
//!   order, docs/exactly-once.md) and `Command` a variant at its end. A version-2
//!   snapshot is decoded as the frozen `layout_v2::Applied` and migrated (no
//!   orders); the other kinds decode unchanged, as for version 2.
//! - **4**: `Command` gains `ReportConsumedSpans` at its end (consumed reports
//!   with spans of first records); `State` is unchanged, so every kind of
//!   version 3 decodes as it is. The bump makes a build of version 3 refuse a
//!   journal that may hold the new command, with the message above, instead of
//!   failing to decode an entry.
//! - **5**: `State` gains its trailing `owners` section (quotas per client
//!   identity, `owners.rs`) and `Command` the variants `Charged` and
//!   `ForgetDataset` at its end. A version-3 or -4 snapshot is decoded as the
//!   frozen `layout_v4::Applied` and migrated (nothing owned); every other kind
//!   decodes unchanged.
//!
//! # Unversioned records (written before the header existed)
//! A record that does not start with the header is read as version 1. That is
//! unambiguous: the header's first byte is 0xFF and its eighth is 0xFF too. The
//! unversioned snapshot and snapshot meta begin with an `Option` tag (0 or 1); the
//! unversioned entry, vote and purge marker begin with a Raft term as a
//! little-endian u64, whose eighth byte is 0xFF only for a term of at least
//! 0xFF00_0000_0000_0000, and openraft's term grows by one per election from 0.
//! So a journal written by an older build needs no rewrite: its records keep
//! being read as version 1, and new records carry the header.
//!
//! # How a layout change is handled
//! Freeze the old types in a module of their own (`v1::State`, ...), bump
//! [`CURRENT`], and make the kind's [`Versioned::migrate`] decode version 1 into the
//! frozen types and convert them to the current ones. The test module shows it
//! with a test-only v1 → v2 change; `tests/upgrade_fixtures.rs` opens the
//! committed work_dirs of every earlier version with this build.
//!
//! # What is not enveloped
//! Raft RPCs between nodes (entries in AppendEntries, the snapshot in
//! InstallSnapshot) carry the current layout without the header, exactly as
//! builds before it did. Across the version 1 → 2 change:
//! - a snapshot received from a peer that does not decode as version 2 is
//!   decoded as version 1 and migrated (`applied::decode_peer_snapshot`):
//!   version 2 only appends to version 1, so a version-1 body is too short to
//!   decode as version 2, and never misread as it;
//! - a version-1 node decodes a version-2 snapshot as version 1 (bincode here
//!   allows trailing bytes): it loses only the exactly-once section;
//! - log entries of commands that exist in version 1 are the same bytes; a new
//!   command (exactly-once jobs) does not decode on a version-1 node, so a group
//!   is upgraded whole before exactly-once is used (docs/operations-upgrades.md).

use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_journal::Journal;

use super::codec::{decode, encode};

/// The payload format this build writes, and the newest it reads.
pub const CURRENT: u16 = 5;
/// The oldest payload format this build reads.
pub const OLDEST: u16 = 1;

const HEADER_LEN: usize = 8;
const MAGIC: [u8; 4] = [0xFF, b'S', b'L', b'V'];
const END: u8 = 0xFF;

/// What a persisted record is; written into its header so one record is never
/// decoded as another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Entry = 1,
    Vote = 2,
    PurgeMarker = 3,
    SnapshotMeta = 4,
    Snapshot = 5,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Entry => "log entry",
            Kind::Vote => "vote",
            Kind::PurgeMarker => "purge marker",
            Kind::SnapshotMeta => "snapshot meta",
            Kind::Snapshot => "snapshot",
        }
    }
}

/// Why a persisted record could not be read. Each names the work_dir's journal
/// and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Written by a newer build: refused before anything is written.
    #[error(
        "work_dir {location} was written by a newer Sluice (format {found}, this build reads \
         up to {supported}): upgrade this binary or restore a backup; nothing was changed \
         ({what})"
    )]
    Newer { location: String, what: &'static str, found: u16, supported: u16 },
    /// Written in a format this build no longer reads.
    #[error(
        "work_dir {location} was written by an older Sluice (format {found}, this build reads \
         {oldest} to {supported}): open it with an intermediate release first (see \
         docs/operations-upgrades.md); nothing was changed ({what})"
    )]
    Older { location: String, what: &'static str, found: u16, oldest: u16, supported: u16 },
    /// The header names another kind of record, or the payload does not decode.
    #[error(
        "work_dir {location}: a {what} of format {version} does not decode ({reason}); \
         restore this node's journal from a backup, or delete it and let the node rejoin"
    )]
    Undecodable { location: String, what: &'static str, version: u16, reason: String },
}

/// A persisted type: its kind, and how each readable version becomes it.
/// Implemented next to where each is stored (`log_store.rs`, `state_machine.rs`).
pub trait Versioned: Serialize + DeserializeOwned {
    const KIND: Kind;

    /// The current type from `payload` written at `version` (`OLDEST..=CURRENT`).
    /// The default decodes every version as the current layout: right for the
    /// kinds whose layout every readable version shares (entries, votes, purge
    /// markers, snapshot metas); a kind whose layout changed overrides this
    /// (the snapshot, `state_machine.rs`).
    fn migrate(version: u16, payload: &[u8]) -> Result<Self, bincode::Error> {
        debug_assert!((OLDEST..=CURRENT).contains(&version));
        decode(payload)
    }
}

// The persisted types implement `Versioned` where they are stored: log entries,
// votes and purge markers in `log_store.rs`, snapshots and their meta in
// `state_machine.rs` (so this module depends on nothing of theirs).

/// The header of a `kind` record at `version`.
fn header(kind: Kind, version: u16) -> [u8; HEADER_LEN] {
    let v = version.to_le_bytes();
    [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], v[0], v[1], kind as u8, END]
}

/// `value` as this build persists it: the header at [`CURRENT`], then its bincode.
pub fn seal<T: Versioned>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    Ok(seal_encoded(T::KIND, &encode(value)?))
}

/// [`seal`] of a value already encoded in the current layout (a snapshot, which
/// is also sent to peers as is).
pub fn seal_encoded(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&header(kind, CURRENT));
    out.extend_from_slice(payload);
    out
}

/// The version of a record of `kind` and its payload; an unversioned record is
/// version 1 (module docs). Refuses a kind mismatch and versions outside
/// `OLDEST..=supported`.
fn open<'a>(
    kind: Kind,
    bytes: &'a [u8],
    supported: u16,
    location: &str,
) -> Result<(u16, &'a [u8]), FormatError> {
    let what = kind.name();
    let Some((head, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Ok((1, bytes));
    };
    if head[..4] != MAGIC || head[7] != END {
        return Ok((1, bytes));
    }
    let version = u16::from_le_bytes([head[4], head[5]]);
    let location = location.to_string();
    if version > supported {
        return Err(FormatError::Newer { location, what, found: version, supported });
    }
    if version < OLDEST {
        return Err(FormatError::Older {
            location,
            what,
            found: version,
            oldest: OLDEST,
            supported,
        });
    }
    if head[6] != kind as u8 {
        let reason = format!("its header says kind {}, expected {}", head[6], kind as u8);
        return Err(FormatError::Undecodable { location, what, version, reason });
    }
    Ok((version, payload))
}

/// Decodes a record this build or an earlier one persisted, migrating it to the
/// current type. `location` names the journal in errors.
pub fn unseal<T: Versioned>(bytes: &[u8], location: &str) -> Result<T, FormatError> {
    unseal_up_to(bytes, CURRENT, location)
}

/// [`unseal`] reading versions up to `supported` (tests play a later build).
fn unseal_up_to<T: Versioned>(
    bytes: &[u8],
    supported: u16,
    location: &str,
) -> Result<T, FormatError> {
    let (version, payload) = open(T::KIND, bytes, supported, location)?;
    T::migrate(version, payload).map_err(|e| FormatError::Undecodable {
        location: location.to_string(),
        what: T::KIND.name(),
        version,
        reason: e.to_string(),
    })
}

/// Checks that this build reads every record of `journal` (opened read-only):
/// the vote, the purge marker, the snapshot and every log entry's header. Run at
/// start, before the journal is opened for writing, so a work_dir from a newer
/// build is refused unchanged.
pub async fn check_journal(journal: &dyn Journal) -> Result<(), CheckError> {
    let location = journal.location();
    let check = |kind: Kind, bytes: &[u8]| open(kind, bytes, CURRENT, &location).map(|_| ());
    if let Some(vote) = journal.read_vote().await? {
        check(Kind::Vote, &vote)?;
    }
    let state = journal.state().await?;
    if let Some(marker) = &state.purged_marker {
        check(Kind::PurgeMarker, marker)?;
    }
    if let Some((meta, data)) = journal.read_snapshot().await? {
        check(Kind::SnapshotMeta, &meta)?;
        check(Kind::Snapshot, &data)?;
    }
    if let (Some(first), Some(last)) = (state.first_index, state.last_index) {
        for (_, entry) in journal.read(first, last + 1).await? {
            check(Kind::Entry, &entry)?;
        }
    }
    Ok(())
}

/// [`check_journal`] on a read-only handle of the journal at `location`, closed
/// again before this returns (so the caller may open it for writing).
pub async fn check_work_dir(
    location: &str,
    options: &sluice_journal::OpenOptions,
) -> Result<(), CheckError> {
    let read_only = sluice_journal::OpenOptions { read_only: true, ..options.clone() };
    let (journal, _) = sluice_journal::open_with(location, &read_only).await?;
    let checked = check_journal(&*journal).await;
    drop(journal);
    // A sled handle's threads let go of the directory's lock shortly after the drop.
    sluice_journal::wait_closed(location, std::time::Duration::from_secs(10)).await;
    checked
}

/// Why [`check_journal`] refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Journal(#[from] sluice_journal::JournalError),
}

#[cfg(test)]
#[path = "versioned_tests.rs"]
mod tests;
