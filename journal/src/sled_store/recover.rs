//! Opening a sled journal: sled's own open, then verification of every value.
//!
//! Why verify everything at open: sled checksums its own pages, but a value we wrote and a
//! crash tore (or a disk that rotted it) would otherwise be handed to Raft as a valid entry.
//! Scanning is proportional to the unpurged log, which the glue bounds by snapshotting.

use std::path::Path;
use std::time::{Duration, Instant};

use super::format::{
    key_index, parse_format_version, snapshot_meta_end, split_purged, FORMAT_VERSION, KEY_FORMAT,
    KEY_PURGED, KEY_SNAPSHOT, KEY_VOTE, OLDEST_FORMAT_VERSION,
};
use super::snapshot_file;
use crate::frame::{seal, unseal};
use crate::{JournalError, LogState, Recovery};

/// Opens the sled database at `path`, polling for up to `lock_wait` while its file
/// lock is held (a dropped handle's sled threads finishing, or another process);
/// blocking. Also what tests use to damage a closed journal.
pub(crate) fn open_db(
    path: &Path,
    location: &str,
    lock_wait: Duration,
) -> Result<sled::Db, JournalError> {
    let deadline = Instant::now() + lock_wait;
    loop {
        let config = sled::Config::new().path(path).mode(sled::Mode::LowSpace).flush_every_ms(None);
        match config.open().map_err(|e| sled_err(location, e)) {
            Ok(db) => return Ok(db),
            Err(JournalError::Fenced { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// How long `open` waits for sled's file lock.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// An opened, recovered database.
pub(super) struct Opened {
    pub db: sled::Db,
    pub log: sled::Tree,
    pub meta: sled::Tree,
    pub state: LogState,
    pub recovery: Recovery,
    /// Where the snapshot is: a file (format 2, or an empty read-only journal) or the `meta`
    /// value (a format-1 journal opened read-only; a writable open upgrades it).
    pub snapshot_in_file: bool,
}

/// Opens the database and recovers; blocking (sled reads its log at open).
///
/// No live handle in this process has `path` open (the caller registered it), so a held lock
/// is either a dropped handle of ours whose sled threads are still finishing (milliseconds)
/// or another process: poll for up to [`LOCK_WAIT`] before calling it fenced.
/// Opens and recovers; `read_only` writes nothing (see `OpenOptions::read_only`).
pub(super) fn open_blocking(
    path: &Path,
    location: &str,
    read_only: bool,
) -> Result<Opened, JournalError> {
    let db = open_db(path, location, LOCK_WAIT)?;
    let log = db.open_tree("log").map_err(|e| sled_err(location, e))?;
    let meta = db.open_tree("meta").map_err(|e| sled_err(location, e))?;
    if !read_only {
        snapshot_file::prepare(path).map_err(|e| JournalError::io(location, false, e))?;
    }
    let (state, recovery, format) = recover(path, location, &log, &meta, read_only)?;
    Ok(Opened { db, log, meta, state, recovery, snapshot_in_file: format >= 2 })
}

/// Verifies every value, finishes an interrupted purge, upgrades format 1 to 2 (writable
/// opens); returns the marks and the format the journal is now in. A value that fails
/// its checksum is `Corrupt` wherever it is: sled batches are atomic, so no acknowledged
/// write of ours can be half there (a torn write of sled's own log is sled's to discard).
fn recover(
    path: &Path,
    location: &str,
    log: &sled::Tree,
    meta: &sled::Tree,
    read_only: bool,
) -> Result<(LogState, Recovery, u32), JournalError> {
    let sled = |e| sled_err(location, e);
    let corrupt = |what: &str, offset: u64, reason: String| JournalError::Corrupt {
        location: format!("{location} ({what})"),
        offset,
        reason,
    };
    let meta_value = |key: &[u8]| -> Result<Option<Vec<u8>>, JournalError> {
        match meta.get(key).map_err(sled)? {
            None => Ok(None),
            Some(v) => unseal(&v).map(|p| Some(p.to_vec())).map_err(|reason| {
                corrupt(&format!("tree `meta`, key `{}`", String::from_utf8_lossy(key)), 0, reason)
            }),
        }
    };

    let mut format = match meta_value(KEY_FORMAT)? {
        Some(v) => {
            let found = parse_format_version(&v)
                .map_err(|r| corrupt("tree `meta`, key `format_version`", 0, r))?;
            if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&found) {
                return Err(JournalError::UnsupportedVersion {
                    location: location.to_string(),
                    found,
                    supported: FORMAT_VERSION,
                });
            }
            found
        }
        None if log.is_empty() && meta.is_empty() && read_only => FORMAT_VERSION,
        None if log.is_empty() && meta.is_empty() => {
            meta.insert(KEY_FORMAT, seal(&FORMAT_VERSION.to_le_bytes())).map_err(sled)?;
            FORMAT_VERSION
        }
        None => {
            let why = "the format-version key is missing from a non-empty journal".to_string();
            return Err(corrupt("tree `meta`", 0, why));
        }
    };
    meta_value(KEY_VOTE)?;
    if format == 1 {
        let value = meta_value(KEY_SNAPSHOT)?;
        if let Some(v) = &value {
            snapshot_meta_end(v).map_err(|r| corrupt("tree `meta`, key `snapshot`", 0, r))?;
        }
        if !read_only {
            upgrade(path, location, meta, value.as_deref())?;
            format = 2;
        }
    } else {
        verify_snapshot_file(path, location)?;
    }
    let mut state = LogState::default();
    if let Some(v) = meta_value(KEY_PURGED)? {
        let (upto, marker) =
            split_purged(&v).map_err(|r| corrupt("tree `meta`, key `purged`", 0, r))?;
        state.purged_index = Some(upto);
        state.purged_marker = Some(marker);
        // Finish a purge that crashed between writing its marker and deleting entries
        // (read-only: skip them below instead).
        if !read_only {
            let mut batch = sled::Batch::default();
            for item in log.range(..=upto.to_be_bytes()) {
                batch.remove(item.map_err(sled)?.0);
            }
            log.apply_batch(batch).map_err(sled)?;
        }
    }

    let mut recovery = Recovery::default();
    for item in log.iter() {
        let (key, value) = item.map_err(sled)?;
        let index = key_index(&key).map_err(|r| corrupt("tree `log`", 0, r))?;
        if state.purged_index.is_some_and(|p| index <= p) {
            continue;
        }
        let what = format!("tree `log`, key = entry {index}; offset = that index");
        if let Some(last) = state.last_index {
            if index != last + 1 {
                return Err(corrupt(&what, index, format!("entry {index} follows {last}")));
            }
        }
        unseal(&value).map_err(|reason| corrupt(&what, index, reason))?;
        state.first_index = state.first_index.or(Some(index));
        state.last_index = Some(index);
        recovery.entries += 1;
    }
    Ok((state, recovery, format))
}

/// Format 1 → 2: the snapshot moves from the `meta` value to its file (durable first),
/// then one sled batch drops the value and records format 2. A crash in between leaves a
/// format-1 journal whose value is still there, and the next open upgrades again.
fn upgrade(
    path: &Path,
    location: &str,
    meta: &sled::Tree,
    snapshot: Option<&[u8]>,
) -> Result<(), JournalError> {
    if let Some(value) = snapshot {
        snapshot_file::write(path, &[value], || {})
            .map_err(|e| JournalError::io(location, false, e))?;
    }
    let mut batch = sled::Batch::default();
    batch.remove(KEY_SNAPSHOT);
    batch.insert(KEY_FORMAT, seal(&FORMAT_VERSION.to_le_bytes()));
    meta.apply_batch(batch).map_err(|e| sled_err(location, e))?;
    tracing::info!(journal = %location, "journal format 1 upgraded to 2 (snapshot file)");
    Ok(())
}

/// Reads the snapshot file, if any, and checks it: a damaged one is `Corrupt`.
fn verify_snapshot_file(path: &Path, location: &str) -> Result<(), JournalError> {
    let what = "snapshot/current";
    let bytes = snapshot_file::read(path).map_err(|e| JournalError::io(location, false, e))?;
    let Some(bytes) = bytes else { return Ok(()) };
    unseal(&bytes).and_then(snapshot_meta_end).map(drop).map_err(|reason| JournalError::Corrupt {
        location: format!("{location} ({what})"),
        offset: 0,
        reason,
    })
}

/// Maps a sled error: a held lock means another process owns the journal (`Fenced`);
/// sled's own `Corruption` (e.g. after a hard kill, sled #1533) is a permanent `Io` error.
pub(super) fn sled_err(location: &str, e: sled::Error) -> JournalError {
    match e {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            JournalError::Fenced {
                location: location.to_string(),
                detail: format!("another process holds the database lock: {io}"),
            }
        }
        other => JournalError::io(location, false, other),
    }
}
