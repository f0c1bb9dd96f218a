//! Fixtures for the integration tests: an in-process cluster on 127.0.0.1 with
//! real gRPC, real `sluice` processes, and waits on conditions with deadlines.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use sluice_client::{Client, ElementStream, RetryPolicy};
use sluice_dataset::FunctionRegistry;
use sluice_dispatcher::{DispatcherConfig, DispatcherHandle};
use sluice_worker::{WorkerConfig, WorkerHandle};
use tokio::net::TcpListener;

pub const DEADLINE: Duration = Duration::from_secs(30);

/// Longer than any test's deadline: a wait that ends by itself fails the test.
pub const LONG: Duration = Duration::from_secs(3600);

/// A dispatcher whose long polls (consumers' and workers') may wait an hour, so
/// only the wake-up on a change can end one within `DEADLINE`.
pub fn patient_config() -> DispatcherConfig {
    DispatcherConfig { max_client_wait: LONG, ..DispatcherConfig::default() }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `cond` until it is true; panics with `what` after `DEADLINE`.
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A dispatcher and workers in this process, each on its own loopback port.
pub struct Cluster {
    /// `None` only while `restart_dispatcher` swaps it.
    pub dispatcher: Option<DispatcherHandle>,
    pub dispatcher_address: String,
    pub workers: Vec<WorkerHandle>,
}

impl Cluster {
    pub async fn start(workers: usize) -> Cluster {
        Self::start_with(workers, DispatcherConfig::default()).await
    }

    pub async fn start_with(workers: usize, config: DispatcherConfig) -> Cluster {
        init_tracing();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dispatcher =
            sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
        let dispatcher_address = dispatcher.address().to_string();
        let mut cluster =
            Cluster { dispatcher: Some(dispatcher), dispatcher_address, workers: vec![] };
        for _ in 0..workers {
            cluster.add_worker().await;
        }
        cluster.wait_workers(workers).await;
        cluster
    }

    /// A dispatcher whose `worker_addresses` lists `workers` workers, and those
    /// workers, in list order: `workers[i]` reads static shard `i`. Their ports are
    /// bound before the dispatcher starts, so the list is known without a race.
    pub async fn start_listed(workers: usize) -> Cluster {
        init_tracing();
        let mut listeners = vec![];
        for _ in 0..workers {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let worker_addresses: Vec<String> =
            listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
        let config = DispatcherConfig { worker_addresses, ..DispatcherConfig::default() };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dispatcher =
            sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
        let dispatcher_address = dispatcher.address().to_string();
        let mut cluster =
            Cluster { dispatcher: Some(dispatcher), dispatcher_address, workers: vec![] };
        for listener in listeners {
            let config = WorkerConfig::for_tests(cluster.addresses());
            let w = sluice_worker::spawn(listener, config, FunctionRegistry::builtin());
            cluster.workers.push(w.await.unwrap());
        }
        cluster.wait_workers(workers).await;
        cluster
    }

    /// Stops worker `i` and starts a new one (new `worker_uid`, no state) on the
    /// same address, at the same position in `workers`.
    pub async fn restart_worker(&mut self, i: usize) {
        let old = self.workers.remove(i);
        let address = old.address().to_string();
        old.shutdown().await.unwrap();
        let listener = TcpListener::bind(&address).await.unwrap();
        let config = WorkerConfig::for_tests(self.addresses());
        let new = sluice_worker::spawn(listener, config, FunctionRegistry::builtin());
        self.workers.insert(i, new.await.unwrap());
    }

    pub fn addresses(&self) -> Vec<String> {
        vec![self.dispatcher_address.clone()]
    }

    /// Stops the dispatcher and starts a new one, with empty in-memory state, on
    /// the same address.
    pub async fn restart_dispatcher(&mut self) {
        if let Some(old) = self.dispatcher.take() {
            old.shutdown().await.unwrap();
        }
        let listener = TcpListener::bind(&self.dispatcher_address).await.unwrap();
        let config = DispatcherConfig::default();
        let d = sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await;
        self.dispatcher = Some(d.unwrap());
    }

    pub async fn add_worker(&mut self) {
        self.add_worker_with(WorkerConfig::for_tests(self.addresses())).await;
    }

    pub async fn add_worker_with(&mut self, config: WorkerConfig) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = sluice_worker::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
        self.workers.push(w);
    }

    pub fn client(&self) -> Client {
        Client::new(&self.addresses(), RetryPolicy::for_tests()).unwrap()
    }

    /// Waits until `n` workers are registered with the dispatcher.
    pub async fn wait_workers(&self, n: usize) {
        let client = self.client();
        wait_until(&format!("{n} registered workers"), || {
            let client = client.clone();
            async move { client.status().await.map(|s| s.workers.len() >= n).unwrap_or(false) }
        })
        .await;
    }
}

/// Reads a stream of int64 scalars to the end.
pub async fn collect_i64(mut stream: ElementStream) -> Vec<i64> {
    let mut out = vec![];
    let read = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            out.push(e.expect("element").as_i64().expect("an int64 scalar"));
        }
    });
    read.await.expect("the read ends before the deadline");
    out
}

/// Value → how often it arrived.
pub fn counts(values: &[i64]) -> BTreeMap<i64, usize> {
    let mut m = BTreeMap::new();
    for v in values {
        *m.entry(*v).or_insert(0) += 1;
    }
    m
}

/// A `sluice` child process, killed (and reaped) when dropped: no server outlives
/// its test, also when the test panics.
pub struct Proc {
    pub child: Child,
    /// What it printed as `listening on ADDR`, for servers.
    pub address: Option<String>,
}

impl Proc {
    /// Starts `sluice ARGS`; for servers, waits for the `listening on` line.
    pub fn server(args: &[&str]) -> Proc {
        Self::server_env(args, &[])
    }

    /// Like [`Proc::server`], with extra environment variables.
    pub fn server_env(args: &[&str], envs: &[(String, String)]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(args)
            .env("SLUICE_LOG", std::env::var("SLUICE_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sluice");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read the listening line");
        let address = line.trim().strip_prefix("listening on ").map(str::to_string);
        assert!(address.is_some(), "sluice {args:?} printed {line:?} instead of `listening on`");
        Proc { child, address }
    }

    pub fn address(&self) -> &str {
        self.address.as_deref().unwrap_or_default()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `sluice ARGS` to completion, with a deadline; returns (status ok, stdout, stderr).
pub fn run_sluice(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_LOG", std::env::var("SLUICE_LOG").unwrap_or_else(|_| "warn".into()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    // Collect output on a thread so a full pipe never blocks the child.
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.expect("wait for sluice"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("sluice {args:?} did not finish within {DEADLINE:?}");
        }
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Blocking form of [`wait_until`] for tests that drive processes.
pub fn wait_blocking(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A port nothing listens on right now (bound and released; the small race with
/// other processes is acceptable on loopback).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The registry as the leader reports it: a follower's answer, or a leader's that
/// could not confirm itself in time, may lag.
pub async fn leader_status(client: &Client) -> sluice_proto::v1::GetStatusResponse {
    let start = Instant::now();
    loop {
        if let Ok(s) = client.status().await {
            if s.from_leader {
                return s;
            }
        }
        assert!(start.elapsed() < DEADLINE, "no leader answered status within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
