//! The process-wide registry of workers running in this process, for
//! `target_workers = LOCAL` reads (tf.data's `LocalWorkers`).
//!
//! A worker server adds its advertised address when it starts serving and removes
//! it when it stops; a reader asks whether a task's worker address is local. The
//! registry is soft state of this process only: nothing outside it sees it.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Address → number of live registrations (a worker restarted in-process at the
/// same address may register before the old one unregistered).
/// A std `Mutex`: every section is one map operation, never an `.await`.
static LOCAL: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn table() -> MutexGuard<'static, BTreeMap<String, usize>> {
    LOCAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records that a worker serving at `address` runs in this process.
pub fn register(address: &str) {
    *table().entry(address.to_string()).or_insert(0) += 1;
}

/// Undoes one [`register`] of `address`.
pub fn unregister(address: &str) {
    let mut t = table();
    if let Some(n) = t.get_mut(address) {
        *n -= 1;
        if *n == 0 {
            t.remove(address);
        }
    }
}

/// Whether a worker at `address` runs in this process.
pub fn contains(address: &str) -> bool {
    table().contains_key(address)
}

/// Whether no worker runs in this process.
pub fn is_empty() -> bool {
    table().is_empty()
}

/// The addresses of the workers running in this process.
pub fn addresses() -> Vec<String> {
    table().keys().cloned().collect()
}

/// Registers an address for as long as the guard lives.
pub struct Registration {
    address: String,
}

impl Registration {
    pub fn new(address: &str) -> Self {
        register(address);
        Registration { address: address.to_string() }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        unregister(&self.address);
    }
}
