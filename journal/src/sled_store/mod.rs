//! The sled backend: the journal in a local sled database.
//!
//! Why sled: a crash-safe embedded store with atomic batches, so this module only has to
//! order its writes and make them durable before acknowledging. sled's own periodic flusher
//! is off (`flush_every_ms(None)`): every mutating call ends with `flush_async().await` and
//! then an fsync of what that flush wrote (`durable`: sled's own flush is only a
//! `sync_file_range` on Linux), before returning `Ok`.
//!
//! Layout (format version [`FORMAT_VERSION`](format::FORMAT_VERSION); names in `format`):
//! - tree `log`: key = big-endian `u64` index (so sled's order is index order), value = entry.
//! - tree `meta`: `format_version` (u32 LE), `vote`, `purged` (`[u64 LE upto][marker]`);
//!   in format 1 also `snapshot` (`[u64 LE meta_len][meta][data]`).
//! - file `snapshot/current` (format 2): the snapshot, written outside the writer lock so
//!   appends go on during a save (`snapshot_file`).
//!
//! Every value is framed `[u32 crc32c][payload]` (`frame`). Recovery at open verifies every
//! value: a bad one is corruption and refuses to start, naming the path and the key, also on
//! the highest log key: sled applies a batch atomically and discards a torn write of its own
//! log at open, so our checksum never sees a torn write, only damage.
//! A purge writes its marker before deleting entries, and recovery deletes entries at or below
//! the marker, so a crash between the two steps only leaves garbage that recovery removes.

mod durable;
pub(crate) mod format;
mod read_only;
mod recover;
mod snapshot_file;
#[cfg(test)]
mod tests;

#[cfg(feature = "testing")]
pub(crate) use durable::sync_count;

#[cfg(feature = "testing")]
pub(crate) use recover::open_db;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use bytes::Bytes;
use tokio::sync::Mutex;

use self::durable::Syncer;
use self::format::{key_index, split_snapshot, KEY_PURGED, KEY_SNAPSHOT, KEY_VOTE};
use self::recover::{open_blocking, sled_err, Opened};
use crate::frame::{seal, unseal};
use crate::{Journal, JournalError, LogState, Recovery};

pub(crate) struct SledJournal {
    location: String,
    /// The directory sled and the snapshot file live in (a copy's, for read-only handles).
    dir: PathBuf,
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
    /// fsyncs what a flush wrote; used by one blocking task at a time (under `writer`).
    syncer: Arc<StdMutex<Syncer>>,
    /// Cache of the durable marks. A std mutex: held only for short sections, never across
    /// an `.await`.
    state: StdMutex<LogState>,
    /// Serializes writes. Holds why this handle refuses writes after a failed one (a failed
    /// flush leaves the durable state unknown; reopening recovers it).
    writer: Mutex<Option<String>>,
    /// Told how long each flush + fsync took.
    timing: crate::observe::Timing,
    /// The snapshot is the file `snapshot/current` (format 2), else the `meta` value
    /// `snapshot` (a format-1 journal opened read-only).
    snapshot_in_file: bool,
    /// Serializes snapshot saves (they need no writer lock: `snapshot_file`).
    snapshot_writer: Mutex<()>,
    read_only: bool,
    /// Tests hold a save between writing its file and renaming it into place.
    #[cfg(test)]
    pause_save: Option<Arc<(std::sync::Barrier, std::sync::Barrier)>>,
    /// Declared last so it is dropped after the database.
    _open: OpenGuard,
    /// A read-only handle's copy of the directory, removed after the database is closed.
    _copy: Option<read_only::ReadCopy>,
}

