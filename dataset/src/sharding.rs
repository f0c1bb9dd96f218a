//! Sharding a pipeline among workers: what each processing mode can divide, and
//! the rewrite that gives one worker its static shard.
//!
//! DYNAMIC hands out ranges of the first stage's split units (elements of `range`
//! and `from_tensor_slices`, files of a file source); a pipeline that joins a
//! second source (`zip`, `concatenate`) has no single source to split and is
//! refused. The static policies (FILE, DATA, FILE_OR_DATA, HINT) rewrite the
//! pipeline on each worker with `(num_workers, worker_index)` taken from the
//! dispatcher's fixed worker list, as tf.data's auto-shard rewrite does
//! (`../shared/TFDATA-BEHAVIOUR.md` §4.1). Everything here is pure: the
//! dispatcher runs the checks in `apply`, workers run the rewrite.

use crate::def::{DatasetDef, ShardArg, Stage};
use crate::error::DatasetError;

/// A static sharding policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticPolicy {
    /// Worker `i` of `n` keeps files `f` with `f mod n == i`.
    File,
    /// Worker `i` of `n` keeps output elements with index `mod n == i`.
    Data,
    /// FILE when the source reads at least as many files as there are workers,
    /// DATA otherwise.
    FileOrData,
    /// Every `shard(SHARD_HINT, SHARD_HINT)` becomes `shard(n, i)`.
    Hint,
}

impl StaticPolicy {
    pub fn name(self) -> &'static str {
        match self {
            StaticPolicy::File => "FILE",
            StaticPolicy::Data => "DATA",
            StaticPolicy::FileOrData => "FILE_OR_DATA",
            StaticPolicy::Hint => "HINT",
        }
    }
}

fn refused(field: String, message: String) -> DatasetError {
    DatasetError::InvalidSpec { field, message }
}

impl DatasetDef {
    /// Whether any `shard` stage, nested pipelines included, uses `SHARD_HINT`.
    pub fn has_shard_hint(&self) -> bool {
        self.stages.iter().any(|s| match s {
            Stage::Shard { num_shards, index } => {
                *num_shards == ShardArg::Hint || *index == ShardArg::Hint
            }
            Stage::Zip { datasets } => datasets.iter().any(DatasetDef::has_shard_hint),
            Stage::Concatenate { dataset } => dataset.has_shard_hint(),
            _ => false,
        })
    }

    /// The files of the source stage, if it reads files (and `list_files` was
    /// resolved).
    pub fn source_files(&self) -> Option<&[String]> {
        match self.stages.first()? {
            Stage::ListFiles { files, .. } => files.as_deref(),
            Stage::TfRecord { files, .. }
            | Stage::TextLines { files }
            | Stage::WebDataset { files } => Some(files),
            Stage::Parquet(p) => Some(&p.files),
            _ => None,
        }
    }

