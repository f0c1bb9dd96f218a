//! The sled backend's snapshot: a file of its own beside the database (format 2), not a
//! sled value (format 1).
//!
//! Why: a snapshot is the whole dispatcher state, tens of MiB at thousands of workers.
//! Stored as a sled value it was written under the journal's writer lock and flushed and
//! fsynced there, so no append committed on that node for the whole save (265 ms for
//! 30 MiB on an idle machine, seconds on a loaded one): a leader stopped granting splits.
//! Written to a file of its own, fsynced and renamed into place, it needs no writer lock,
//! and appends go on meanwhile. The rename makes the replacement atomic, so a crash leaves
//! the old or the new snapshot, never a mix: the contract of `Journal::save_snapshot`.
//!
//! Layout: `<dir>/snapshot/current` holds `[u32 crc32c LE][u64 meta_len LE][meta][data]`,
//! the checksum over everything after it: the same bytes as format 1's `meta` value
//! `snapshot`, so one decoder (`format::split_snapshot`) reads both. A save writes
//! `snapshot/next`, fsyncs it, renames it over `current` and fsyncs the directory; a
//! `next` left by a crash is garbage, removed at the next writable open.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::fs_sync::sync_dir;

/// Bytes written between two syncs of a snapshot being saved.
const SYNC_CHUNK: usize = 1 << 20;

/// The directory of the snapshot files inside a sled journal's directory.
pub(crate) fn dir(db_dir: &Path) -> PathBuf {
    db_dir.join("snapshot")
}

fn current(db_dir: &Path) -> PathBuf {
    dir(db_dir).join("current")
}

fn next(db_dir: &Path) -> PathBuf {
    dir(db_dir).join("next")
}

/// Creates the snapshot directory (durably) and removes a `next` a crash left; blocking.
pub(crate) fn prepare(db_dir: &Path) -> io::Result<()> {
    crate::fs_sync::create_dir_all_durable(&dir(db_dir))?;
    match std::fs::remove_file(next(db_dir)) {
        Ok(()) => sync_dir(&dir(db_dir)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Replaces the snapshot, durably; blocking. `value` is the snapshot value
/// `[u64 LE meta_len][meta][data]` in parts (so a big `data` is not copied to join them).
/// `pause` runs once the new file is written and before it replaces the old one (tests
/// hold a save there).
pub(crate) fn write(db_dir: &Path, value: &[&[u8]], pause: impl FnOnce()) -> io::Result<()> {
    let crc = value.iter().fold(0, |crc, part| crc32c::crc32c_append(crc, part));
    let path = next(db_dir);
    let mut file = File::create(&path)?;
    file.write_all(&crc.to_le_bytes())?;
    write_synced(&mut file, value, File::sync_data)?;
    file.sync_all()?;
    drop(file);
    pause();
    std::fs::rename(&path, current(db_dir))?;
    sync_dir(&dir(db_dir))
}

/// Writes `parts`, calling `sync` after each full [`SYNC_CHUNK`] bytes (the
/// caller's `sync_all` covers the rest), so at most a chunk of the snapshot is
/// unsynced when the log's next append syncs beside the save. With one sync of the
/// whole 33 MiB file at the end, the appends beside it waited for most of it, likely
/// because ext4's ordered mode writes the file's dirty pages in the journal commit
/// the log's `fdatasync` forces (the scale bench's grant p99 at 2,000 workers, with a
/// snapshot every 1,000 entries: 68-84 ms, 47 ms chunked).
fn write_synced(
    file: &mut File,
    parts: &[&[u8]],
    mut sync: impl FnMut(&File) -> io::Result<()>,
) -> io::Result<()> {
    let mut unsynced = 0;
    for part in parts {
        let mut rest = *part;
        while !rest.is_empty() {
            let (now, later) = rest.split_at(rest.len().min(SYNC_CHUNK - unsynced));
            file.write_all(now)?;
            unsynced += now.len();
            rest = later;
            if unsynced == SYNC_CHUNK {
                sync(file)?;
                unsynced = 0;
            }
        }
    }
    Ok(())
}

/// The sealed bytes of the current snapshot (`frame::unseal` checks them), if there is one;
/// blocking. The allocation is the file's size, which this backend wrote.
pub(crate) fn read(db_dir: &Path) -> io::Result<Option<Vec<u8>>> {
    let mut file = match File::open(current(db_dir)) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::unseal;
    use crate::sled_store::format::split_snapshot;
    use bytes::Bytes;

    #[test]
    fn a_written_snapshot_reads_back_as_a_sealed_format_one_value() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path()).unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        write(dir.path(), &[&4u64.to_le_bytes(), b"meta", b"data"], || {}).unwrap();
        let bytes = read(dir.path()).unwrap().unwrap();
        let payload = Bytes::copy_from_slice(unseal(&bytes).unwrap());
        let (meta, data) = split_snapshot(payload).unwrap();
        assert_eq!((&meta[..], &data[..]), (&b"meta"[..], &b"data"[..]));
        // The same bytes format 1 stored in `meta`: seal([u64 meta_len][meta][data]).
        let mut payload = 4u64.to_le_bytes().to_vec();
        payload.extend_from_slice(b"metadata");
        assert_eq!(bytes, crate::frame::seal(&payload));
    }

    #[test]
    fn a_snapshot_is_synced_a_chunk_at_a_time_as_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = File::create(dir.path().join("f")).unwrap();
        // Parts that straddle the chunk boundaries.
        let (big, small) = (vec![7u8; 2 * SYNC_CHUNK + 100], vec![9u8; SYNC_CHUNK - 50]);
        let mut synced_at = vec![];
        write_synced(&mut file, &[b"head", &big, &small], |f| {
            synced_at.push(f.metadata()?.len());
            Ok(())
        })
        .unwrap();
        // Only full chunks: the tail is left to the caller's `sync_all`, not synced twice.
        let chunk = SYNC_CHUNK as u64;
        assert_eq!(synced_at, vec![chunk, 2 * chunk, 3 * chunk], "{synced_at:?}");
        let bytes = std::fs::read(dir.path().join("f")).unwrap();
        assert_eq!(bytes, [&b"head"[..], &big, &small].concat());
    }

    #[test]
    fn a_save_interrupted_before_its_rename_leaves_the_old_snapshot_and_garbage_prepare_removes() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path()).unwrap();
        let value = |data: &'static [u8]| [&2u64.to_le_bytes()[..], b"m1", data].concat();
        write(dir.path(), &[&value(b"old")], || {}).unwrap();
        // A crash after `next` is written and before the rename: the old one stays current.
        let crashed = std::panic::catch_unwind(|| {
            write(dir.path(), &[&value(b"new")], || panic!("crash before the rename")).unwrap();
        });
        assert!(crashed.is_err());
        assert!(next(dir.path()).exists());
        let bytes = read(dir.path()).unwrap().unwrap();
        assert_eq!(unseal(&bytes).unwrap(), value(b"old"));
        prepare(dir.path()).unwrap();
        assert!(!next(dir.path()).exists());
    }
}
