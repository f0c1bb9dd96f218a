//! Test fixtures (feature `testing`): the S3-compatible test server (moto) with the
//! journal's [`OpenOptions`] for it, and raw access to a journal's object store for
//! damaging objects.
//!
//! The server process itself — where moto is installed, the reserved port, the
//! readiness wait, the kill on drop and when this process dies — is the harness's
//! (`sluice_testkit::MotoServer`); this wrapper adds what only the journal knows
//! ([`MotoServer::options`]) and the ways tests share one server. When moto is
//! missing, [`MotoServer::start`] panics with the install command: S3 tests fail,
//! never skip.

use std::sync::{Arc, Mutex, Weak};

use crate::location::Location;
use crate::{JournalError, OpenOptions};

/// A moto S3 server process with one bucket created (see `sluice_testkit::MotoServer`
/// for `endpoint`, `bucket`, `env`, `create_bucket`).
pub struct MotoServer {
    server: sluice_testkit::MotoServer,
}

impl std::ops::Deref for MotoServer {
    type Target = sluice_testkit::MotoServer;

    fn deref(&self) -> &sluice_testkit::MotoServer {
        &self.server
    }
}

impl MotoServer {
    /// Starts a server with bucket `"sluice"`. Panics, saying how to install moto, if it
    /// cannot be started.
    pub fn start() -> MotoServer {
        MotoServer::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server, or says why not.
    pub fn try_start() -> Result<MotoServer, sluice_testkit::Error> {
        Ok(MotoServer { server: sluice_testkit::MotoServer::try_start()? })
    }

    /// One server shared by every caller that holds the returned `Arc` at the same time
    /// (started on first use, stopped when the last holder drops it). Give each test its own
    /// bucket ([`sluice_testkit::MotoServer::create_bucket`]) or prefix.
    pub fn shared() -> Arc<MotoServer> {
        static SHARED: Mutex<Weak<MotoServer>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(MotoServer::start());
        *shared = Arc::downgrade(&server);
        server
    }

    /// One server for the whole process, never stopped before it exits, whose `AWS_*`
    /// settings are put in this process's environment on first use: for code that
    /// reads the environment, like the dataset crate's file layer (which caches one
    /// store per bucket, so the settings must be there before any store is built).
    /// Panics, saying how to install moto, if it cannot be started.
    pub fn in_process_env() -> Arc<MotoServer> {
        static SERVER: std::sync::OnceLock<Arc<MotoServer>> = std::sync::OnceLock::new();
        SERVER
            .get_or_init(|| {
                let server = MotoServer::start();
                for (k, v) in server.env() {
                    // Set once, before any thread of this process reads these
                    // variables (the first store is built after this returns).
                    std::env::set_var(k, v);
                }
                Arc::new(server)
            })
            .clone()
    }

    /// [`OpenOptions`] pointing at this server, ignoring the process environment.
    pub fn options(&self) -> OpenOptions {
        OpenOptions { from_env: false, store_env: self.env(), ..OpenOptions::default() }
    }
}

/// The journal's object store and its root path, built exactly as `open` builds it, so a
/// test can read, damage or delete the journal's objects.
pub fn object_store_for(
    location: &str,
    options: &OpenOptions,
) -> Result<(Arc<dyn object_store::ObjectStore>, object_store::path::Path), JournalError> {
    let loc = Location::parse(location)?;
    if matches!(loc, Location::Sled(_)) {
        return Err(JournalError::InvalidLocation(format!("{location}: not an object store")));
    }
    let remote = crate::object::remote_for_tests(&loc, options)?;
    Ok((remote.store(), remote.path("")))
}

/// Opens the sled database of a closed journal in `dir` (to damage it), waiting up
/// to `lock_wait` for sled's file lock: the dropped journal's last background
/// thread may hold it a moment longer. The same wait as the journal's own open.
pub fn open_sled_db(
    dir: &std::path::Path,
    lock_wait: std::time::Duration,
) -> Result<sled::Db, JournalError> {
    crate::sled_store::open_db(dir, &format!("sled:{}", dir.display()), lock_wait)
}

/// How many times sled journals on `dir` have fsynced in this process since it started:
/// one at open and one per acknowledged write (append, truncate, purge, vote, snapshot).
/// The fsyncs themselves are what `scripts/` strace test observes on a real dispatcher;
/// this counts the calls the journal makes, to check that none is skipped or doubled.
pub fn sled_sync_count(dir: &std::path::Path) -> u64 {
    crate::sled_store::sync_count(dir)
}