impl SledJournal {
    pub(crate) async fn open(
        path: PathBuf,
        read_only: bool,
        timing: crate::observe::Timing,
    ) -> Result<(SledJournal, Recovery), JournalError> {
        let display = format!("sled:{}", path.display());
        // Read-only: a copy (`read_only.rs`), named by the original in messages.
        let (path, location, copy) = if read_only {
            let (from, loc) = (path.clone(), display.clone());
            let copy =
                tokio::task::spawn_blocking(move || read_only::copy_for_reading(&from, &loc))
                    .await
                    .map_err(|e| JournalError::io(&display, false, e))??;
            let location = match path.canonicalize() {
                Ok(p) => format!("sled:{}", p.display()),
                Err(_) => display.clone(),
            };
            (copy.path().to_path_buf(), location, Some(copy))
        } else {
            crate::fs_sync::create_dir_all_durable(&path)
                .map_err(|e| JournalError::io(&display, false, e))?;
            let path = path.canonicalize().map_err(|e| JournalError::io(&display, false, e))?;
            let location = format!("sled:{}", path.display());
            (path, location, None)
        };
        let guard = OpenGuard::register(&path, &location)?;
        let loc = location.clone();
        let dir = path.clone();
        let opened = tokio::task::spawn_blocking(move || open_blocking(&path, &loc, read_only))
            .await
            .map_err(|e| JournalError::io(&location, false, e))??;
        let Opened { db, log, meta, state, recovery, snapshot_in_file } = opened;
        // Recovery may have written (a format key, a cut tail): durable before anything else.
        db.flush_async().await.map_err(|e| sled_err(&location, e))?;
        let sync_dir = dir.clone();
        let syncer = tokio::task::spawn_blocking(move || Syncer::open(&sync_dir))
            .await
            .map_err(|e| JournalError::io(&location, false, e))?
            .map_err(|e| JournalError::io(&location, false, e))?;
        tracing::info!(journal = %location, entries = recovery.entries, ?state, "journal opened");
        let journal = SledJournal {
            location,
            dir,
            db,
            log,
            meta,
            syncer: Arc::new(StdMutex::new(syncer)),
            state: StdMutex::new(state),
            writer: Mutex::new(read_only.then(|| "opened read-only".to_string())),
            timing,
            snapshot_in_file,
            snapshot_writer: Mutex::new(()),
            read_only,
            #[cfg(test)]
            pause_save: None,
            _open: guard,
            _copy: copy,
        };
        Ok((journal, recovery))
    }

    fn marks(&self) -> LogState {
        self.state.lock().expect("state lock").clone()
    }

    /// Runs a write under the writer lock: refuses if poisoned; `op` validates against the
    /// current marks, applies its sled operations and returns the new marks (`None`: nothing to
    /// do); then flushes and fsyncs, and only then publishes the new marks. A failed sled call,
    /// flush or sync poisons the handle.
    async fn write<F>(&self, op: F) -> Result<(), JournalError>
    where
        F: FnOnce(&LogState) -> Result<Option<LogState>, Step>,
    {
        let mut poisoned = self.writer.lock().await;
        if let Some(why) = poisoned.as_ref() {
            return Err(JournalError::io(&self.location, false, why.clone()));
        }
        let current = self.marks();
        let result = match op(&current) {
            Ok(None) => return Ok(()),
            Err(Step::Refuse(e)) => return Err(e),
            Err(Step::Sled(e)) => Err(sled_err(&self.location, e)),
            Ok(Some(next)) => {
                let start = std::time::Instant::now();
                let flushed = match self.db.flush_async().await {
                    Ok(_) => self.sync().await.map(|()| next),
                    Err(e) => Err(sled_err(&self.location, e)),
                };
                self.timing.done(start);
                flushed
            }
        };
        match result {
            Ok(next) => {
                *self.state.lock().expect("state lock") = next;
                Ok(())
            }
            Err(err) => {
                *poisoned = Some(format!(
                    "an earlier write failed ({err}); its outcome is unknown: reopen the journal"
                ));
                Err(err)
            }
        }
    }

    /// fsyncs what the last flush wrote (see `durable`), on a blocking thread.
    async fn sync(&self) -> Result<(), JournalError> {
        let syncer = self.syncer.clone();
        let io = |e: std::io::Error| JournalError::io(&self.location, false, e);
        tokio::task::spawn_blocking(move || syncer.lock().expect("syncer").sync())
            .await
            .map_err(|e| JournalError::io(&self.location, false, e))?
            .map_err(io)
    }

