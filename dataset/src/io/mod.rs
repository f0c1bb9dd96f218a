//! File access for file sources: plain paths, `file://`, `s3://`, `gs://`.
//!
//! The API is synchronous because its callers are: the executor runs on plain std
//! threads, and the dispatcher calls [`DatasetDef::resolve_files`] from
//! `spawn_blocking`. Object-store calls run on one process-wide tokio runtime
//! (`runtime`: two `sluice-io` threads, created lazily) — futures are *spawned*
//! there and their results awaited on a std channel, never `block_on`, which would
//! panic on a thread already inside a runtime context.
//!
//! - `url` — the accepted forms (path, `file://`, `s3://`, `gs://`) parsed into a target.
//! - `writer` — [`FileWriter`], what `create` returns for both backends.
//! - `local` — glob listing, buffered reads, temp-then-rename writes.
//! - `object` — one cached store per bucket configured from `AWS_*` / `GOOGLE_*`
//!   like the journal's, streaming reads with bounded read-ahead, multipart writes.
//!
//! Every error is a [`DatasetError::Io`] naming the file (or pattern) as given.

mod local;
mod object;
mod runtime;
mod url;
mod writer;

use std::io::Read;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::def::{DatasetDef, Stage};
use crate::error::DatasetError;

use self::url::{parse, Target};
pub use object::READ_AHEAD_CHUNKS;
pub use writer::FileWriter;

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
