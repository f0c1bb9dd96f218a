//! One tokio runtime per process, and what a fork does to it.
//!
//! Every native object (clients, readers, servers) runs on the process's runtime.
//! A forked child (a PyTorch `DataLoader` worker) inherits the parent's memory but
//! none of its threads: the runtime it inherits has no workers, so anything that
//! waits on it hangs, and dropping it waits for threads that do not exist. So the
//! runtime is keyed by process id: the first use in a child builds a new one and
//! leaks the inherited one (never dropped), and objects made in the parent refuse
//! to be used in the child ([`Owned`]) and are leaked, not dropped, there.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

use pyo3::PyResult;
use tokio::runtime::Runtime;

use crate::errors;

struct PerProcess {
    pid: u32,
    runtime: Arc<Runtime>,
}

static RUNTIME: Mutex<Option<PerProcess>> = Mutex::new(None);

/// This process's runtime, built on first use (and again on first use after a fork).
pub fn get() -> PyResult<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(current) = slot.as_ref() {
        if current.pid == pid {
            return Ok(current.runtime.clone());
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("sluice")
        .enable_all()
        .build()
        .map_err(|e| errors::internal(format!("cannot start the Sluice runtime: {e}")))?;
    let fresh = PerProcess { pid, runtime: Arc::new(runtime) };
    if let Some(inherited) = slot.replace(fresh) {
        // Forked: its threads live only in the parent.
        std::mem::forget(inherited);
    }
    Ok(slot.as_ref().expect("just set").runtime.clone())
}

/// A value made in one process, with the runtime it uses. In another process (a
/// fork of the maker) it cannot be used, and dropping it there leaks it: its
/// tasks and connections belong to the parent's runtime.
pub struct Owned<T> {
    pid: u32,
    runtime: ManuallyDrop<Arc<Runtime>>,
    value: ManuallyDrop<T>,
}

impl<T> Owned<T> {
    pub fn new(runtime: Arc<Runtime>, value: T) -> Self {
        Owned {
            pid: std::process::id(),
            runtime: ManuallyDrop::new(runtime),
            value: ManuallyDrop::new(value),
        }
    }

    /// The value and its runtime, in the process that made them. `what` names the
    /// object for the error a forked child gets.
    pub fn get(&self, what: &str) -> PyResult<(&Arc<Runtime>, &T)> {
        self.check(what)?;
        Ok((&self.runtime, &self.value))
    }

    pub fn get_mut(&mut self, what: &str) -> PyResult<(&Arc<Runtime>, &mut T)> {
        self.check(what)?;
        Ok((&self.runtime, &mut self.value))
    }

    /// The value and its runtime, taken out (in the process that made them).
    pub fn into_inner(mut self, what: &str) -> PyResult<(Arc<Runtime>, T)> {
        self.check(what)?;
        // SAFETY: both taken once; `self` is forgotten, so Drop does not see them.
        let taken =
            unsafe { (ManuallyDrop::take(&mut self.runtime), ManuallyDrop::take(&mut self.value)) };
        std::mem::forget(self);
        Ok(taken)
    }

    fn check(&self, what: &str) -> PyResult<()> {
        if self.pid == std::process::id() {
            return Ok(());
        }
        Err(errors::failed_precondition(format!(
            "this {what} was made in process {} and cannot be used in process {} (a fork): \
             native clients, readers and servers do not survive fork(); make a new one in \
             the child (the Python-level objects do this by themselves)",
            self.pid,
            std::process::id()
        )))
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            return; // leaked: see the type's docs
        }
        let _guard = self.runtime.enter();
        // SAFETY: dropped once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.value);
            ManuallyDrop::drop(&mut self.runtime);
        }
    }
}
