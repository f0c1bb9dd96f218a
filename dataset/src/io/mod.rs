//! File access for file sources: plain paths, `file://`, `s3://`, `gs://`.
//!
//! The API is synchronous because its callers are: the executor runs on plain std
//! threads, and the dispatcher calls [`DatasetDef::resolve_files`] from
//! `spawn_blocking`. Object-store calls run on one process-wide tokio runtime
//! (`runtime`: two `sluice-io` threads, created lazily) — futures are *spawned*
//! there and their results awaited on a std channel, never `block_on`, which would
//! panic on a thread already inside a runtime context.
//!
//! - `local` — glob listing, buffered reads, temp-then-rename writes.
//! - `object` — one cached store per bucket configured from `AWS_*` / `GOOGLE_*`
//!   like the journal's, streaming reads with bounded read-ahead, multipart writes.
//!
//! Every error is a [`DatasetError::Io`] naming the file (or pattern) as given.

mod local;
mod object;
mod runtime;

use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::def::{DatasetDef, Stage};
use crate::error::DatasetError;

pub use object::READ_AHEAD_CHUNKS;

/// A file being written; it appears under its name only once [`finish`] returns.
///
/// [`finish`]: FileWriter::finish
pub trait FileWriter: Write + Send {
    /// Flushes, makes the file durable and visible under its final name. Dropping
    /// the writer without calling it abandons the file.
    fn finish(self: Box<Self>) -> Result<(), DatasetError>;
}

/// `s3://bucket/key` or `gs://bucket/key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObjectUrl {
    pub scheme: &'static str,
    pub bucket: String,
    pub key: String,
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/{}", self.scheme, self.bucket, self.key)
    }
}

/// Where a URL points.
enum Target {
    /// A local path; `file_url` when it was given as `file://…` (results keep that form).
    Local {
        path: PathBuf,
        file_url: bool,
    },
    Object(ObjectUrl),
}

fn parse(url: &str) -> Result<Target, DatasetError> {
    for scheme in ["s3", "gs"] {
        if let Some(rest) = url.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || key.is_empty() {
                return Err(DatasetError::io(
                    url,
                    format!("expected {scheme}://BUCKET/KEY (both non-empty)"),
                ));
            }
            let key = key.to_string();
            return Ok(Target::Object(ObjectUrl { scheme, bucket: bucket.to_string(), key }));
        }
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(DatasetError::io(url, "a file:// URL needs an absolute path (file:///…)"));
        }
        return Ok(Target::Local { path: PathBuf::from(path), file_url: true });
    }
    if let Some((scheme, _)) = url.split_once("://") {
        return Err(DatasetError::io(
            url,
            format!("unsupported scheme `{scheme}://`; use a path, file://, s3:// or gs://"),
        ));
    }
    if url.is_empty() {
        return Err(DatasetError::io(url, "empty file name"));
    }
    Ok(Target::Local { path: PathBuf::from(url), file_url: false })
}

/// The files matching `pattern` (`*`, `?` and `[…]` allowed in path components),
/// sorted, in the pattern's form (a plain path, `file://…`, `s3://bucket/…`).
/// No match is an error naming the pattern.
pub fn list_files(pattern: &str) -> Result<Vec<String>, DatasetError> {
    let mut files = match parse(pattern)? {
        Target::Local { path, file_url } => {
            let listed = local::list(&path.to_string_lossy())?;
            if file_url {
                listed.into_iter().map(|p| format!("file://{p}")).collect()
            } else {
                listed
            }
        }
        Target::Object(url) => object::list(&url)?,
    };
    if files.is_empty() {
        return Err(DatasetError::io(
            pattern,
            format!("no files match `{pattern}`; check the path and the glob characters"),
        ));
    }
    files.sort();
    Ok(files)
}

/// Opens `url` for reading. Local files are buffered; objects stream with
/// [`READ_AHEAD_CHUNKS`] chunks of read-ahead, never the whole object in memory.
pub fn open(url: &str) -> Result<Box<dyn Read + Send>, DatasetError> {
    match parse(url)? {
        Target::Local { path, .. } => local::open(url, &path),
        Target::Object(o) => object::open(&o),
    }
}

/// Creates (or replaces) `url`; parent directories of a local path are created.
pub fn create(url: &str) -> Result<Box<dyn FileWriter>, DatasetError> {
    match parse(url)? {
        Target::Local { path, .. } => local::create(url, &path),
        Target::Object(o) => object::create(&o),
    }
}

/// `dir` joined with `name` by one `/` (for paths and URLs alike).
pub fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

impl DatasetDef {
    /// Lists the files of every unresolved `list_files` stage (nested pipelines
    /// included) into its `files`: sorted, then shuffled with
    /// `ChaCha8Rng::seed_from_u64(seed)` when asked. Resolved stages are left as
    /// they are. The dispatcher calls it once at registration so that the split
    /// order is part of the replicated state. Blocking: call it off an async
    /// runtime's worker threads (e.g. in `spawn_blocking`).
    pub fn resolve_files(&mut self) -> Result<(), DatasetError> {
        for stage in &mut self.stages {
            match stage {
                Stage::ListFiles { pattern, shuffle, seed, files } if files.is_none() => {
                    let mut listed = list_files(pattern)?;
                    if *shuffle {
                        listed.shuffle(&mut ChaCha8Rng::seed_from_u64(*seed));
                    }
                    *files = Some(listed);
                }
                Stage::Zip { datasets } => {
                    datasets.iter_mut().try_for_each(DatasetDef::resolve_files)?;
                }
                Stage::Concatenate { dataset } => dataset.resolve_files()?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether some `list_files` stage (nested ones included) is not yet resolved.
    pub fn has_unresolved_files(&self) -> bool {
        self.stages.iter().any(|s| match s {
            Stage::ListFiles { files, .. } => files.is_none(),
            Stage::Zip { datasets } => datasets.iter().any(DatasetDef::has_unresolved_files),
            Stage::Concatenate { dataset } => dataset.has_unresolved_files(),
            _ => false,
        })
    }
}
