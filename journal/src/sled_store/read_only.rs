//! Read-only opens of a sled journal. sled writes its own files at every open (it
//! recovers and saves a new page-table snapshot, `snap.*`), so reading a directory
//! without changing a byte of it means reading a copy: the directory is copied,
//! under a shared lock on its `db` file, into a temporary directory that is removed
//! when the handle is dropped. sled holds an exclusive lock on `db` while open, so
//! the copy is never taken of a database in use (that is `Fenced`, as for a
//! writing open). The copy costs a read of the directory: small next to replaying it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::JournalError;

/// A copy of a sled directory, removed on drop.
pub(crate) struct ReadCopy(PathBuf);

impl ReadCopy {
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ReadCopy {
    fn drop(&mut self) {
        // Best effort: a leftover copy in the temp dir is garbage, never state.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the sled directory `path` (which may not exist: an empty copy) into a new
/// temporary directory.
pub(crate) fn copy_for_reading(path: &Path, location: &str) -> Result<ReadCopy, JournalError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name =
        format!("sluice-read-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let copy = ReadCopy(std::env::temp_dir().join(name));
    let io = |e: std::io::Error| JournalError::io(location, false, e);
    std::fs::create_dir_all(copy.path()).map_err(io)?;
    let db = match File::open(path.join("db")) {
        Ok(db) => db,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(copy),
        Err(e) => return Err(io(e)),
    };
    db.try_lock_shared().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => JournalError::Fenced {
            location: location.to_string(),
            detail: "another process has the database open".into(),
        },
        std::fs::TryLockError::Error(e) => io(e),
    })?;
    copy_tree(path, copy.path()).map_err(io)?;
    Ok(copy)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