    /// Checks that dynamic sharding can split this pipeline: one source, known
    /// split units, no `SHARD_HINT`.
    pub fn check_dynamic(&self) -> Result<(), DatasetError> {
        self.check_no_hint("DYNAMIC")?;
        for (i, s) in self.stages.iter().enumerate() {
            if let Stage::Zip { .. } | Stage::Concatenate { .. } = s {
                let op = s.op_name();
                return Err(refused(
                    format!("stages[{i}].{op}"),
                    format!(
                        "DYNAMIC sharding cannot split a pipeline whose `{op}` joins a second \
                         source: the dispatcher splits only the first stage. Use OFF, or a \
                         static policy (FILE, DATA, FILE_OR_DATA, HINT)"
                    ),
                ));
            }
        }
        if let Some(Stage::Parquet(p)) = self.stages.first() {
            if !p.is_resolved() {
                return Err(refused(
                    "stages[0].parquet.row_groups".into(),
                    "the files' footers were not read; register the dataset with a dispatcher, \
                     which reads them once so that every worker splits the same row groups"
                        .into(),
                ));
            }
        }
        if let Some(Stage::ListFiles { files: None, .. }) = self.stages.first() {
            return Err(refused(
                "stages[0].list_files".into(),
                "the file pattern was not resolved; register the dataset with a dispatcher, \
                 which lists the files once so that the split order is fixed"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Checks that `policy` can shard this pipeline among `num_workers` workers.
    pub fn check_static(
        &self,
        policy: StaticPolicy,
        num_workers: usize,
    ) -> Result<(), DatasetError> {
        let name = policy.name();
        if num_workers == 0 {
            return Err(refused(
                "worker_addresses".into(),
                format!(
                    "{name} sharding needs the dispatcher's fixed worker list \
                     (`--worker-addresses`), and it is empty; start the dispatcher with the \
                     workers' addresses, or use OFF or DYNAMIC"
                ),
            ));
        }
        if policy != StaticPolicy::Hint {
            self.check_no_hint(name)?;
        }
        match policy {
            StaticPolicy::File => self.check_file(num_workers).map(|_| ()),
            StaticPolicy::Data | StaticPolicy::FileOrData => Ok(()),
            StaticPolicy::Hint if !self.has_shard_hint() => Err(refused(
                "stages".into(),
                "HINT sharding replaces shard(SHARD_HINT, SHARD_HINT) stages, and the pipeline \
                 has none; add {\"shard\": {\"num_shards\": \"SHARD_HINT\", \"index\": \
                 \"SHARD_HINT\"}} where the data should be divided, or use DATA"
                    .into(),
            )),
            StaticPolicy::Hint => Ok(()),
        }
    }

    fn check_no_hint(&self, mode: &str) -> Result<(), DatasetError> {
        if self.has_shard_hint() {
            return Err(refused(
                "stages".into(),
                format!(
                    "shard(SHARD_HINT) is a placeholder that only the HINT processing mode \
                     replaces, and this job's mode is {mode}; use HINT, or give shard numbers"
                ),
            ));
        }
        Ok(())
    }

    /// The source's file count, or why FILE sharding cannot divide it.
    fn check_file(&self, num_workers: usize) -> Result<usize, DatasetError> {
        let first = self.stages.first().map(Stage::op_name).unwrap_or("(none)");
        let Some(files) = self.source_files() else {
            return Err(refused(
                format!("stages[0].{first}"),
                format!(
                    "FILE sharding divides the files of a file source (list_files, tfrecord, \
                     text_lines, webdataset, parquet), and `{first}` reads no files; use DATA or FILE_OR_DATA"
                ),
            ));
        };
        if files.len() < num_workers {
            return Err(refused(
                format!("stages[0].{first}"),
                format!(
                    "FILE sharding: the source has {} file(s), not enough for the {num_workers} \
                     workers of the dispatcher's worker list (each needs at least one); use \
                     DATA or FILE_OR_DATA, more files, or fewer workers",
                    files.len()
                ),
            ));
        }
        Ok(files.len())
    }

    /// This pipeline as worker `index` of `num_workers` runs it under `policy`.
    pub fn for_worker(
        &self,
        policy: StaticPolicy,
        num_workers: usize,
        index: usize,
    ) -> Result<DatasetDef, DatasetError> {
        self.check_static(policy, num_workers)?;
        if index >= num_workers {
            return Err(refused(
                "worker_index".into(),
                format!("worker index {index} is not below the number of workers {num_workers}"),
            ));
        }
        let file_ok = self.check_file(num_workers).is_ok();
        let mut out = self.clone();
        match policy {
            StaticPolicy::File => out.keep_files(num_workers, index),
            StaticPolicy::FileOrData if file_ok => out.keep_files(num_workers, index),
            StaticPolicy::Data | StaticPolicy::FileOrData => out.stages.push(Stage::Shard {
                num_shards: ShardArg::Value(num_workers as u64),
                index: ShardArg::Value(index as u64),
            }),
            StaticPolicy::Hint => out.replace_hints(num_workers as u64, index as u64),
        }
        Ok(out)
    }

    fn keep_files(&mut self, n: usize, i: usize) {
        let keep = |files: &mut Vec<String>| {
            *files = std::mem::take(files)
                .into_iter()
                .enumerate()
                .filter(|(f, _)| f % n == i)
                .map(|(_, name)| name)
                .collect();
        };
        match self.stages.first_mut() {
            Some(Stage::ListFiles { files: Some(files), .. })
            | Some(Stage::TfRecord { files, .. })
            | Some(Stage::TextLines { files })
            | Some(Stage::WebDataset { files }) => keep(files),
            Some(Stage::Parquet(p)) => p.keep_files(n, i),
            _ => {}
        }
    }

    fn replace_hints(&mut self, n: u64, i: u64) {
        for s in &mut self.stages {
            match s {
                Stage::Shard { num_shards, index } => {
                    if *num_shards == ShardArg::Hint {
                        *num_shards = ShardArg::Value(n);
                    }
                    if *index == ShardArg::Hint {
                        *index = ShardArg::Value(i);
                    }
                }
                Stage::Zip { datasets } => datasets.iter_mut().for_each(|d| d.replace_hints(n, i)),
                Stage::Concatenate { dataset } => dataset.replace_hints(n, i),
                _ => {}
            }
        }
    }
}
