//! Parquet tables: the `parquet` source, read with Apache arrow-rs.
//!
//! **The split unit is a row group**, numbered across the source's files in
//! order (file 0's groups, then file 1's, …), so one large file is read by many
//! workers at once and a worker's death loses at most the rest of one row group.
//! For that the dispatcher reads every file's footer at registration
//! ([`resolve`]) and records the row-group counts in the definition: every
//! worker then maps unit `u` to the same (file, row group) ([`ParquetSource::locate`]).
//! An element's origin is (unit, row within the group): with the counts that is
//! (file, row group, row), so exactly-once delivery, checkpoints and elastic
//! restore hold mid-file. Under FILE sharding a worker keeps whole files.
//!
//! **Reading.** Only the named columns are fetched ([`ProjectionMask`] of their
//! top-level columns): a local file is read with positioned reads of those
//! column chunks; an object's are fetched with ranged GETs on the I/O runtime
//! (`next_row_group`: the group's projected chunks, then decoded on the
//! executor's thread). A row group whose projected chunks hold more than
//! [`MAX_ROW_GROUP_BYTES`] compressed is refused before anything is fetched.
//! Rows are decoded [`ROW_BATCH`] at a time (or `batch_rows`, one element each)
//! and made into tensors by `columns`.
//!
//! **Bad input.** A missing column, an unsupported type, files whose columns
//! differ, a default that does not fit: refused at registration naming the file
//! and the column. A corrupt footer: an I/O error naming the file. A null or an
//! unrepresentable value: a [`DatasetError::BadRow`] naming the file, row group,
//! row and column — an element error, which `ignore_errors` may skip. Damaged
//! pages: [`DatasetError::Corrupt`], which ends the row group's read.

mod columns;
mod object;
mod spec;

use std::sync::{Arc, Mutex};

use arrow_array::ArrayRef;
use futures::{FutureExt, StreamExt};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};

pub use object::MAX_FOOTER_BYTES;
pub use spec::ParquetSource;

use self::columns::Leaves;
use crate::error::DatasetError;
use crate::exec::ElementIter;
use crate::io::{self, DataRoots, ListBudget, RandomAccess};
use crate::tensor::Element;

/// The most compressed bytes the projected columns of one row group may hold:
/// an object's row group is fetched whole, so this bounds a reader's memory.
pub const MAX_ROW_GROUP_BYTES: u64 = 512 << 20;
/// Rows decoded at a time when each row is an element.
pub const ROW_BATCH: usize = 1024;
/// Footers read at once at registration (objects; local files are read in turn).
const FOOTERS_IN_FLIGHT: usize = 16;

const FORMAT: &str = "Parquet";

fn options() -> ArrowReaderOptions {
    ArrowReaderOptions::new().with_skip_arrow_metadata(true)
}

fn footer_error(url: &str, e: impl std::fmt::Display) -> DatasetError {
    DatasetError::io(
        url,
        format!("cannot read the Parquet footer: {e}; is this a Parquet file, and whole?"),
    )
}

/// The footer of a local file, its length checked before it is read.
fn local_footer(url: &str, f: &std::fs::File) -> Result<ArrowReaderMetadata, DatasetError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut tail = [0u8; 8];
    let mut r = f;
    let len = r.seek(SeekFrom::End(0)).map_err(|e| DatasetError::reading(url, &e))?;
    if len >= 8 {
        r.seek(SeekFrom::Start(len - 8)).map_err(|e| DatasetError::reading(url, &e))?;
        r.read_exact(&mut tail).map_err(|e| DatasetError::reading(url, &e))?;
        let claimed = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]])) + 8;
        if &tail[4..] == b"PAR1" && claimed > MAX_FOOTER_BYTES {
            return Err(footer_error(
                url,
                format!("it claims {claimed} bytes, over the limit of {MAX_FOOTER_BYTES} (MAX_FOOTER_BYTES)"),
            ));
        }
    }
    ArrowReaderMetadata::load(f, options()).map_err(|e| footer_error(url, e))
}

/// The footer of `url`.
fn footer(url: &str, roots: &DataRoots) -> Result<ArrowReaderMetadata, DatasetError> {
    match io::open_random_access(url, roots)? {
        RandomAccess::File(f) => local_footer(url, &f),
        RandomAccess::Object { store, path } => {
            let shown = url.to_string();
            io::run_io(url, async move {
                let mut reader = object::ObjectFile::new(store, path);
                ArrowReaderMetadata::load_async(&mut reader, options())
                    .await
                    .map_err(|e| footer_error(&shown, e))
            })
        }
    }
}