    fn corrupt(&self, what: String, offset: u64, reason: String) -> JournalError {
        JournalError::Corrupt { location: format!("{} ({what})", self.location), offset, reason }
    }

    fn get_meta(&self, key: &[u8]) -> Result<Option<Bytes>, JournalError> {
        match self.meta.get(key).map_err(|e| sled_err(&self.location, e))? {
            None => Ok(None),
            Some(v) => unseal(&v).map(|p| Some(Bytes::copy_from_slice(p))).map_err(|reason| {
                self.corrupt(
                    format!("tree `meta`, key `{}`", String::from_utf8_lossy(key)),
                    0,
                    reason,
                )
            }),
        }
    }
}

#[async_trait::async_trait]
impl Journal for SledJournal {
    async fn state(&self) -> Result<LogState, JournalError> {
        Ok(self.marks())
    }

    async fn append(&self, entries: Vec<(u64, Bytes)>) -> Result<(), JournalError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.write(|state| {
            let last = state.check_append(&entries)?;
            let mut batch = sled::Batch::default();
            for (index, payload) in &entries {
                batch.insert(&index.to_be_bytes(), seal(payload));
            }
            self.log.apply_batch(batch)?;
            let mut next = state.clone();
            next.first_index = next.first_index.or(Some(entries[0].0));
            next.last_index = Some(last);
            Ok(Some(next))
        })
        .await
    }

    async fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, Bytes)>, JournalError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for item in self.log.range(from.to_be_bytes()..to.to_be_bytes()) {
            let (key, value) = item.map_err(|e| sled_err(&self.location, e))?;
            let index = key_index(&key).map_err(|r| self.corrupt("tree `log`".into(), 0, r))?;
            let payload = unseal(&value).map_err(|reason| {
                self.corrupt(
                    format!("tree `log`, key = entry {index}; offset = that index"),
                    index,
                    reason,
                )
            })?;
            out.push((index, Bytes::copy_from_slice(payload)));
        }
        Ok(out)
    }

    async fn truncate(&self, from: u64) -> Result<(), JournalError> {
        self.write(|state| {
            state.check_truncate(from)?;
            let (Some(first), Some(last)) = (state.first_index, state.last_index) else {
                return Ok(None);
            };
            if from > last {
                return Ok(None);
            }
            let mut batch = sled::Batch::default();
            for index in from.max(first)..=last {
                batch.remove(&index.to_be_bytes());
            }
            self.log.apply_batch(batch)?;
            let mut next = state.clone();
            if from <= first {
                (next.first_index, next.last_index) = (None, None);
            } else {
                next.last_index = Some(from - 1);
            }
            Ok(Some(next))
        })
        .await
    }

    async fn purge(&self, upto: u64, marker: Bytes) -> Result<(), JournalError> {
        self.write(|state| {
            state.check_purge(upto)?;
            let mut value = upto.to_le_bytes().to_vec();
            value.extend_from_slice(&marker);
            // Marker first: recovery removes entries at or below it if we crash in between.
            self.meta.insert(KEY_PURGED, seal(&value))?;
            let mut next = state.clone();
            if let (Some(first), Some(last)) = (state.first_index, state.last_index) {
                let mut batch = sled::Batch::default();
                for index in first..=upto.min(last) {
                    batch.remove(&index.to_be_bytes());
                }
                self.log.apply_batch(batch)?;
                if last > upto {
                    next.first_index = Some(first.max(upto + 1));
                } else {
                    (next.first_index, next.last_index) = (None, None);
                }
            }
            next.purged_index = Some(upto);
            next.purged_marker = Some(marker);
            Ok(Some(next))
        })
        .await
    }

    async fn save_vote(&self, vote: Bytes) -> Result<(), JournalError> {
        self.write(|state| {
            self.meta.insert(KEY_VOTE, seal(&vote))?;
            Ok(Some(state.clone()))
        })
        .await
    }

    async fn read_vote(&self) -> Result<Option<Bytes>, JournalError> {
        self.get_meta(KEY_VOTE)
    }

    /// Outside the writer lock: appends go on while the file is written and synced
    /// (`snapshot_file`). Saves are serialized among themselves.
    async fn save_snapshot(&self, meta: Bytes, data: Bytes) -> Result<(), JournalError> {
        if self.read_only {
            return Err(JournalError::io(&self.location, false, "opened read-only"));
        }
        let _saving = self.snapshot_writer.lock().await;
        let dir = self.dir.clone();
        #[cfg(test)]
        let pause = self.pause_save.clone();
        let pause = move || {
            #[cfg(test)]
            if let Some(gate) = pause {
                gate.0.wait();
                gate.1.wait();
            }
        };
        let io = |e| JournalError::io(&self.location, false, e);
        let start = std::time::Instant::now();
        tokio::task::spawn_blocking(move || {
            let len = (meta.len() as u64).to_le_bytes();
            snapshot_file::write(&dir, &[&len, &meta, &data], pause)
        })
        .await
        .map_err(|e| JournalError::io(&self.location, false, e))?
        .map_err(io)?;
        self.timing.done(start);
        Ok(())
    }

    async fn read_snapshot(&self) -> Result<Option<(Bytes, Bytes)>, JournalError> {
        let (value, what) = if self.snapshot_in_file {
            let dir = self.dir.clone();
            let read = tokio::task::spawn_blocking(move || snapshot_file::read(&dir))
                .await
                .map_err(|e| JournalError::io(&self.location, false, e))?
                .map_err(|e| JournalError::io(&self.location, false, e))?;
            let Some(sealed) = read else { return Ok(None) };
            let sealed = Bytes::from(sealed);
            let payload = unseal(&sealed)
                .map(|p| sealed.slice_ref(p))
                .map_err(|r| self.corrupt("snapshot/current".into(), 0, r))?;
            (payload, "snapshot/current")
        } else {
            let Some(value) = self.get_meta(KEY_SNAPSHOT)? else { return Ok(None) };
            (value, "tree `meta`, key `snapshot`")
        };
        split_snapshot(value).map(Some).map_err(|reason| self.corrupt(what.into(), 0, reason))
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}

