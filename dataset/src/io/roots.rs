//! Data roots: the files and objects a process may read on behalf of a pipeline.
//!
//! Why: a dataset spec comes from whoever can reach a dispatcher, and a worker opens
//! whatever file names it carries (`text_lines` of `/etc/passwd`, a `list_files` of
//! `/proc/self/*`). File access is therefore granted, not assumed: the dispatcher
//! checks every name of a spec against its roots at registration (so a bad spec is
//! refused before it is stored), and the worker checks every file again right before
//! opening it (the worker's roots are the ones that count: it is the process that
//! reads, and a symlink may have changed since registration).
//!
//! The check:
//! - a local path (plain or `file://`) is made absolute, then canonicalised
//!   (symlinks and `..` resolved) before it is compared with the roots, which are
//!   canonical too; the comparison is per path component, so `/data` does not admit
//!   `/data-secret`. A path that does not exist yet is canonicalised up to its
//!   longest existing ancestor and normalised lexically after it. [`DataRoots::check`]
//!   returns the canonical path and the caller opens *that*, so what was checked is
//!   what is opened (a directory swapped for a symlink between the two remains a
//!   window: see docs/security.md).
//! - an object URL (`s3://`, `gs://`) matches a root of the same scheme and bucket
//!   whose prefix it starts with on a `/` boundary (`s3://b/data` admits
//!   `s3://b/data/x`, never `s3://b/data-secret/x`); keys with `.` or `..` segments
//!   are refused outright.
//! - a glob pattern is checked by its fixed prefix (the components before the first
//!   one holding `*`, `?` or `[`) and, once listed, by every match.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::listing::has_glob;
use super::url::{parse, ObjectUrl, Target};
use crate::error::DatasetError;

/// The flag (and environment variable) that sets the roots, named in every refusal.
pub const DATA_ROOTS_FLAG: &str = "--data-roots (env SLUICE_DATA_ROOTS)";

/// One allowed root.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Root {
    /// A canonical local directory (or file).
    Local(PathBuf),
    /// `scheme://bucket/prefix`; `prefix` has no leading or trailing `/` and may
    /// be empty (the whole bucket).
    Object { scheme: &'static str, bucket: String, prefix: String },
}

impl fmt::Display for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Root::Local(p) => write!(f, "file://{}", p.display()),
            Root::Object { scheme, bucket, prefix } if prefix.is_empty() => {
                write!(f, "{scheme}://{bucket}")
            }
            Root::Object { scheme, bucket, prefix } => write!(f, "{scheme}://{bucket}/{prefix}"),
        }
    }
}

/// The files and objects a process may read. Cheap to clone.
///
/// [`DataRoots::unrestricted`] (the default) admits everything: it is for a
/// process reading its own files (`DatasetDef::iter_local` in a user's program,
/// tests); servers always run with a list ([`DataRoots::parse`] or
/// [`DataRoots::defaults`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataRoots {
    /// `None`: unrestricted.
    roots: Option<Arc<Vec<Root>>>,
}

impl DataRoots {
    /// Admits every file and object (no trust boundary: the caller's own files).
    pub fn unrestricted() -> Self {
        DataRoots { roots: None }
    }

    /// Admits nothing: every file read is refused until roots are given.
    pub fn none() -> Self {
        DataRoots { roots: Some(Arc::new(Vec::new())) }
    }