/// The footers of `files`, in order: objects [`FOOTERS_IN_FLIGHT`] at a time.
fn footers(
    files: &[String],
    roots: &DataRoots,
    budget: &ListBudget,
) -> Result<Vec<ArrowReaderMetadata>, DatasetError> {
    let mut out = Vec::with_capacity(files.len());
    let mut objects = Vec::new();
    for (i, url) in files.iter().enumerate() {
        budget.check(url)?;
        match io::open_random_access(url, roots)? {
            RandomAccess::File(f) => out.push(Some(local_footer(url, &f)?)),
            RandomAccess::Object { store, path } => {
                out.push(None);
                objects.push((i, url.clone(), store, path));
            }
        }
    }
    if !objects.is_empty() {
        let what = objects[0].1.clone();
        type Loaded = Result<(usize, ArrowReaderMetadata), DatasetError>;
        let loads: Vec<futures::future::BoxFuture<'static, Loaded>> = objects
            .into_iter()
            .map(|(i, url, store, path)| {
                async move {
                    let mut reader = object::ObjectFile::new(store, path);
                    let meta = ArrowReaderMetadata::load_async(&mut reader, options()).await;
                    meta.map(|m| (i, m)).map_err(|e| footer_error(&url, e))
                }
                .boxed()
            })
            .collect();
        let loaded = io::run_io(&what, async move {
            let done: Vec<Loaded> =
                futures::stream::iter(loads).buffered(FOOTERS_IN_FLIGHT).collect().await;
            done.into_iter().collect::<Result<Vec<_>, _>>()
        })?;
        for (i, meta) in loaded {
            out[i] = Some(meta);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

fn spec_error(field: &str, message: String) -> DatasetError {
    DatasetError::InvalidSpec { field: format!("parquet.{field}"), message }
}

/// Lists `pattern` (if given) and reads every file's footer: the row-group
/// counts, and the checks that each file has the columns, of supported types,
/// alike in every file, with row groups within [`MAX_ROW_GROUP_BYTES`].
pub(crate) fn resolve(
    spec: &mut ParquetSource,
    roots: &DataRoots,
    budget: &ListBudget,
) -> Result<(), DatasetError> {
    if spec.is_resolved() {
        return Ok(());
    }
    if let (Some(pattern), true) = (&spec.pattern, spec.files.is_empty()) {
        spec.files = io::list_files_within(pattern, roots, budget)?;
    }
    let metas = footers(&spec.files, roots, budget)?;
    let mut first: Option<(&str, Leaves)> = None;
    let mut groups = Vec::with_capacity(metas.len());
    for (url, meta) in spec.files.iter().zip(&metas) {
        let leaves = Leaves::plan(meta.schema(), &spec.columns, &spec.defaults)
            .map_err(|m| spec_error("columns", format!("`{url}`: {m}")))?;
        if let Some((first_url, first)) = &first {
            if first.leaves != leaves.leaves {
                return Err(spec_error(
                    "files",
                    format!(
                        "`{url}` has other columns (or types) than `{first_url}`: {:?} against \
                         {:?}; read files of one table, or name the common columns in `columns`",
                        describe(&leaves),
                        describe(first)
                    ),
                ));
            }
        }
        let mask = projection(meta, &leaves);
        for g in 0..meta.metadata().num_row_groups() {
            check_size(url, meta, &mask, g)?;
        }
        let n = u32::try_from(meta.metadata().num_row_groups())
            .map_err(|_| footer_error(url, "more than 2^32 row groups"))?;
        groups.push(n);
        if first.is_none() {
            first = Some((url, leaves));
        }
    }
    spec.row_groups = Some(groups);
    Ok(())
}

fn describe(leaves: &Leaves) -> Vec<String> {
    leaves.leaves.iter().map(|l| format!("{}: {}", l.name, l.dtype.name())).collect()
}

/// The top-level columns `leaves` come from.
fn projection(meta: &ArrowReaderMetadata, leaves: &Leaves) -> ProjectionMask {
    let schema = meta.schema();
    let roots = leaves.roots.iter().filter_map(|r| schema.index_of(r).ok());
    ProjectionMask::roots(meta.parquet_schema(), roots)
}

fn check_size(
    url: &str,
    meta: &ArrowReaderMetadata,
    mask: &ProjectionMask,
    group: usize,
) -> Result<(), DatasetError> {
    let rg = meta.metadata().row_group(group);
    let bytes: u64 = (0..rg.num_columns())
        .filter(|&c| mask.leaf_included(c))
        .map(|c| rg.column(c).compressed_size().max(0) as u64)
        .sum();
    if bytes > MAX_ROW_GROUP_BYTES {
        return Err(DatasetError::io(
            url,
            format!(
                "row group {group}: its columns read hold {bytes} bytes compressed, over the \
                 limit of {MAX_ROW_GROUP_BYTES} (MAX_ROW_GROUP_BYTES); read fewer `columns`, or \
                 rewrite the file with smaller row groups"
            ),
        ));
    }
    Ok(())
}

/// Reads a resolved source's units, keeping the last file's footer (a worker's
/// consecutive units are mostly row groups of one file).
pub(crate) struct ParquetReader {
    spec: ParquetSource,
    roots: DataRoots,
    /// (file index, footer, components) of the file last opened.
    last: Mutex<Option<(usize, ArrowReaderMetadata, Arc<Leaves>)>>,
    /// The components of the first file opened: every file must have these.
    expected: Mutex<Option<(String, Arc<Leaves>)>>,
}

impl ParquetReader {
    pub fn new(spec: ParquetSource, roots: DataRoots) -> Self {
        ParquetReader { spec, roots, last: Mutex::new(None), expected: Mutex::new(None) }
    }

    pub fn units(&self) -> u64 {
        self.spec.units()
    }

    /// The elements of unit `unit`, read when first pulled.
    pub fn unit(self: &Arc<Self>, unit: u64) -> Result<ElementIter, DatasetError> {
        let (file, group) = self.spec.locate(unit).ok_or_else(|| {
            DatasetError::Split(format!("row group unit {unit} out of range of {}", self.units()))
        })?;
        let reader = self.clone();
        let mut rows: Option<Rows> = None;
        let mut done = false;
        Ok(Box::new(std::iter::from_fn(move || {
            if done {
                return None;
            }
            if rows.is_none() {
                match reader.open(file, group) {
                    Ok(r) => rows = Some(r),
                    Err(e) => {
                        done = true;
                        return Some(Err(e));
                    }
                }
            }
            let item = rows.as_mut()?.next();
            match &item {
                None | Some(Err(DatasetError::Corrupt { .. } | DatasetError::Io { .. })) => {
                    done = true;
                    rows = None;
                }
                _ => {}
            }
            item
        })))
    }

    /// The footer and components of file `file`.
    fn file(&self, file: usize) -> Result<(ArrowReaderMetadata, Arc<Leaves>), DatasetError> {
        let url = &self.spec.files[file];
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((f, meta, leaves)) = last.as_ref() {
            if *f == file {
                return Ok((meta.clone(), leaves.clone()));
            }
        }
        let meta = footer(url, &self.roots)?;
        let leaves = Leaves::plan(meta.schema(), &self.spec.columns, &self.spec.defaults)
            .map_err(|m| spec_error("columns", format!("`{url}`: {m}")))?;
        let leaves = Arc::new(leaves);
        let mut expected = self.expected.lock().unwrap_or_else(|p| p.into_inner());
        match expected.as_ref() {
            Some((first, want)) if want.leaves != leaves.leaves => {
                return Err(spec_error(
                    "files",
                    format!(
                        "`{url}` has other columns (or types) than `{first}`: {:?} against {:?}; \
                         was it replaced since the dataset was registered?",
                        describe(&leaves),
                        describe(want)
                    ),
                ))
            }
            Some(_) => {}
            None => *expected = Some((url.clone(), leaves.clone())),
        }
        *last = Some((file, meta.clone(), leaves.clone()));
        Ok((meta, leaves))
    }

    fn open(&self, file: usize, group: usize) -> Result<Rows, DatasetError> {
        let url = self.spec.files[file].clone();
        let (meta, leaves) = self.file(file)?;
        let groups = meta.metadata().num_row_groups();
        if group >= groups {
            return Err(DatasetError::io(
                &url,
                format!(
                    "has {groups} row groups, and the dataset was registered when it had more \
                     (it has been replaced); register the dataset again"
                ),
            ));
        }
        let mask = projection(&meta, &leaves);
        check_size(&url, &meta, &mask, group)?;
        let batch = self.spec.batch_rows.map_or(ROW_BATCH, |b| b as usize);
        let offset = meta.metadata().row_group(group).file_offset().unwrap_or(0).max(0) as u64;
        let place = Place { url: url.clone(), group: group as u64, offset };
        let reader = match io::open_random_access(&url, &self.roots)? {
            RandomAccess::File(f) => ParquetRecordBatchReaderBuilder::new_with_metadata(f, meta)
                .with_row_groups(vec![group])
                .with_projection(mask)
                .with_batch_size(batch)
                .build()
                .map_err(|e| place.corrupt(&e))?,
            RandomAccess::Object { store, path } => {
                let p = place.clone();
                io::run_io(&url, async move {
                    let input = object::ObjectFile::new(store, path);
                    let mut stream =
                        ParquetRecordBatchStreamBuilder::new_with_metadata(input, meta)
                            .with_row_groups(vec![group])
                            .with_projection(mask)
                            .with_batch_size(batch)
                            .build()
                            .map_err(|e| p.corrupt(&e))?;
                    let reader = stream.next_row_group().await.map_err(|e| p.corrupt(&e))?;
                    reader.ok_or_else(|| p.corrupt(&"the row group has no data"))
                })?
            }
        };
        Ok(Rows {
            reader,
            place,
            leaves,
            batched: self.spec.batch_rows.is_some(),
            batch: None,
            at: 0,
            rows_before: 0,
        })
    }
}

/// Where a row group lies, for its errors.
#[derive(Clone)]
struct Place {
    url: String,
    group: u64,
    /// The group's byte offset in the file.
    offset: u64,
}

impl Place {
    /// The group's pages (or the batches made of them) are damaged.
    fn corrupt(&self, e: &dyn std::fmt::Display) -> DatasetError {
        DatasetError::Corrupt {
            format: FORMAT,
            file: self.url.clone(),
            offset: self.offset,
            message: format!("row group {}: {e}; rewrite the file, or leave it out", self.group),
        }
    }
}

/// The elements of one row group, decoded a batch at a time.
struct Rows {
    reader: ParquetRecordBatchReader,
    place: Place,
    leaves: Arc<Leaves>,
    /// `batch_rows`: each decoded batch is one element.
    batched: bool,
    /// The decoded batch at hand: its rows and its leaf columns, in component order.
    batch: Option<(usize, Vec<ArrayRef>)>,
    /// The next row of `batch`.
    at: usize,
    /// Rows of the group before `batch`.
    rows_before: u64,
}

impl Iterator for Rows {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((num_rows, _)) = &self.batch {
                let num_rows = *num_rows;
                if self.at < num_rows {
                    let rows = if self.batched { 0..num_rows } else { self.at..self.at + 1 };
                    self.at = rows.end;
                    return Some(self.element(rows));
                }
                self.rows_before += num_rows as u64;
                self.batch = None;
            }
            match self.reader.next()? {
                Ok(b) => match self.leaves.columns(&b) {
                    Ok(cols) => {
                        self.batch = Some((b.num_rows(), cols));
                        self.at = 0;
                    }
                    Err(m) => return Some(Err(self.place.corrupt(&m))),
                },
                Err(e) => return Some(Err(self.place.corrupt(&e))),
            }
        }
    }
}

impl Rows {
    fn element(&self, rows: std::ops::Range<usize>) -> Result<Element, DatasetError> {
        let (_, cols) = self.batch.as_ref().expect("a batch is at hand");
        let bad = |row: usize, message: String| DatasetError::BadRow {
            format: FORMAT,
            file: self.place.url.clone(),
            group: self.place.group,
            row: self.rows_before + row as u64,
            message,
        };
        let mut components = Vec::with_capacity(cols.len());
        for (leaf, col) in self.leaves.leaves.iter().zip(cols) {
            let t = leaf.take(col.as_ref(), rows.clone(), self.batched);
            components.push(t.map_err(|f| bad(f.row, f.message))?);
        }
        Element::named(self.leaves.names.clone(), components)
    }
}
