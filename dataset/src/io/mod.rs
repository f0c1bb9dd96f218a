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
//! - `roots` — [`DataRoots`], the files and objects a server may read, checked at
//!   registration (the dispatcher) and before every open (the worker).
//! - `object` — one cached store per bucket configured from `AWS_*` / `GOOGLE_*`
//!   like the journal's, streaming reads with bounded read-ahead, multipart writes.
//!
//! Every error is a [`DatasetError::Io`] naming the file (or pattern) as given, or
//! [`DatasetError::NotFound`] for a file or object that does not exist.

mod listing;
mod local;
mod object;
mod roots;
mod runtime;
mod url;
mod writer;

use std::io::{BufRead, Read};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::def::{DatasetDef, SliceValues, Stage};
use crate::error::DatasetError;
use crate::formats::file_function;

use self::url::{parse, Target};
pub use listing::{ListBudget, LIST_DEADLINE, MAX_LIST_DEPTH, MAX_LIST_ENTRIES};
pub use object::READ_AHEAD_CHUNKS;
pub use roots::{DataRoots, DATA_ROOTS_FLAG};
pub use writer::FileWriter;

/// The files matching `pattern` (`*`, `?` and `[…]` allowed in path components),
/// sorted, in the pattern's form (a plain path, `file://…`, `s3://bucket/…`).
/// No match is an error naming the pattern.
pub fn list_files(pattern: &str) -> Result<Vec<String>, DatasetError> {
    list_files_in(pattern, &DataRoots::unrestricted())
}

/// [`list_files`] under `roots`: the pattern's fixed directory must lie under a
/// root, and so must every match (a symlink among them pointing out of the roots
/// is refused, naming it).
pub fn list_files_in(pattern: &str, roots: &DataRoots) -> Result<Vec<String>, DatasetError> {
    list_files_within(pattern, roots, &ListBudget::default())
}

/// [`list_files_in`] within `budget` (and the bounds of `listing`).
pub fn list_files_within(
    pattern: &str,
    roots: &DataRoots,
    budget: &ListBudget,
) -> Result<Vec<String>, DatasetError> {
    roots.check_pattern(pattern)?;
    let mut files = match parse(pattern)? {
        Target::Local { path, file_url } => {
            let listed = listing::list(&path.to_string_lossy(), budget)?;
            if file_url {
                listed.into_iter().map(|p| format!("file://{p}")).collect()
            } else {
                listed
            }
        }
        Target::Object(url) => object::list(&url, budget)?,
    };
    if files.is_empty() {
        return Err(DatasetError::io(
            pattern,
            format!("no files match `{pattern}`; check the path and the glob characters"),
        ));
    }
    for f in &files {
        roots.check(f)?;
    }
    files.sort();
    Ok(files)
}

/// Opens `url` for reading, buffered. Local files have a read buffer; objects
/// stream with [`READ_AHEAD_CHUNKS`] chunks of read-ahead (which are the buffer),
/// never the whole object in memory.
pub fn open(url: &str) -> Result<Box<dyn BufRead + Send>, DatasetError> {
    open_in(url, &DataRoots::unrestricted())
}

/// [`open`] under `roots`: a local file is checked and then opened by its
/// canonical path (what was checked is what is opened); an object by its URL.
pub fn open_in(url: &str, roots: &DataRoots) -> Result<Box<dyn BufRead + Send>, DatasetError> {
    Ok(match open_checked(url, roots)? {
        Opened::File(f) => Box::new(std::io::BufReader::with_capacity(local::READ_BUFFER, f)),
        Opened::Object(o) => Box::new(o),
    })
}

/// [`open_in`] without a local read buffer, for a reader that buffers itself
/// (the TFRecord reader reads large records straight from the file). Objects
/// come in chunks either way.
pub fn open_unbuffered_in(
    url: &str,
    roots: &DataRoots,
) -> Result<Box<dyn Read + Send>, DatasetError> {
    Ok(match open_checked(url, roots)? {
        Opened::File(f) => Box::new(f),
        Opened::Object(o) => Box::new(o),
    })
}

/// What [`open_checked`] opened.
enum Opened {
    File(std::fs::File),
    Object(object::ObjectReader),
}

/// `url`, once `roots` admit it (a local file by its checked canonical path).
fn open_checked(url: &str, roots: &DataRoots) -> Result<Opened, DatasetError> {
    let checked = roots.check(url)?;
    match parse(url)? {
        Target::Local { .. } => Ok(Opened::File(local::open(url, std::path::Path::new(&checked))?)),
        Target::Object(o) => Ok(Opened::Object(object::open(&o)?)),
    }
}

/// What [`open_random_access`] opened: a local file by its checked path, or the
/// store and path of an object, for a reader that seeks (the Parquet source
/// reads a footer, then only the column chunks it needs).
pub(crate) enum RandomAccess {
    File(std::fs::File),
    Object { store: std::sync::Arc<dyn object_store::ObjectStore>, path: object_store::path::Path },
}

/// `url` for random access, once `roots` admit it.
pub(crate) fn open_random_access(
    url: &str,
    roots: &DataRoots,
) -> Result<RandomAccess, DatasetError> {
    let checked = roots.check(url)?;
    match parse(url)? {
        Target::Local { .. } => {
            Ok(RandomAccess::File(local::open(url, std::path::Path::new(&checked))?))
        }
        Target::Object(o) => {
            let (store, path) = object::store_and_path(&o)?;
            Ok(RandomAccess::Object { store, path })
        }
    }
}

