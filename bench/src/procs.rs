//! A Raft group of child `sluice dispatcher` processes, one per node.
//!
//! Starting, logging and reaping children is the chaos harness's
//! (`sluice_chaos::procs`): each child's stderr goes to `<logs>/node-<id>.log`
//! (appended across restarts), it is SIGKILLed and reaped when dropped and killed by
//! the kernel if the bench dies, and every wait has a deadline. This module adds
//! what the bench measures: when a node was spawned and how long it took to listen.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use sluice_chaos::procs::{log_tail, reserve_port, Child, Spec};
use sluice_client::{DispatcherClient, RetryPolicy};

/// `--worker-timeout-secs` of every dispatcher the bench starts for split loops: longer
/// than any bench run, since the fake workers of [`crate::driver`] do not heartbeat.
pub const FAKE_WORKER_TIMEOUT_SECS: &str = "86400";

/// How long a group may take to elect a leader.
pub const START_TIMEOUT: Duration = sluice_chaos::procs::START_TIMEOUT;

/// One running `sluice dispatcher` child.
pub struct DispatcherProc {
    _child: Child,
    /// When it was spawned, and how long until it printed `listening on`.
    pub spawned_at: Instant,
    pub listening_after: Duration,
}

impl DispatcherProc {
    fn start(spec: &Spec) -> anyhow::Result<DispatcherProc> {
        let spawned_at = Instant::now();
        let child = Child::start(spec)?;
        Ok(DispatcherProc { _child: child, spawned_at, listening_after: spawned_at.elapsed() })
    }

    /// SIGKILL and reap; returns the instant just before the signal was sent.
    pub fn kill(self) -> Instant {
        let at = Instant::now();
        drop(self);
        at
    }
}

/// A Raft group of `sluice dispatcher` processes on 127.0.0.1 sharing a work_dir (each
/// node in `node-<id>/`). Node ids are 1..=n.
pub struct Group {
    pub addresses: Vec<String>,
    specs: Vec<Spec>,
    nodes: Vec<Option<DispatcherProc>>,
}

impl Group {
    /// Starts `n` nodes journaling to `work_dir` (a directory or a URL), with `envs`
    /// added to their environment, logs in `logs/` (`<prefix>node-<id>.log`);
    /// `snapshot_every: None` leaves the dispatcher's default.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        exe: &Path,
        n: usize,
        work_dir: &str,
        envs: &[(String, String)],
        snapshot_every: Option<u64>,
        elements_per_split: u64,
        logs: &Path,
        prefix: &str,
    ) -> anyhow::Result<Group> {
        let mut addresses = vec![];
        let mut held = vec![];
        for _ in 0..n {
            let listener = reserve_port()?;
            addresses.push(format!("127.0.0.1:{}", listener.local_addr()?.port()));
            held.push(listener);
        }
        // Released just before the nodes start; the ports stay below the ephemeral
        // range, so nothing else takes them meanwhile or between a kill and a restart.
        drop(held);
        let peers: Vec<String> =
            addresses.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        let specs = (1..=n)
            .map(|id| {
                let mut args: Vec<String> = [
                    "dispatcher",
                    "--node-id",
                    &id.to_string(),
                    "--peers",
                    &peers.join(","),
                    "--work-dir",
                    work_dir,
                    "--elements-per-split",
                    &elements_per_split.to_string(),
                    // The split loops' fake workers never heartbeat: without this the
                    // dispatcher declares them lost after its default 10 s and ends
                    // their tasks (the restart fill runs for minutes).
                    "--worker-timeout-secs",
                    FAKE_WORKER_TIMEOUT_SECS,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                if let Some(every) = snapshot_every {
                    args.extend(["--snapshot-every".to_string(), every.to_string()]);
                }
                Spec {
                    exe: exe.to_path_buf(),
                    args,
                    envs: envs.to_vec(),
                    log: logs.join(format!("{prefix}node-{id}.log")),
                }
            })
            .collect();
        let mut group = Group { addresses, specs, nodes: (0..n).map(|_| None).collect() };
        for id in 1..=n as u64 {
            group.start_node(id).await?;
        }
        Ok(group)
    }

    /// Starts node `id` (again), on its work_dir and port; returns it.
    pub async fn start_node(&mut self, id: u64) -> anyhow::Result<&DispatcherProc> {
        let i = id as usize - 1;
        if let Some(old) = self.nodes[i].take() {
            old.kill();
        }
        let spec = self.specs[i].clone();
        let proc = tokio::task::spawn_blocking(move || DispatcherProc::start(&spec)).await??;
        Ok(self.nodes[i].insert(proc))
    }

    /// SIGKILLs node `id` and reaps it; returns the instant of the signal.
    pub fn kill(&mut self, id: u64) -> Option<Instant> {
        self.nodes.get_mut(id as usize - 1)?.take().map(DispatcherProc::kill)
    }

    pub fn log(&self, id: u64) -> &Path {
        &self.specs[id as usize - 1].log
    }

    /// A client of every node of the group.
    pub fn client(&self, policy: RetryPolicy) -> anyhow::Result<DispatcherClient> {
        Ok(DispatcherClient::new(&self.addresses, policy)?)
    }

    /// Waits (bounded) until a node says it leads; returns its id.
    pub async fn leader(&self) -> anyhow::Result<u64> {
        let client = self.client(RetryPolicy::default())?;
        let start = Instant::now();
        loop {
            let mut roles = BTreeMap::new();
            for (address, r) in client.status_of_each().await {
                match r.ok().and_then(|s| s.raft) {
                    Some(raft) if raft.role == "leader" => return Ok(raft.node_id),
                    Some(raft) => roles.insert(address, raft.role),
                    None => roles.insert(address, "unreachable".into()),
                };
            }
            if start.elapsed() > START_TIMEOUT {
                bail!("no leader within {START_TIMEOUT:?}: {roles:?}; {}", log_tail(self.log(1)));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills every node (also done on drop).
    pub fn stop(&mut self) {
        for node in self.nodes.iter_mut() {
            if let Some(p) = node.take() {
                p.kill();
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}