    /// Parses a comma-separated list of roots: absolute or relative directories,
    /// `file:///dir`, `s3://bucket[/prefix]`, `gs://bucket[/prefix]`. Local roots
    /// must exist (they are canonicalised now). An empty list admits nothing.
    pub fn parse(list: &str) -> Result<Self, DatasetError> {
        let roots = list
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(parse_root)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DataRoots { roots: Some(Arc::new(roots)) })
    }

    /// The defaults of a server: on a loopback listen address, the current directory
    /// and the system temp directory (so `sluice local`, `sample-data` and tests
    /// writing to temp dirs just work); off loopback, nothing. A current directory
    /// that is the file system's root is left out (it would admit everything).
    pub fn defaults(loopback: bool) -> Self {
        if !loopback {
            return Self::none();
        }
        let mut roots = Vec::new();
        let candidates = [std::env::current_dir().ok(), Some(std::env::temp_dir())];
        for dir in candidates.into_iter().flatten() {
            match dir.canonicalize() {
                Ok(c) if c.parent().is_none() => {
                    tracing::warn!(
                        dir = %c.display(),
                        "not a default data root: it is the file system's root; give {DATA_ROOTS_FLAG}"
                    );
                }
                Ok(c) if !roots.contains(&Root::Local(c.clone())) => roots.push(Root::Local(c)),
                _ => {}
            }
        }
        DataRoots { roots: Some(Arc::new(roots)) }
    }

    /// Whether every file is admitted.
    pub fn is_unrestricted(&self) -> bool {
        self.roots.is_none()
    }

    /// Checks `url` (a path, `file://`, `s3://` or `gs://` name) and returns what to
    /// open: for a local file its canonical path, for an object the URL itself.
    /// Refused names get a [`DatasetError::Forbidden`] naming `url` and the flag.
    pub fn check(&self, url: &str) -> Result<String, DatasetError> {
        let target = parse(url)?;
        let Some(roots) = &self.roots else {
            return Ok(match target {
                Target::Local { path, .. } => path.to_string_lossy().into_owned(),
                Target::Object(_) => url.to_string(),
            });
        };
        match target {
            Target::Local { path, .. } => {
                let canonical = canonical(&path).map_err(|e| DatasetError::io(url, e))?;
                if local_within(roots, &canonical) {
                    Ok(canonical.to_string_lossy().into_owned())
                } else {
                    Err(self.refusal(url, Some(&canonical)))
                }
            }
            Target::Object(o) => {
                if bad_key(&o.key) {
                    return Err(self.refusal_with(url, "its key has a `.` or `..` segment"));
                }
                if roots.iter().any(|r| object_within(&o, r)) {
                    Ok(url.to_string())
                } else {
                    Err(self.refusal(url, None))
                }
            }
        }
    }

    /// Checks a glob pattern by its fixed prefix (the components before the first
    /// one holding a glob character): every match lies under it, so if it is
    /// outside every root, so is every match. Matches are checked again when listed.
    pub fn check_pattern(&self, pattern: &str) -> Result<(), DatasetError> {
        let Some(roots) = &self.roots else {
            return Ok(());
        };
        let admitted = match parse(pattern)? {
            Target::Local { path, .. } => {
                let fixed: PathBuf = path
                    .components()
                    .take_while(|c| !has_glob(&c.as_os_str().to_string_lossy()))
                    .collect();
                // A `..` after a glob character could climb out of the fixed
                // directory: only the fixed part may hold one (it is resolved).
                let climbs = path
                    .components()
                    .skip_while(|c| !has_glob(&c.as_os_str().to_string_lossy()))
                    .any(|c| c == std::path::Component::ParentDir);
                if climbs {
                    return Err(self.refusal_with(pattern, "it has a `..` after a glob character"));
                }
                let fixed = if fixed.as_os_str().is_empty() { PathBuf::from(".") } else { fixed };
                let canonical = canonical(&fixed).map_err(|e| DatasetError::io(pattern, e))?;
                local_within(roots, &canonical)
            }
            Target::Object(o) => {
                let key: Vec<&str> = o.key.split('/').take_while(|c| !has_glob(c)).collect();
                let fixed = ObjectUrl { key: key.join("/"), ..o };
                !bad_key(&fixed.key) && roots.iter().any(|r| object_within(&fixed, r))
            }
        };
        if admitted {
            Ok(())
        } else {
            Err(self.refusal_with(pattern, "its fixed directory is not under a root"))
        }
    }

    fn refusal(&self, url: &str, resolved: Option<&Path>) -> DatasetError {
        let why = match resolved {
            Some(p) if p != Path::new(url) => format!("it resolves to {}", p.display()),
            _ => String::new(),
        };
        self.refusal_with(url, &why)
    }

    fn refusal_with(&self, url: &str, why: &str) -> DatasetError {
        let roots = match &self.roots {
            Some(r) if !r.is_empty() => {
                r.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
            }
            _ => "none".to_string(),
        };
        let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
        DatasetError::Forbidden {
            file: url.to_string(),
            message: format!(
                "outside the data roots{why}; allowed: {roots}. A dispatcher and its workers \
                 read only under {DATA_ROOTS_FLAG}: add a root that contains it"
            ),
        }
    }
}

