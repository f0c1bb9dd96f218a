//! `sluice admin`: changing the dispatcher group's membership while it serves
//! (docs/operations-procedures.md). The calls go to a dispatcher's Raft port with
//! the group's peer credentials (`sluice_dispatcher::admin`): changing who votes is
//! a dispatcher's business, so no client or worker token can do it
//! (docs/security.md). Any node answers; a follower forwards to its leader.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use sluice_dispatcher::admin::{self, AdminTarget, Voters};
use sluice_security::{ClientSecurity, Secret};

#[derive(Args, Debug)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Add a dispatcher to the group: caught up as a learner, then made a voter.
    /// Start it first with an empty work_dir: `sluice dispatcher --node-id ID
    /// --peers <the group's entries and its own> --work-dir DIR`.
    AddDispatcher(AddArgs),
    /// Remove a dispatcher from the group (the leader too: it steps down). Stop its
    /// process afterwards.
    RemoveDispatcher(RemoveArgs),
}

/// How to reach the group's Raft ports.
#[derive(Args, Debug)]
pub struct PeerTarget {
    /// Raft port(s) of the group's dispatchers, HOST:PORT, comma-separated; the
    /// first that answers is asked (a follower forwards to the leader).
    #[arg(
        long = "raft-address",
        env = "SLUICE_RAFT_ADDRESS",
        default_value = "127.0.0.1:6050",
        value_delimiter = ','
    )]
    pub raft_addresses: Vec<String>,
    /// Give up after this many seconds (the new node's catch-up included).
    #[arg(long, env = "SLUICE_ADMIN_TIMEOUT_SECS", default_value_t = 90)]
    pub timeout_secs: u64,
    /// The group's TLS: with --tls-cert/--tls-key signed by the peer CA when the
    /// Raft ports require mutual TLS.
    #[command(flatten)]
    pub tls: super::security::TlsFlags,
    /// File holding the group's peer secret (as the dispatchers' --peer-secret-file).
    #[arg(long, env = "SLUICE_PEER_SECRET_FILE", value_name = "FILE")]
    pub peer_secret_file: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// The new node's id (unused in the group).
    #[arg(long)]
    pub id: u64,
    /// The new node's entry as in --peers: HOST:PORT[/RAFT_PORT] (client port, and
    /// Raft port or RAFT_HOST:RAFT_PORT; default PORT+1000).
    #[arg(long)]
    pub address: String,
    #[command(flatten)]
    pub target: PeerTarget,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The id of the node to remove.
    #[arg(long)]
    pub id: u64,
    #[command(flatten)]
    pub target: PeerTarget,
}

pub async fn run(a: AdminArgs) -> anyhow::Result<()> {
    let voters = match a.command {
        AdminCommand::AddDispatcher(a) => {
            admin::add_dispatcher(&a.target.target()?, a.id, &a.address)
                .await
                .with_context(|| format!("adding dispatcher {} at {}", a.id, a.address))?
        }
        AdminCommand::RemoveDispatcher(a) => admin::remove_dispatcher(&a.target.target()?, a.id)
            .await
            .with_context(|| format!("removing dispatcher {}", a.id))?,
    };
    print!("{}", render(&voters));
    Ok(())
}

fn render(v: &Voters) -> String {
    let list: Vec<String> = v.voters.iter().map(|(id, a)| format!("{id}={a}")).collect();
    format!("voters: {}\n(changed by node {})\n", list.join(","), v.changed_by)
}

impl PeerTarget {
    fn target(&self) -> anyhow::Result<AdminTarget> {
        let tls = self.tls.settings()?;
        let secret = self
            .peer_secret_file
            .as_deref()
            .map(|p| Secret::from_file("--peer-secret-file", p))
            .transpose()?;
        Ok(AdminTarget {
            raft_addresses: self.raft_addresses.clone(),
            timeout: Duration::from_secs(self.timeout_secs),
            security: ClientSecurity::new(tls.as_ref(), secret.as_ref())?,
        })
    }
}
