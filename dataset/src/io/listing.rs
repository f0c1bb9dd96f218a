//! Bounded listing of local files matching a glob pattern.
//!
//! Why not `glob::glob`: it follows symbolic links under `**` with no loop
//! detection and no bound, so one `list_files` pattern over a directory holding a
//! link to its own parent walked on for as long as the machine let it (issue 31:
//! most of a core for 15–27 s after the caller had given up). A registration is a
//! request from a client; what it may cost the dispatcher is bounded like every
//! other input:
//!
//! - **depth**: at most [`MAX_LIST_DEPTH`] directories below the pattern's fixed
//!   directory (a pattern without `**` walks no deeper than it has components);
//! - **entries**: at most [`MAX_LIST_ENTRIES`] directory entries visited;
//! - **time**: the walk stops at its [`ListBudget`]'s deadline, or as soon as the
//!   budget is cancelled (the dispatcher cancels it when the request is dropped).
//!
//! Past a bound the listing fails with an error naming the pattern and the bound,
//! and saying how to narrow it. Links are followed (a data root may be reached
//! through one), but a link back to one of its own ancestors is a loop and is not
//! entered again (walkdir's loop detection). Directories that cannot match are
//! not entered: the components before the first `**` prune the walk.

use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glob::{MatchOptions, Pattern};

use crate::error::DatasetError;

/// The most directory levels a listing walks below the pattern's fixed directory.
pub const MAX_LIST_DEPTH: usize = 32;
/// The most directory entries one listing visits (matching or not).
pub const MAX_LIST_ENTRIES: u64 = 1_000_000;
/// How long one listing may take unless its caller gives another budget.
pub const LIST_DEADLINE: Duration = Duration::from_secs(60);

/// `*` and `?` stay within one path component, as in `glob::glob`.
const OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// What one listing may spend: a deadline, and a flag its caller sets to stop it.
#[derive(Clone, Debug)]
pub struct ListBudget {
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
}

impl Default for ListBudget {
    fn default() -> Self {
        ListBudget::new(LIST_DEADLINE)
    }
}

impl ListBudget {
    /// A budget of `time` from now.
    pub fn new(time: Duration) -> ListBudget {
        ListBudget { deadline: Instant::now() + time, cancelled: Arc::default() }
    }

    /// Stops every listing under this budget (and its clones) at its next entry.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub(crate) fn check(&self, pattern: &str) -> Result<(), DatasetError> {
        if self.cancelled.load(Ordering::Relaxed) {
            return Err(DatasetError::io(pattern, "listing cancelled: the request was dropped"));
        }
        if Instant::now() >= self.deadline {
            return Err(DatasetError::io(
                pattern,
                "listing took longer than its deadline; narrow the pattern (fewer `**`, a \
                 deeper fixed directory) or list fewer files",
            ));
        }
        Ok(())
    }
}

/// Whether a path component (or key segment) holds a glob character: the one
/// rule for where a pattern's fixed part ends (listing, data-roots checks).
pub(super) fn has_glob(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// Paths of the regular files matching `pattern` (unsorted), within the bounds
/// above and `budget`.
pub(super) fn list(pattern: &str, budget: &ListBudget) -> Result<Vec<String>, DatasetError> {
    let whole = Pattern::new(pattern)
        .map_err(|e| DatasetError::io(pattern, format!("bad glob pattern: {e}")))?;
    let path = Path::new(pattern);
    let comps: Vec<String> =
        path.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let fixed = comps.iter().take_while(|c| !has_glob(c)).count();
    // The fixed part is the directory to walk; a pattern with no glob names one path.
    let (base, rest) = if fixed == comps.len() {
        (path.to_path_buf(), &comps[comps.len()..])
    } else {
        (path.components().take(fixed).collect(), &comps[fixed..])
    };
    let relative = base.as_os_str().is_empty();
    let root = if relative { Path::new(".").to_path_buf() } else { base };
    // A walk never yields `.` or `..`: a pattern that climbs after its first glob
    // character is refused rather than matching nothing.
    if rest.iter().any(|c| c == "..") {
        return Err(DatasetError::io(
            pattern,
            "a `..` after a glob character is not supported; write the pattern without it",
        ));
    }
    // Component patterns before the first `**` prune the walk.
    let mut guide = vec![];
    for c in rest.iter().take_while(|c| c.as_str() != "**") {
        guide.push(Pattern::new(c).map_err(|e| DatasetError::io(pattern, e.to_string()))?);
    }
    let deep = guide.len() < rest.len();
    let max_depth = if deep { MAX_LIST_DEPTH } else { rest.len() };

    let walk = walkdir::WalkDir::new(&root).follow_links(true).max_depth(max_depth);
    let walk = walk.into_iter().filter_entry(|e| {
        let d = e.depth();
        d == 0
            || d > guide.len()
            || guide[d - 1].matches_with(&e.file_name().to_string_lossy(), OPTIONS)
    });
    let mut out = Vec::new();
    let mut visited = 0u64;
    for entry in walk {
        visited += 1;
        if visited > MAX_LIST_ENTRIES {
            return Err(DatasetError::io(
                pattern,
                format!(
                    "listing visited more than {MAX_LIST_ENTRIES} directory entries; narrow the \
                     pattern (a deeper fixed directory, fewer `**`)"
                ),
            ));
        }
        if visited.is_multiple_of(256) {
            budget.check(pattern)?;
        }
        let entry = match entry {
            Ok(e) => e,
            // A link to an ancestor: its files are listed once, through the ancestor.
            Err(e) if e.loop_ancestor().is_some() => continue,
            // Nothing at the fixed path: no match, which the caller reports.
            Err(e)
                if e.depth() == 0
                    && e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) =>
            {
                continue
            }
            Err(e) => {
                let at = e.path().map_or_else(|| pattern.to_string(), |p| p.display().to_string());
                return Err(DatasetError::io(at, e.to_string()));
            }
        };
        if !entry.file_type().is_file() {
            continue;
        }
        let p = entry.path();
        let p = if relative { strip_dot(p) } else { p };
        if whole.matches_path_with(p, OPTIONS) {
            out.push(p.to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// `./a/b` → `a/b` (a relative pattern's matches are relative like it).
fn strip_dot(p: &Path) -> &Path {
    match p.components().next() {
        Some(Component::CurDir) => p.strip_prefix(".").unwrap_or(p),
        _ => p,
    }
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