/// Why a write step stopped: refused before touching the database, or a sled failure.
enum Step {
    Refuse(JournalError),
    Sled(sled::Error),
}

impl From<JournalError> for Step {
    fn from(e: JournalError) -> Self {
        Step::Refuse(e)
    }
}

impl From<sled::Error> for Step {
    fn from(e: sled::Error) -> Self {
        Step::Sled(e)
    }
}

/// Paths open in this process: sled's file lock is per open file description, and a second
/// `open` of the same directory in one process must fail clearly rather than wait or share.
static OPEN: StdMutex<Option<HashSet<PathBuf>>> = StdMutex::new(None);

struct OpenGuard(PathBuf);

/// Whether a journal at `path` is open in this process (see `wait_closed`).
pub(crate) fn is_open_in_process(path: &Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    OPEN.lock().expect("open registry").as_ref().is_some_and(|open| open.contains(&path))
}

impl OpenGuard {
    fn register(path: &Path, location: &str) -> Result<OpenGuard, JournalError> {
        let mut open = OPEN.lock().expect("open registry");
        if !open.get_or_insert_with(HashSet::new).insert(path.to_path_buf()) {
            return Err(JournalError::Fenced {
                location: location.to_string(),
                detail: "this directory is already open in this process (drop the other \
                         handle first)"
                    .to_string(),
            });
        }
        Ok(OpenGuard(path.to_path_buf()))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        if let Some(open) = OPEN.lock().expect("open registry").as_mut() {
            open.remove(&self.0);
        }
    }
}