/// Runs `fut` on the I/O runtime, blocking this (non-runtime) thread until it ends.
pub(crate) fn run_io<T, F>(what: &str, fut: F) -> Result<T, DatasetError>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, DatasetError>> + Send + 'static,
{
    runtime::run(what, fut)
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
    /// `ChaCha8Rng::seed_from_u64(seed)` when asked; lists a `parquet` source's
    /// pattern and reads its files' footers (`formats::parquet::resolve`).
    /// Resolved stages are left as they are. The dispatcher calls it once at registration so that the split
    /// order is part of the replicated state. Blocking: call it off an async
    /// runtime's worker threads (e.g. in `spawn_blocking`).
    pub fn resolve_files(&mut self) -> Result<(), DatasetError> {
        self.resolve_files_in(&DataRoots::unrestricted())
    }

    /// [`Self::resolve_files`] under `roots` (see [`list_files_in`]).
    pub fn resolve_files_in(&mut self, roots: &DataRoots) -> Result<(), DatasetError> {
        self.resolve_files_within(roots, &ListBudget::default())
    }

    /// [`Self::resolve_files_in`], every listing within `budget` (the dispatcher
    /// cancels it when the registration is dropped).
    pub fn resolve_files_within(
        &mut self,
        roots: &DataRoots,
        budget: &ListBudget,
    ) -> Result<(), DatasetError> {
        for stage in &mut self.stages {
            match stage {
                Stage::ListFiles { pattern, shuffle, seed, files } if files.is_none() => {
                    let mut listed = list_files_within(pattern, roots, budget)?;
                    if *shuffle {
                        listed.shuffle(&mut ChaCha8Rng::seed_from_u64(*seed));
                    }
                    *files = Some(listed);
                }
                Stage::Parquet(p) => crate::formats::parquet::resolve(p, roots, budget)?,
                Stage::Zip { datasets } => {
                    datasets.iter_mut().try_for_each(|d| d.resolve_files_within(roots, budget))?;
                }
                Stage::Concatenate { dataset } => dataset.resolve_files_within(roots, budget)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks every file this pipeline names against `roots`, nested pipelines
    /// included: `list_files` patterns (by their fixed directory) and listed files,
    /// the files of `tfrecord` / `text_lines` sources, and — when the pipeline calls
    /// a file-reading function (`tfrecord`, `text_lines`, …) — the strings of its
    /// `from_tensor_slices` sources, which then name files. The dispatcher calls it
    /// at registration; workers check each file again before opening it.
    pub fn check_files(&self, roots: &DataRoots) -> Result<(), DatasetError> {
        if roots.is_unrestricted() {
            return Ok(());
        }
        let named = self.calls_file_functions();
        self.check_files_at(roots, named)
    }

    fn check_files_at(
        &self,
        roots: &DataRoots,
        strings_name_files: bool,
    ) -> Result<(), DatasetError> {
        for stage in &self.stages {
            match stage {
                Stage::ListFiles { pattern, files, .. } => {
                    roots.check_pattern(pattern)?;
                    for f in files.iter().flatten() {
                        roots.check(f)?;
                    }
                }
                Stage::TfRecord { files, .. }
                | Stage::TextLines { files }
                | Stage::WebDataset { files } => {
                    files.iter().try_for_each(|f| roots.check(f).map(drop))?;
                }
                Stage::Parquet(p) => {
                    if let Some(pattern) = &p.pattern {
                        roots.check_pattern(pattern)?;
                    }
                    p.files.iter().try_for_each(|f| roots.check(f).map(drop))?;
                }
                Stage::FromTensorSlices(SliceValues::Strings(v)) if strings_name_files => {
                    v.iter().try_for_each(|f| roots.check(f).map(drop))?;
                }
                Stage::FromTensorSlices(SliceValues::Bytes(v)) if strings_name_files => {
                    let names = v.iter().filter_map(|b| std::str::from_utf8(b).ok());
                    names.into_iter().try_for_each(|f| roots.check(f).map(drop))?;
                }
                // The `tensors` form: any string or bytes column may reach a file
                // function (alone, or picked out of a tuple by a later stage).
                Stage::FromTensorSlices(SliceValues::Tensors { tensors, .. })
                    if strings_name_files =>
                {
                    for t in tensors.iter().filter(|t| t.dtype().width().is_none()) {
                        let items = t.items()?;
                        let names = items.iter().filter_map(|b| std::str::from_utf8(b).ok());
                        names.into_iter().try_for_each(|f| roots.check(f).map(drop))?;
                    }
                }
                Stage::Zip { datasets } => {
                    datasets.iter().try_for_each(|d| d.check_files_at(roots, strings_name_files))?
                }
                Stage::Concatenate { dataset } => {
                    dataset.check_files_at(roots, strings_name_files)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether a `flat_map` / `interleave` anywhere in the pipeline calls one of the
    /// built-in functions that open the file an element names.
    fn calls_file_functions(&self) -> bool {
        self.stages.iter().any(|s| match s {
            Stage::FlatMap(call) => file_function(&call.name).is_some(),
            Stage::Interleave { name, .. } => file_function(name).is_some(),
            Stage::Zip { datasets } => datasets.iter().any(DatasetDef::calls_file_functions),
            Stage::Concatenate { dataset } => dataset.calls_file_functions(),
            _ => false,
        })
    }

    /// Whether some `list_files` stage (nested ones included) is not yet resolved.
    pub fn has_unresolved_files(&self) -> bool {
        self.stages.iter().any(|s| match s {
            Stage::ListFiles { files, .. } => files.is_none(),
            Stage::Parquet(p) => !p.is_resolved(),
            Stage::Zip { datasets } => datasets.iter().any(DatasetDef::has_unresolved_files),
            Stage::Concatenate { dataset } => dataset.has_unresolved_files(),
            _ => false,
        })
    }
}
