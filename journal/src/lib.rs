//! Sluice's journal: the durable storage under the dispatcher's Raft quorum.
//!
//! An append-only log of opaque entries indexed by `u64`, a vote, and snapshots, behind the
//! narrow [`Journal`] trait whose methods each document what is durable when they return.
//! The journal knows nothing about Raft: the openraft glue lives in the dispatcher.
//!
//! # Layout
//! - [`journal`](Journal) — the trait, [`LogState`], [`Recovery`], and the append/truncate/purge
//!   rules every backend enforces the same way.
//! - [`JournalError`] (`error`) — the one error type; variants carry the caller's decision.
//! - `location` — parses `path`, `sled:PATH`, `file://`, `memory://`, `s3://`, `gs://`.
//! - `frame` — `[crc32c][payload]` framing for sled values.
//! - `fs_sync` — fsync of directories for the local backends (sled, `file://`).
//! - [`WriteObserver`] (`observe`) — told how long each durable write took (the
//!   dispatcher's fsync-latency histogram), so this crate depends on no metrics crate.
//! - `sled_store` — the sled backend: a `log` tree keyed by big-endian index, a `meta` tree;
//!   `sled_store::format` holds the version, key names and value decoding that
//!   `sled_store::recover` (which verifies every value at open) shares with the handle.
//! - `object` — the object-store backend: immutable, create-if-absent segments under `log/`
//!   (the log is the fold of all segments), `vote/` and `snapshot/` objects, fencing by
//!   claiming sequence numbers. `object::segment` is the byte format, `object::recover` the
//!   fold and the torn-tail/corruption rules, `object::compact` what a purge lets us delete,
//!   `object::remote` timeouts, retries and error classes around object_store.
//! - `fuzzing` (feature `fuzzing`) — entry points for the fuzz targets in `fuzz/` and the
//!   corpus-replay test (`tests/fuzz_corpus.rs`); not an API.
//! - `testing` (feature `testing`) — the moto S3 server fixture for tests (the process is
//!   `sluice_testkit`'s; this adds the journal's `OpenOptions` for it).
//!
//! Data flow: [`open`] parses the location, opens the backend, which recovers (verifying every
//! checksum, cutting a torn tail, refusing corruption in the middle) and returns the handle
//! plus a [`Recovery`] report. The dispatcher's log store and state machine call the trait.
//! The formats are described in `docs/journal.md`.

mod error;
mod frame;
mod fs_sync;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod journal;
mod location;
mod object;
mod observe;
mod sled_store;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;
use std::time::Duration;

pub use error::JournalError;
pub use journal::{Journal, LogState, Recovery};
use location::Location;
pub use observe::WriteObserver;

/// How to open a journal; [`open`] uses [`OpenOptions::default`].
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Read object-store settings from the process environment (`AWS_*`, `GOOGLE_*`), as
    /// object_store's `from_env` does. Default: true.
    pub from_env: bool,
    /// Object-store settings named like the environment variables (`AWS_ENDPOINT`,
    /// `AWS_ALLOW_HTTP`, ...), applied over the environment. Lets tests that run in parallel
    /// threads point each journal at its own server without touching process-wide env.
    pub store_env: Vec<(String, String)>,
    /// Time limit of one remote call attempt (a large snapshot PUT gets proportionally more).
    pub op_timeout: Duration,
    /// Attempts of a retryable remote call (timeouts, 5xx, connection errors) before giving up.
    pub attempts: u32,
    /// Open to read, changing nothing: no claim of the next sequence number and no cleanup
    /// (object stores), no format key written and no interrupted purge finished (sled);
    /// every write is refused. The dispatcher checks a work_dir's formats this way before
    /// taking it over, so a work_dir it refuses (written by a newer build) is left as it was.
    /// sled writes its own files at every open, so a read-only sled open reads a copy of the
    /// directory in the system temp dir (removed when the handle is dropped).
    pub read_only: bool,
    /// Told how long each durable write (flush + fsync, or PUT) took. Default: none.
    pub observer: Option<Arc<dyn WriteObserver>>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            from_env: true,
            store_env: Vec::new(),
            op_timeout: Duration::from_secs(30),
            attempts: 4,
            read_only: false,
            observer: None,
        }
    }
}

impl OpenOptions {
    /// Default options plus explicit store settings (see [`OpenOptions::store_env`]).
    pub fn with_store_env(store_env: Vec<(String, String)>) -> Self {
        OpenOptions { store_env, ..OpenOptions::default() }
    }
}

/// Opens (creating if needed) the journal at `location`:
///   a plain path or `sled:PATH` → the sled backend in that directory;
///   `file:///abs/path`, `memory://anything`, `s3://bucket/prefix`, `gs://bucket/prefix` → the
///   object-store backend.
/// S3 settings come from the environment (AWS_ENDPOINT, AWS_ALLOW_HTTP, AWS_DEFAULT_REGION,
/// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; path-style), GCS from GOOGLE_* env as object_store
/// reads them. Two opens of the same `memory://NAME` in one process see the same data.
pub async fn open(location: &str) -> Result<(Arc<dyn Journal>, Recovery), JournalError> {
    open_with(location, &OpenOptions::default()).await
}

/// [`open`] with explicit [`OpenOptions`].
pub async fn open_with(
    location: &str,
    options: &OpenOptions,
) -> Result<(Arc<dyn Journal>, Recovery), JournalError> {
    match Location::parse(location)? {
        Location::Sled(path) => {
            let timing = observe::Timing(options.observer.clone());
            let (journal, recovery) =
                sled_store::SledJournal::open(path, options.read_only, timing).await?;
            Ok((Arc::new(journal), recovery))
        }
        other => {
            let (journal, recovery) = object::ObjectJournal::open(other, options).await?;
            Ok((Arc::new(journal), recovery))
        }
    }
}

/// Waits until no handle of the journal at `location` is open in this process
/// any more, for at most `within`; false if one still is. A stopped Raft node
/// drops its handles from tasks that end on their own shortly after it stopped,
/// so a server that must release its journal before it reports "stopped" (to be
/// started again in the same process) waits here. Object-store journals need no
/// wait: a new writer fences the old one.
pub async fn wait_closed(location: &str, within: std::time::Duration) -> bool {
    let Ok(Location::Sled(path)) = Location::parse(location) else { return true };
    let deadline = tokio::time::Instant::now() + within;
    while sled_store::is_open_in_process(&path) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    /// Callers spawn `open` on a multi-threaded runtime: its future must be `Send` (a std
    /// mutex guard held across an `.await` would break that, and only at the caller's build).
    #[test]
    fn open_is_send() {
        let options = OpenOptions::default();
        assert_send(&open_with("memory://send", &options));
        assert_send(&open("sled:/nonexistent"));
    }
}
