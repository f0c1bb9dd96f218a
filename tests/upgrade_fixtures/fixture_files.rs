//! Files of the committed work_dir fixtures: where they are, the two layouts,
//! copying one to a temp dir, and reading a directory whole (to prove that a
//! refused start changed nothing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `tests/fixtures/workdir`: one directory per version of the formats.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workdir")
}

#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// A plain directory: the sled backend.
    Local,
    /// `file://DIR`: the object-store backend, one file per object.
    Object,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Local => "local",
            Layout::Object => "object",
        }
    }

    /// The `--work-dir` value for a work_dir at `dir`.
    pub fn work_dir(self, dir: &Path) -> String {
        match self {
            Layout::Local => dir.display().to_string(),
            Layout::Object => format!("file://{}", dir.display()),
        }
    }
}

/// Copies the directory tree `from` to `to` (created).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir` (relative path → bytes); directories as empty
/// entries ending in `/`, so a new empty directory counts as a change too.
pub fn snapshot_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(root).unwrap().display().to_string();
        if entry.file_type().unwrap().is_dir() {
            out.insert(format!("{rel}/"), vec![]);
            walk(root, &entry.path(), out);
        } else {
            out.insert(rel, std::fs::read(entry.path()).unwrap());
        }
    }
}

/// The payload format this build writes (`sluice_dispatcher::raft::versioned`).
pub const CURRENT_FORMAT: u16 = sluice_dispatcher::raft::versioned::CURRENT;

/// `record` (a persisted dispatcher record, with or without its format header)
/// with a header claiming `version`: what a later build would write.
pub fn with_format(record: &[u8], version: u16) -> Vec<u8> {
    let header = |b: &[u8]| b.len() >= 8 && b[..4] == [0xFF, b'S', b'L', b'V'] && b[7] == 0xFF;
    let (kind, payload) = if header(record) { (record[6], &record[8..]) } else { (1, record) };
    let v = version.to_le_bytes();
    let mut out = vec![0xFF, b'S', b'L', b'V', v[0], v[1], kind, 0xFF];
    out.extend_from_slice(payload);
    out
}
