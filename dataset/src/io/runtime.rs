//! The process-wide tokio runtime that object-store I/O runs on.
//!
//! The executor is synchronous and runs on plain std threads, while `object_store`
//! is async. The obvious bridge, `Runtime::block_on`, panics on a thread that is
//! already inside a runtime context — and `DatasetDef::resolve_files` is called by
//! the dispatcher from `tokio::task::spawn_blocking`, which is exactly such a
//! thread. So instead [`run`] *spawns* the future on a dedicated runtime (two worker
//! threads named `sluice-io`, created on first use) and waits for its result on a
//! `std::sync::mpsc` channel, which blocks only the calling thread and works from
//! any thread that is not one of the `sluice-io` workers themselves (none of our
//! code calls it from there).

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::DatasetError;

/// Worker threads of the I/O runtime: object-store calls are network-bound, two
/// threads keep dozens of streams moving.
const IO_THREADS: usize = 2;

/// The I/O runtime's handle, creating the runtime on first use.
pub(crate) fn handle() -> Result<Handle, DatasetError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .thread_name("sluice-io")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match rt {
        Ok(rt) => Ok(rt.handle().clone()),
        Err(e) => Err(DatasetError::io("(I/O runtime)", format!("cannot start the runtime: {e}"))),
    }
}

/// Runs `fut` on the I/O runtime and blocks the calling (non-`sluice-io`) thread
/// until it finishes. `what` names the file for the error if the task dies.
pub(crate) fn run<T, F>(what: &str, fut: F) -> Result<T, DatasetError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, DatasetError>> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle()?.spawn(async move {
        // The receiver only goes away if the caller did, then nobody needs the result.
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| DatasetError::io(what, "the I/O task panicked or was cancelled"))?
}
