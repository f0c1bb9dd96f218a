//! `sluice.admin`: the dispatcher group's membership changes from Python, as
//! `sluice admin add-dispatcher` / `remove-dispatcher` (`sluice_dispatcher::admin`;
//! docs/operations-procedures.md). The calls go to a dispatcher's Raft port with
//! the group's peer credentials.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use sluice_dispatcher::admin::{self, AdminError, AdminTarget};
use sluice_security::{ClientSecurity, Secret};

use crate::errors::{self, Kind};
use crate::{blocking, runtime, security};

fn target(
    raft_address: &str,
    timeout: f64,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    peer_secret_file: Option<PathBuf>,
) -> PyResult<AdminTarget> {
    let tls = security::tls(tls_cert, tls_key, tls_ca)?;
    let secret = peer_secret_file
        .map(|p| Secret::from_file("peer_secret_file", &p))
        .transpose()
        .map_err(|e| errors::invalid_argument(e.to_string()))?;
    let security = ClientSecurity::new(tls.as_ref(), secret.as_ref())
        .map_err(|e| errors::invalid_argument(e.to_string()))?;
    let raft_addresses = raft_address
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    Ok(AdminTarget {
        raft_addresses,
        timeout: blocking::seconds("timeout", timeout)?.max(Duration::from_secs(1)),
        security,
    })
}

fn to_py(e: AdminError) -> PyErr {
    let message = e.to_string();
    match e {
        AdminError::Refused { code, .. } => errors::new_err(Kind::of_code(code), message),
        AdminError::NoAnswer { .. } => errors::deadline_exceeded(message),
        AdminError::NoAddress | AdminError::BadAddress { .. } | AdminError::NotRaftPort { .. } => {
            errors::invalid_argument(message)
        }
    }
}

/// Adds dispatcher `node_id` at `address` (`"host:port[/raft_port]"`); returns the
/// voters (node id → client address).
#[pyfunction]
#[pyo3(signature = (raft_address, node_id, address, *, timeout = 90.0, tls_cert = None,
    tls_key = None, tls_ca = None, peer_secret_file = None))]
#[allow(clippy::too_many_arguments)]
pub fn add_dispatcher(
    py: Python<'_>,
    raft_address: &str,
    node_id: u64,
    address: String,
    timeout: f64,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    peer_secret_file: Option<PathBuf>,
) -> PyResult<BTreeMap<u64, String>> {
    let t = target(raft_address, timeout, tls_cert, tls_key, tls_ca, peer_secret_file)?;
    let rt = runtime::get()?;
    let work = async move { admin::add_dispatcher(&t, node_id, &address).await };
    let voters = blocking::run(py, &rt, None, "add_dispatcher", work)?.map_err(to_py)?;
    Ok(voters.voters)
}

/// Removes dispatcher `node_id` from the group; returns the voters.
#[pyfunction]
#[pyo3(signature = (raft_address, node_id, *, timeout = 90.0, tls_cert = None, tls_key = None,
    tls_ca = None, peer_secret_file = None))]
#[allow(clippy::too_many_arguments)]
pub fn remove_dispatcher(
    py: Python<'_>,
    raft_address: &str,
    node_id: u64,
    timeout: f64,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    peer_secret_file: Option<PathBuf>,
) -> PyResult<BTreeMap<u64, String>> {
    let t = target(raft_address, timeout, tls_cert, tls_key, tls_ca, peer_secret_file)?;
    let rt = runtime::get()?;
    let work = async move { admin::remove_dispatcher(&t, node_id).await };
    let voters = blocking::run(py, &rt, None, "remove_dispatcher", work)?.map_err(to_py)?;
    Ok(voters.voters)
}
