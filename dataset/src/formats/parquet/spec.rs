//! The `parquet` source stage as written in a spec, its checks, and the map from
//! a split unit (a row group of the whole source) to its file.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bounds::{at_most, MAX_BATCH_SIZE};
use crate::def::Arg;

/// Source: the rows of Parquet files. One element per row (or per `batch_rows`
/// rows of one row group), a named component per column; the split unit is a
/// row group. Give `files`, or a `pattern` the dispatcher lists at registration,
/// when it also reads every file's footer into `row_groups` (docs/dataset-spec.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetSource {
    /// A pattern (`*`, `?`, `[…]` in path components; a path or an `s3://` / `gs://`
    /// URL) listed, sorted, into `files` at registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The files, in read order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// The top-level columns to read, in component order; empty: every column.
    /// Only these columns are read from storage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// Elements of up to this many rows of one row group, each component a
    /// tensor with a leading dimension of the rows; `None`: one element per row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_rows: Option<u32>,
    /// The value a null of a scalar column takes, by component name; a null in a
    /// column without one is an error naming the column.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub defaults: BTreeMap<String, Arg>,
    /// The number of row groups of each file, read from the footers at
    /// registration (resolution); `None` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_groups: Option<Vec<u32>>,
}

impl ParquetSource {
    /// A source over `files`, every column, one element per row.
    pub fn new<S: Into<String>>(files: Vec<S>) -> Self {
        ParquetSource { files: files.into_iter().map(Into::into).collect(), ..Default::default() }
    }

    /// Whether the footers were read (and the pattern listed).
    pub fn is_resolved(&self) -> bool {
        self.row_groups.as_ref().is_some_and(|g| g.len() == self.files.len())
    }

    /// The split units: row groups of all files together (0 until resolved).
    pub fn units(&self) -> u64 {
        self.row_groups.iter().flatten().map(|&g| u64::from(g)).sum()
    }

    /// Unit `unit` as (file index, row group within the file).
    pub fn locate(&self, unit: u64) -> Option<(usize, usize)> {
        let mut rest = unit;
        for (f, &groups) in self.row_groups.as_ref()?.iter().enumerate() {
            if rest < u64::from(groups) {
                return Some((f, rest as usize));
            }
            rest -= u64::from(groups);
        }
        None
    }

    /// Keeps the files `f` with `f mod n == i` (FILE sharding), and their counts.
    pub(crate) fn keep_files(&mut self, n: usize, i: usize) {
        let keep = |f: &usize| f % n == i;
        let files = std::mem::take(&mut self.files);
        self.files =
            files.into_iter().enumerate().filter(|(f, _)| keep(f)).map(|(_, x)| x).collect();
        if let Some(groups) = self.row_groups.take() {
            let kept = groups.into_iter().enumerate().filter(|(f, _)| keep(f));
            self.row_groups = Some(kept.map(|(_, g)| g).collect());
        }
    }

    /// Checks what can be checked without reading the files; `Err((field, message))`
    /// names the field under the stage.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, m: &str| Err((format!(".parquet.{field}"), m.to_string()));
        match (&self.pattern, self.files.is_empty()) {
            (None, true) => return bad("files", "name at least one file, or give a `pattern`"),
            (Some(p), _) if p.is_empty() => return bad("pattern", "must not be empty"),
            (Some(_), false) if self.row_groups.is_none() => {
                return bad("files", "give `files` or a `pattern`, not both")
            }
            _ => {}
        }
        if let Some(groups) = &self.row_groups {
            if groups.len() != self.files.len() {
                return bad(
                    "row_groups",
                    "must hold one count per file (it is filled in at registration; leave it out)",
                );
            }
        }
        if let Some(rows) = self.batch_rows {
            if rows == 0 {
                return bad("batch_rows", "must be > 0 (or left out for one element per row)");
            }
            at_most(u64::from(rows), MAX_BATCH_SIZE, "MAX_BATCH_SIZE")
                .map_err(|m| (".parquet.batch_rows".to_string(), m))?;
        }
        if let Some(c) = self.columns.iter().find(|c| c.is_empty()) {
            return bad("columns", &format!("a column name is empty ({c:?})"));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if self.columns[..i].contains(c) {
                return bad("columns", &format!("`{c}` is named twice"));
            }
        }
        Ok(())
    }
}
