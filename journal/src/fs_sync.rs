//! Directory durability for the backends on a local filesystem (sled, `file://`).
//!
//! Why: creating a directory (or a file in it) is durable only once the directory that
//! holds the new entry is fsynced. `create_dir_all_durable` creates a journal's directory
//! and fsyncs every directory whose entries it changed, so a journal acknowledged after a
//! fresh start does not vanish with its directory on a power failure.

use std::fs::File;
use std::io;
use std::path::Path;

/// `fsync` of a directory: makes its entries (created, renamed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `create_dir_all`, then fsyncs each directory it created and the existing one it created
/// them in.
pub(crate) fn create_dir_all_durable(path: &Path) -> io::Result<()> {
    let first_existing = path.ancestors().find(|p| p.exists()).map(Path::to_path_buf);
    std::fs::create_dir_all(path)?;
    for dir in path.ancestors() {
        if dir.as_os_str().is_empty() {
            break;
        }
        sync_dir(dir)?;
        if Some(dir) == first_existing.as_deref() {
            break;
        }
    }
    Ok(())
}
