//! Child `sluice dispatcher` processes, one per node of a group.
//!
//! Each child's stderr goes to `<logs>/node-<id>.log` (appended across restarts); its
//! stdout's first line, `listening on ADDR`, tells that it serves. A [`DispatcherProc`]
//! is SIGKILLed and reaped when dropped, so no child outlives the bench, also on an
//! error or a panic (unwinding). Every wait here has a deadline.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sluice_client::{DispatcherClient, RetryPolicy};

/// How long a child may take to print `listening on`, and a group to elect a leader.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start one node (kept so it can be started again on the same work_dir and port).
#[derive(Clone, Debug)]
struct NodeSpec {
    exe: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log: PathBuf,
}

/// One running `sluice dispatcher` child.
pub struct DispatcherProc {
    child: Child,
    /// Kept open: the child may print more, and a closed pipe would kill it on write.
    _stdout: BufReader<ChildStdout>,
    /// When `spawn` was called, and how long until it printed `listening on`.
    pub spawned_at: Instant,
    pub listening_after: Duration,
}

impl DispatcherProc {
    /// Starts the child and waits (bounded) for its `listening on` line.
    fn start(spec: &NodeSpec) -> anyhow::Result<DispatcherProc> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .with_context(|| format!("opening {}", spec.log.display()))?;
        let spawned_at = Instant::now();
        let mut child = Command::new(&spec.exe)
            .args(&spec.args)
            .envs(spec.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("SLUICE_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} {:?}", spec.exe.display(), spec.args))?;
        let stdout = child.stdout.take().context("child stdout")?;
        // Read the first line on a thread so that a child that never prints cannot
        // block us past the deadline (killing it closes the pipe and ends the thread).
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let r = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send((r, reader));
        });
        let outcome = rx.recv_timeout(START_TIMEOUT);
        let listening_after = spawned_at.elapsed();
        let mut guard = Reaper(Some(child));
        match outcome {
            Ok((Ok(line), reader)) if line.starts_with("listening on ") => {
                let child = guard.0.take().expect("child");
                Ok(DispatcherProc { child, _stdout: reader, spawned_at, listening_after })
            }
            Ok((Ok(line), _)) => {
                drop(guard);
                bail!(
                    "sluice {:?} printed {line:?} instead of `listening on`; {}",
                    spec.args,
                    log_tail(&spec.log)
                )
            }
            Ok((Err(e), _)) => {
                drop(guard);
                bail!("reading from sluice {:?}: {e}; {}", spec.args, log_tail(&spec.log))
            }
            Err(_) => {
                drop(guard);
                bail!(
                    "sluice {:?} did not print `listening on` within {START_TIMEOUT:?}; {}",
                    spec.args,
                    log_tail(&spec.log)
                )
            }
        }
    }

    /// SIGKILL and reap; returns the instant just before the signal was sent.
    pub fn kill(mut self) -> Instant {
        let at = Instant::now();
        let _ = self.child.kill();
        let _ = self.child.wait();
        at
    }
}

impl Drop for DispatcherProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills and reaps a child not yet handed to a [`DispatcherProc`].
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The last lines of a child's log, for error messages.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    format!(
        "log {} ends: {}",
        path.display(),
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    )
}

/// A port nothing listens on right now (bound and released: a small race on loopback).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A Raft group of `sluice dispatcher` processes on 127.0.0.1 sharing a work_dir (each
/// node in `node-<id>/`). Node ids are 1..=n.
pub struct Group {
    pub addresses: Vec<String>,
    specs: Vec<NodeSpec>,
    nodes: Vec<Option<DispatcherProc>>,
}

impl Group {
    /// Starts `n` nodes journaling to `work_dir` (a directory or a URL), with `envs`
    /// added to their environment, logs in `logs/`; `snapshot_every: None` leaves the
    /// dispatcher's default.
    pub async fn start(
        exe: &Path,
        n: usize,
        work_dir: &str,
        envs: &[(String, String)],
        snapshot_every: Option<u64>,
        logs: &Path,
    ) -> anyhow::Result<Group> {
        let mut addresses = vec![];
        for _ in 0..n {
            addresses.push(format!("127.0.0.1:{}", free_port()?));
        }
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
                    "1",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                if let Some(every) = snapshot_every {
                    args.extend(["--snapshot-every".to_string(), every.to_string()]);
                }
                NodeSpec {
                    exe: exe.to_path_buf(),
                    args,
                    envs: envs.to_vec(),
                    log: logs.join(format!("node-{id}.log")),
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
