//! Where a file name points: the URL forms `io` accepts, parsed into a [`Target`].
//!
//! Why a module of its own: the facade (`io`) dispatches on the parsed target and the
//! object backend (`io::object`) names objects by [`ObjectUrl`]; keeping both here lets
//! the backends depend on this leaf rather than on the facade that calls them.

use std::fmt;
use std::path::PathBuf;

use crate::error::DatasetError;

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
pub(super) enum Target {
    /// A local path; `file_url` when it was given as `file://…` (results keep that form).
    Local {
        path: PathBuf,
        file_url: bool,
    },
    Object(ObjectUrl),
}

pub(super) fn parse(url: &str) -> Result<Target, DatasetError> {
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
