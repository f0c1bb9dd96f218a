//! Parsing a journal location string into the backend that serves it.

use std::path::PathBuf;

use crate::JournalError;

/// Where a journal lives, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// A sled database in this directory.
    Sled(PathBuf),
    /// Object store on the local filesystem, rooted at this directory.
    File(PathBuf),
    /// A process-wide in-memory object store with this name.
    Memory(String),
    /// S3 (or an S3-compatible server): bucket and key prefix (no leading/trailing '/').
    S3 { bucket: String, prefix: String },
    /// Google Cloud Storage: bucket and key prefix.
    Gcs { bucket: String, prefix: String },
}

impl Location {
    pub(crate) fn parse(s: &str) -> Result<Location, JournalError> {
        let invalid = |why: &str| JournalError::InvalidLocation(format!("{s:?}: {why}"));
        if s.is_empty() {
            return Err(invalid("empty"));
        }
        if let Some(path) = s.strip_prefix("sled:") {
            if path.is_empty() {
                return Err(invalid("sled: needs a directory path"));
            }
            return Ok(Location::Sled(PathBuf::from(path)));
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            return Ok(Location::Sled(PathBuf::from(s)));
        };
        match scheme {
            "file" => {
                let url = url::Url::parse(s).map_err(|e| invalid(&e.to_string()))?;
                let path = url
                    .to_file_path()
                    .map_err(|()| invalid("file:// needs an absolute path (file:///abs/path)"))?;
                Ok(Location::File(path))
            }
            "memory" => Ok(Location::Memory(rest.trim_end_matches('/').to_string())),
            "s3" | "gs" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(invalid("needs a bucket name"));
                }
                let prefix = prefix.trim_matches('/').to_string();
                let bucket = bucket.to_string();
                Ok(if scheme == "s3" {
                    Location::S3 { bucket, prefix }
                } else {
                    Location::Gcs { bucket, prefix }
                })
            }
            other => Err(invalid(&format!(
                "unknown scheme {other:?} (use a path, sled:PATH, file://, memory://, s3:// or gs://)"
            ))),
        }
    }

    /// The canonical form used in messages.
    pub(crate) fn display(&self) -> String {
        fn url(scheme: &str, bucket: &str, prefix: &str) -> String {
            if prefix.is_empty() {
                format!("{scheme}://{bucket}")
            } else {
                format!("{scheme}://{bucket}/{prefix}")
            }
        }
        match self {
            Location::Sled(p) => format!("sled:{}", p.display()),
            Location::File(p) => format!("file://{}", p.display()),
            Location::Memory(name) => format!("memory://{name}"),
            Location::S3 { bucket, prefix } => url("s3", bucket, prefix),
            Location::Gcs { bucket, prefix } => url("gs", bucket, prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let p = |s| Location::parse(s).unwrap();
        assert_eq!(p("/tmp/j"), Location::Sled("/tmp/j".into()));
        assert_eq!(p("rel/j"), Location::Sled("rel/j".into()));
        assert_eq!(p("sled:/tmp/j"), Location::Sled("/tmp/j".into()));
        assert_eq!(p("file:///tmp/j"), Location::File("/tmp/j".into()));
        assert_eq!(p("memory://node-1"), Location::Memory("node-1".into()));
        assert_eq!(p("s3://b/a/b/"), Location::S3 { bucket: "b".into(), prefix: "a/b".into() });
        assert_eq!(p("gs://b"), Location::Gcs { bucket: "b".into(), prefix: "".into() });
        assert_eq!(p("s3://b/x").display(), "s3://b/x");
        assert_eq!(p("/tmp/j").display(), "sled:/tmp/j");
        for bad in ["", "sled:", "s3://", "s3:///x", "ftp://h/x", "file://rel"] {
            assert!(
                matches!(Location::parse(bad), Err(JournalError::InvalidLocation(_))),
                "{bad:?} should be invalid"
            );
        }
    }
}
