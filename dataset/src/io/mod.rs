//! File access for file sources: plain paths, `file://`, `s3://`, `gs://`.
//! (Being written; see issue 5.)

use crate::def::{DatasetDef, Stage};
use crate::error::DatasetError;

impl DatasetDef {
    /// Lists the files of every unresolved `list_files` stage (nested pipelines
    /// included) into its `files`: sorted, then shuffled by `seed` when asked. The
    /// dispatcher calls it once at registration so that the split order is part of
    /// the replicated state. Blocking: call it off an async runtime's threads.
    pub fn resolve_files(&mut self) -> Result<(), DatasetError> {
        for s in &self.stages {
            if let Stage::ListFiles { files: None, pattern, .. } = s {
                return Err(DatasetError::Unsupported(format!("list_files `{pattern}`: not yet")));
            }
        }
        Ok(())
    }
}