impl fmt::Display for DataRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.roots {
            None => f.write_str("(unrestricted)"),
            Some(r) if r.is_empty() => f.write_str("(none)"),
            Some(r) => {
                let list: Vec<String> = r.iter().map(|r| r.to_string()).collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

fn parse_root(root: &str) -> Result<Root, DatasetError> {
    let bad = |m: String| DatasetError::Unsupported(format!("{DATA_ROOTS_FLAG}: {m}"));
    for scheme in ["s3", "gs"] {
        if let Some(rest) = root.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let prefix = prefix.trim_matches('/');
            if bucket.is_empty() {
                return Err(bad(format!("`{root}`: expected {scheme}://BUCKET[/PREFIX]")));
            }
            if bad_key(prefix) && !prefix.is_empty() {
                return Err(bad(format!("`{root}`: the prefix has a `.` or `..` segment")));
            }
            let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
            return Ok(Root::Object { scheme, bucket, prefix });
        }
    }
    let path = match root.strip_prefix("file://") {
        Some(p) if p.starts_with('/') => p,
        Some(_) => return Err(bad(format!("`{root}`: a file:// root needs file:///PATH"))),
        None if root.contains("://") => {
            return Err(bad(format!("`{root}`: use a path, file:///, s3:// or gs://")))
        }
        None => root,
    };
    let canonical = Path::new(path)
        .canonicalize()
        .map_err(|e| bad(format!("`{root}`: {e} (a local root must exist)")))?;
    Ok(Root::Local(canonical))
}

/// `path` absolute with symlinks and `..` resolved; for a path that does not exist,
/// its longest existing ancestor canonicalised and the rest normalised lexically.
fn canonical(path: &Path) -> std::io::Result<PathBuf> {
    let absolute =
        if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    match absolute.canonicalize() {
        Ok(c) => return Ok(c),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let mut rest = Vec::new();
    let mut existing = absolute.as_path();
    let base = loop {
        match existing.canonicalize() {
            Ok(c) => break c,
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            Err(e) => {
                let (Some(parent), Some(name)) =
                    (existing.parent(), existing.components().next_back())
                else {
                    return Err(e);
                };
                rest.push(name);
                existing = parent;
            }
        }
    };
    let mut out = base;
    for c in rest.into_iter().rev() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    Ok(out)
}

/// Whether an object key has a `.` or `..` segment.
fn bad_key(key: &str) -> bool {
    key.split('/').any(|s| s == "." || s == "..")
}

fn object_within(o: &ObjectUrl, root: &Root) -> bool {
    let Root::Object { scheme, bucket, prefix } = root else {
        return false;
    };
    if o.scheme != *scheme || o.bucket != *bucket {
        return false;
    }
    prefix.is_empty()
        || o.key == *prefix
        || o.key.strip_prefix(prefix.as_str()).is_some_and(|r| r.starts_with('/'))
}

fn local_within(roots: &[Root], canonical: &Path) -> bool {
    roots.iter().any(|r| matches!(r, Root::Local(root) if canonical.starts_with(root)))
}

#[cfg(test)]
#[path = "roots_tests.rs"]
mod tests;
