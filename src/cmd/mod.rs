//! The subcommands, one module each.

pub mod admin;
pub mod bench;
pub mod chaos;
pub mod checkpoint;
pub mod config;
pub mod limits;
pub mod local;
pub mod python;
pub mod read;
pub mod register;
pub mod sample;
pub mod security;
pub mod serve;
pub mod status;
pub mod telemetry;

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_client::{Client, RetryPolicy};
use sluice_dataset::DatasetDef;

/// Flags every command that talks to a dispatcher takes.
#[derive(Args, Clone, Debug)]
pub struct DispatcherFlags {
    /// Dispatcher address(es), host:port, comma-separated.
    #[arg(
        long = "dispatcher",
        env = "SLUICE_DISPATCHER",
        default_value = "127.0.0.1:5050",
        value_delimiter = ','
    )]
    pub dispatchers: Vec<String>,
    /// Give up on an unreachable dispatcher or worker after this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
    #[command(flatten)]
    pub tls: security::TlsFlags,
    #[command(flatten)]
    pub token: security::TokenFlags,
}

impl DispatcherFlags {
    pub fn retry(&self) -> RetryPolicy {
        RetryPolicy::default().with_deadline(Duration::from_secs(self.timeout_secs))
    }
    pub fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::with_security(&self.dispatchers, self.retry(), self.security()?)?)
    }

    /// The TLS and token this client presents to dispatchers and workers.
    pub fn security(&self) -> anyhow::Result<sluice_security::ClientSecurity> {
        let tls = self.tls.settings()?;
        Ok(sluice_security::ClientSecurity::new(tls.as_ref(), self.token.secret()?.as_ref())?)
    }
}

/// `--data-roots`: what the servers of a command may read (docs/security.md, "File
/// access: data roots").
#[derive(Args, Clone, Debug)]
pub struct DataRootsFlag {
    /// The only files and objects dataset specs may name, comma-separated:
    /// directories (or file:///DIR), s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX].
    /// Default: on a loopback listen address the current directory and the system
    /// temp directory; on any other address nothing (every file read is refused).
    #[arg(long = "data-roots", env = "SLUICE_DATA_ROOTS", value_name = "ROOTS")]
    pub data_roots: Option<String>,
}

impl DataRootsFlag {
    /// The parsed roots; `None` for the defaults of the listen address.
    pub fn roots(&self) -> anyhow::Result<Option<sluice_dataset::io::DataRoots>> {
        self.data_roots
            .as_deref()
            .map(sluice_dataset::io::DataRoots::parse)
            .transpose()
            .map_err(Into::into)
    }
}

/// Reads a JSON dataset spec from a file, or stdin for `-`.
pub fn read_spec(path: &str) -> anyhow::Result<DatasetDef> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the spec from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading the spec file {path}"))?
    };
    DatasetDef::from_json(&text).with_context(|| format!("in dataset spec {path}"))
}
