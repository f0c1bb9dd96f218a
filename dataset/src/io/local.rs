//! Local files: glob listing, buffered reads, crash-safe writes (temp name, fsync,
//! rename, fsync of the directory), so a reader never sees half a file under its
//! final name.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::writer::FileWriter;
use crate::error::DatasetError;

/// Read buffer per open file.
pub(super) const READ_BUFFER: usize = 256 << 10;

/// The local file at `path` (`url` names it in errors); the caller buffers it.
pub(super) fn open(url: &str, path: &Path) -> Result<File, DatasetError> {
    File::open(path).map_err(|e| DatasetError::opening(url, &e))
}

/// Writes to `.<name>.tmp-<pid>-<n>` beside `path`; `finish` renames it into place.
pub(super) struct LocalWriter {
    url: String,
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

pub(super) fn create(url: &str, path: &Path) -> Result<Box<dyn FileWriter>, DatasetError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| DatasetError::io(url, "not a file name (ends in `/` or `..`)"))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| DatasetError::io(url, e))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.tmp-{}-{n}", name.to_string_lossy(), std::process::id()));
    let f = File::create(&tmp).map_err(|e| DatasetError::io(url, e))?;
    Ok(Box::new(LocalWriter {
        url: url.to_string(),
        path: path.to_path_buf(),
        tmp,
        out: Some(BufWriter::with_capacity(READ_BUFFER, f)),
    }))
}

impl Write for LocalWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.out {
            Some(out) => out.write(buf),
            None => Err(std::io::Error::other("writer already finished")),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.out {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}

impl FileWriter for LocalWriter {
    fn finish(mut self: Box<Self>) -> Result<(), DatasetError> {
        let out = self.out.take().ok_or_else(|| DatasetError::io(&self.url, "finished twice"))?;
        let f = out.into_inner().map_err(|e| DatasetError::io(&self.url, e.error()))?;
        f.sync_all().map_err(|e| DatasetError::io(&self.url, e))?;
        drop(f);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| DatasetError::io(&self.url, e))?;
        // Make the rename itself durable; not every platform can open a directory.
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        // Not finished: leave no temp file behind (best effort).
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
