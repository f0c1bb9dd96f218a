//! Making a sled flush durable: fsync what sled only `sync_file_range`s.
//!
//! Why: sled 0.34 on Linux ends its flush in `sync_file_range(WAIT_BEFORE | WRITE |
//! WAIT_AFTER)` on its `db` file, which writes the dirty pages but syncs neither the file's
//! metadata (its size, when the write grew it) nor the device's volatile cache; and it writes
//! large values ("blobs", over about a quarter of a segment) to files of their own and renames
//! its own snapshot files without syncing them or their directory at all. A power failure
//! could then lose an acknowledged append or vote. So after every flush the journal calls
//! [`Syncer::sync`], which
//! - `fdatasync`s the `db` file (data, and the size when it grew; any descriptor of the file
//!   does, so a read-only one of our own is used),
//! - `fsync`s every blob file not synced before and then the `blobs` directory (blob files
//!   are written once and never changed, so one sync each suffices),
//! - `fsync`s the database directory when its listing changed (sled's snapshot renames).
//!
//! One call per journal write: the dispatcher's group commit merges concurrent appends into
//! one write, so concurrent proposals still share one sync.
//! At open, [`Syncer::open`] syncs everything once (the directory itself was made durable
//! when it was created, `fs_sync`).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::fs_sync::sync_dir;

pub(crate) struct Syncer {
    dir: PathBuf,
    db: File,
    /// Blob files already synced (pruned to what still exists at every sync).
    blobs: HashSet<OsString>,
    /// The directory's entries at the last sync.
    listing: HashSet<OsString>,
    /// Sync calls made (the `testing` feature exposes them per directory).
    #[cfg(feature = "testing")]
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Syncer {
    /// Syncs every file of the database in `dir` and the directory; blocking.
    pub(crate) fn open(dir: &Path) -> io::Result<Syncer> {
        let db = File::open(dir.join("db"))?;
        let mut syncer = Syncer {
            dir: dir.to_path_buf(),
            db,
            blobs: HashSet::new(),
            listing: HashSet::new(),
            #[cfg(feature = "testing")]
            count: counter(dir),
        };
        syncer.sync()?;
        for file in ["conf"] {
            match File::open(dir.join(file)) {
                Ok(f) => f.sync_all()?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        sync_dir(dir)?;
        Ok(syncer)
    }

    /// Makes everything sled has flushed durable; blocking. Call after `flush`.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        self.db.sync_data()?;
        #[cfg(feature = "testing")]
        self.count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let blobs_dir = self.dir.join("blobs");
        let present = names(&blobs_dir)?;
        let mut new_blob = false;
        for name in present.difference(&self.blobs) {
            match File::open(blobs_dir.join(name)) {
                Ok(f) => {
                    f.sync_all()?;
                    new_blob = true;
                }
                // Collected by sled since we listed: nothing to make durable.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if new_blob {
            sync_dir(&blobs_dir)?;
        }
        self.blobs = present;
        let listing = names(&self.dir)?;
        if listing != self.listing {
            sync_dir(&self.dir)?;
            self.listing = listing;
        }
        Ok(())
    }
}

/// The entry names of `dir` (empty if it does not exist).
fn names(dir: &Path) -> io::Result<HashSet<OsString>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.map(|e| e.file_name())).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(HashSet::new()),
        Err(e) => Err(e),
    }
}

/// The process-wide count of `Syncer::sync` calls per database directory (feature
/// `testing`, read by `testing::sled_sync_count`).
#[cfg(feature = "testing")]
fn counter(dir: &Path) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    COUNTS
        .lock()
        .expect("sync counters")
        .get_or_insert_with(Default::default)
        .entry(dir.to_path_buf())
        .or_default()
        .clone()
}

#[cfg(feature = "testing")]
type Counts = std::collections::HashMap<PathBuf, std::sync::Arc<std::sync::atomic::AtomicU64>>;

#[cfg(feature = "testing")]
static COUNTS: std::sync::Mutex<Option<Counts>> = std::sync::Mutex::new(None);

/// Syncs made so far by journals on `dir` in this process (feature `testing`).
#[cfg(feature = "testing")]
pub(crate) fn sync_count(dir: &Path) -> u64 {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    COUNTS
        .lock()
        .expect("sync counters")
        .as_ref()
        .and_then(|c| c.get(&dir))
        .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
}
