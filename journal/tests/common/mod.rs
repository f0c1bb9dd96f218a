//! Fixtures for the conformance suite: one [`Backend`] per storage kind, with the same calls
//! (open, reopen, damage the tail, damage the middle, break the format version), so that
//! every case in `conformance.rs` runs unchanged against every backend.
//!
//! The damage helpers know the on-disk formats (docs/journal.md) on purpose: they play the
//! part of a crash or of bit rot, going through sled or the object store API directly.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_journal::testing::{object_store_for, MotoServer};
use sluice_journal::{open_with, Journal, JournalError, OpenOptions, Recovery};

/// Bytes of an object header; a record's header (len, crc) and body head (kind, index).
pub const OBJECT_HEADER: usize = 28;
pub const RECORD_HEAD: usize = 8 + 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sled,
    File,
    Memory,
    S3,
}

pub struct Backend {
    pub kind: Kind,
    pub location: String,
    pub options: OpenOptions,
    /// The sled directory, or the file:// root.
    dir: Option<tempfile::TempDir>,
    _moto: Option<Arc<MotoServer>>,
}

fn unique(test: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{test}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Backend {
    pub fn new(kind: Kind, test: &str) -> Backend {
        let options = OpenOptions { from_env: false, ..OpenOptions::default() };
        let mut backend =
            Backend { kind, location: String::new(), options, dir: None, _moto: None };
        match kind {
            Kind::Sled => {
                let dir = tempfile::tempdir().unwrap();
                backend.location = format!("sled:{}", dir.path().display());
                backend.dir = Some(dir);
            }
            Kind::File => {
                let dir = tempfile::tempdir().unwrap();
                backend.location = format!("file://{}", dir.path().display());
                backend.dir = Some(dir);
            }
            Kind::Memory => backend.location = format!("memory://{}", unique(test)),
            Kind::S3 => {
                // Fails (never skips) with the install command when moto is missing.
                let moto = MotoServer::shared();
                backend.location = format!("s3://{}/{}", moto.bucket(), unique(test));
                backend.options = moto.options();
                backend._moto = Some(moto);
            }
        }
        backend
    }

    pub fn is_object_store(&self) -> bool {
        self.kind != Kind::Sled
    }

    pub async fn try_open(&self) -> Result<(Arc<dyn Journal>, Recovery), JournalError> {
        open_with(&self.location, &self.options).await
    }

    pub async fn open(&self) -> (Arc<dyn Journal>, Recovery) {
        self.try_open().await.unwrap_or_else(|e| panic!("open {}: {e}", self.location))
    }

    /// Drops `journal` (which must be the only handle) and opens again: a restart.
    pub async fn reopen(&self, journal: Arc<dyn Journal>) -> (Arc<dyn Journal>, Recovery) {
        assert_eq!(Arc::strong_count(&journal), 1, "the test still holds another handle");
        drop(journal);
        self.open().await
    }

    fn sled_dir(&self) -> &std::path::Path {
        self.dir.as_ref().expect("sled dir").path()
    }

    fn object_store(&self) -> (Arc<dyn ObjectStore>, Path) {
        object_store_for(&self.location, &self.options).unwrap()
    }

    /// The log segments' paths, oldest first.
    pub async fn segments(&self) -> Vec<Path> {
        self.list("log").await
    }

    /// The objects under `dir` ("log", "vote", "snapshot"), in name order.
    pub async fn list(&self, dir: &str) -> Vec<Path> {
        use futures::TryStreamExt;
        let (store, root) = self.object_store();
        let mut paths: Vec<Path> = store
            .list(Some(&root.clone().join(dir)))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .unwrap();
        paths.sort();
        paths
    }

    async fn rewrite(&self, path: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
        let (store, _) = self.object_store();
        let mut bytes = store.get(path).await.unwrap().bytes().await.unwrap().to_vec();
        edit(&mut bytes);
        store.put(path, PutPayload::from(bytes)).await.unwrap();
    }

    /// Edits the sled log directly, once the dropped journal's sled threads have
    /// let go of its file lock (generous for a loaded machine).
    fn with_sled_log(&self, edit: impl FnOnce(&sled::Tree)) {
        let db = sluice_journal::testing::open_sled_db(
            self.sled_dir(),
            std::time::Duration::from_secs(30),
        )
        .expect("opening the closed sled journal to damage it");
        edit(&db.open_tree("log").unwrap());
        db.flush().unwrap();
    }

    /// Damages the last log record (the last entry in sled; the last segment, cut 3 bytes
    /// short, in an object store), written by an append of that entry alone as the journal's
    /// `index`-th write. The journal must be closed. Returns what the `Corrupt` error must
    /// name, as [`Backend::damage_entry`] does.
    pub async fn damage_tail(&self, index: u64) -> (String, u64) {
        match self.kind {
            Kind::Sled => {
                self.with_sled_log(|log| {
                    let (key, value) = log.last().unwrap().unwrap();
                    assert_eq!(key.as_ref(), index.to_be_bytes());
                    let mut value = value.to_vec();
                    *value.last_mut().unwrap() ^= 0xff;
                    log.insert(key, value).unwrap();
                });
                (self.sled_dir().canonicalize().unwrap().display().to_string(), index)
            }
            _ => {
                let last = self.segments().await.pop().unwrap();
                let name = format!("log/{:020}.seg", index + 1);
                assert!(last.as_ref().ends_with(&name), "{last} is not {name}");
                self.rewrite(&last, |bytes| bytes.truncate(bytes.len() - 3)).await;
                (name, OBJECT_HEADER as u64)
            }
        }
    }

    /// Damages entry `index`, written by an append of that entry alone as the journal's
    /// `index`-th write (so it sits in segment `index + 1`, after the open's claim). Returns
    /// what the `Corrupt` error must name: part of the location, and the offset.
    pub async fn damage_entry(&self, index: u64) -> (String, u64) {
        match self.kind {
            Kind::Sled => {
                self.with_sled_log(|log| {
                    let key = index.to_be_bytes();
                    let mut value = log.get(key).unwrap().unwrap().to_vec();
                    value[4] ^= 0xff;
                    log.insert(key, value).unwrap();
                });
                (self.sled_dir().canonicalize().unwrap().display().to_string(), index)
            }
            _ => {
                let name = format!("log/{:020}.seg", index + 1);
                let path = self.object_store().1.join("log").join(format!("{:020}.seg", index + 1));
                self.rewrite(&path, |bytes| bytes[OBJECT_HEADER + RECORD_HEAD] ^= 0xff).await;
                (name, OBJECT_HEADER as u64)
            }
        }
    }

    /// Flips a byte of the stored snapshot (same size). The journal must be closed.
    pub async fn damage_snapshot(&self) {
        match self.kind {
            Kind::Sled => {
                let file = self.sled_dir().join("snapshot").join("current");
                let mut bytes = std::fs::read(&file).unwrap();
                *bytes.last_mut().unwrap() ^= 0xff;
                std::fs::write(&file, bytes).unwrap();
            }
            _ => {
                let last = self.list("snapshot").await.pop().unwrap();
                self.rewrite(&last, |bytes| *bytes.last_mut().unwrap() ^= 0xff).await;
            }
        }
    }

    /// Marks the journal as written by the format version after the newest this build
    /// reads (sled: 3; object stores: 2); returns that version.
    pub async fn set_newer_format_version(&self) -> u32 {
        match self.kind {
            Kind::Sled => {
                let db = sled::Config::new().path(self.sled_dir()).open().unwrap();
                let meta = db.open_tree("meta").unwrap();
                let payload = 3u32.to_le_bytes();
                let mut value = crc32c::crc32c(&payload).to_le_bytes().to_vec();
                value.extend_from_slice(&payload);
                meta.insert("format_version", value).unwrap();
                db.flush().unwrap();
                3
            }
            _ => {
                let last = self.segments().await.pop().unwrap();
                self.rewrite(&last, |bytes| bytes[4..8].copy_from_slice(&2u32.to_le_bytes())).await;
                2
            }
        }
    }
}

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// `(i, "e<i>")` for each index.
pub fn entries(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Bytes)> {
    range.map(|i| (i, b(&format!("e{i}")))).collect()
}
