//! A worker is bound to the token it registered with (docs/security.md,
//! "Identity and transport").
//!
//! `RegisterWorker` binds the worker's address and `worker_uid` to the name of
//! the `worker` token it presented (the [`Caller`] the guard put in the
//! request); a later `RegisterWorker` or `WorkerHeartbeat` for that address, or
//! a `GetSplit` for that uid, that comes with another token's name is
//! `PermissionDenied`. So one worker token cannot report another worker's
//! tasks finished (`FinishTasks` rides on the heartbeat) or take its splits.
//!
//! Soft state, per node, not replicated: a restarted node or a new leader binds
//! an address or uid to the first token that uses it there (the worker's next
//! heartbeat, within one heartbeat interval). Without tokens (no `--auth-tokens`)
//! there is no caller and nothing is checked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_security::Caller;
use tonic::Status;

/// Bindings kept per kind before the map is cleared (uids change at every worker
/// restart; a cleared binding is made again on the next call).
const MAX_BINDINGS: usize = 65_536;

#[derive(Default)]
pub(crate) struct WorkerIdentities {
    /// A std mutex: short sections, no `.await` inside.
    inner: Mutex<Bindings>,
}

#[derive(Default)]
struct Bindings {
    by_address: HashMap<String, Arc<str>>,
    by_uid: HashMap<u64, Arc<str>>,
}

/// Binds `key` to `name` if unbound; refuses if bound to another name.
fn bind<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, Arc<str>>,
    key: K,
    name: &Arc<str>,
    what: impl std::fmt::Display,
) -> Result<(), Status> {
    if map.len() >= MAX_BINDINGS && !map.contains_key(&key) {
        map.clear();
    }
    match map.get(&key) {
        Some(bound) if bound != name => Err(Status::permission_denied(format!(
            "{what} is bound to the worker token `{bound}` it registered with; this request \
             came with the token `{name}`: a worker may act only for itself"
        ))),
        Some(_) => Ok(()),
        None => {
            map.insert(key, name.clone());
            Ok(())
        }
    }
}

impl WorkerIdentities {
    fn bindings(&self) -> std::sync::MutexGuard<'_, Bindings> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `RegisterWorker`: the address must be unbound or bound to this caller;
    /// binds the address and the uid.
    pub(crate) fn register(
        &self,
        caller: Option<&Caller>,
        address: &str,
        uid: u64,
    ) -> Result<(), Status> {
        let Some(caller) = caller else { return Ok(()) };
        let mut b = self.bindings();
        bind(
            &mut b.by_address,
            address.to_string(),
            &caller.name,
            format_args!("worker {address}"),
        )?;
        // A uid is a new process's: it may have been bound by the same token only.
        bind(&mut b.by_uid, uid, &caller.name, format_args!("worker uid {uid}"))
    }

    /// `WorkerHeartbeat` for `address`.
    pub(crate) fn check_address(
        &self,
        caller: Option<&Caller>,
        address: &str,
    ) -> Result<(), Status> {
        let Some(caller) = caller else { return Ok(()) };
        let what = format_args!("worker {address}");
        bind(&mut self.bindings().by_address, address.to_string(), &caller.name, what)
    }

    /// `GetSplit` for `uid`.
    pub(crate) fn check_uid(&self, caller: Option<&Caller>, uid: u64) -> Result<(), Status> {
        let Some(caller) = caller else { return Ok(()) };
        bind(&mut self.bindings().by_uid, uid, &caller.name, format_args!("worker uid {uid}"))
    }
}

#[cfg(test)]
mod tests {
    use sluice_security::Role;

    use super::*;

    fn caller(name: &str) -> Caller {
        Caller { role: Role::Worker, name: name.into() }
    }

    #[test]
    fn a_worker_is_bound_to_the_token_it_registered_with() {
        let ids = WorkerIdentities::default();
        let (a, b) = (caller("pool-a"), caller("pool-b"));
        ids.register(Some(&a), "10.0.0.1:5060", 7).unwrap();
        ids.check_address(Some(&a), "10.0.0.1:5060").unwrap();
        ids.check_uid(Some(&a), 7).unwrap();
        for refused in [
            ids.register(Some(&b), "10.0.0.1:5060", 8),
            ids.check_address(Some(&b), "10.0.0.1:5060"),
            ids.check_uid(Some(&b), 7),
        ] {
            let status = refused.unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied);
            assert!(status.message().contains("`pool-a`"), "{}", status.message());
            assert!(status.message().contains("`pool-b`"), "{}", status.message());
        }
        // Another address is b's to take; without tokens nothing is checked.
        ids.register(Some(&b), "10.0.0.2:5060", 9).unwrap();
        ids.check_address(None, "10.0.0.1:5060").unwrap();
    }
}
