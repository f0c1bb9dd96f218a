//! Child `sluice` processes (dispatchers, workers) that never outlive the harness.
//!
//! - A [`Child`] is SIGKILLed and reaped when dropped: when the run ends, on an
//!   error, on a panic (unwinding).
//! - If the harness dies without unwinding (Ctrl-C, SIGKILL, abort), the kernel kills the
//!   children: each is started with `PR_SET_PDEATHSIG = SIGKILL` (Linux). That
//!   signal follows the *thread* that forked the child, so every child is forked
//!   by one spawner thread that lives as long as the process, never by a tokio
//!   blocking thread that may retire.
//!
//! Each child's stderr is appended to its log file; its stdout's first line,
//! `listening on ADDR`, tells that it serves. Every wait has a deadline.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long a child may take to print `listening on`.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start one process (kept to start it again on the same port and state).
#[derive(Clone, Debug)]
pub struct Spec {
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
    /// stderr goes here (appended across restarts).
    pub log: PathBuf,
}

/// A running child.
pub struct Child {
    child: std::process::Child,
    /// Kept open: a closed pipe would kill the child on its next write.
    _stdout: BufReader<ChildStdout>,
    pub address: String,
}

impl Child {
    /// Starts the child and waits (bounded) for its `listening on` line. Blocking:
    /// call it from `spawn_blocking` in async code.
    pub fn start(spec: &Spec) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .with_context(|| format!("opening {}", spec.log.display()))?;
        let mut cmd = Command::new(&spec.exe);
        cmd.args(&spec.args)
            .envs(spec.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(
                "SLUICE_LOG",
                std::env::var("SLUICE_CHAOS_CHILD_LOG").unwrap_or("info,openraft=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = spawn(cmd)
            .with_context(|| format!("starting {} {:?}", spec.exe.display(), spec.args))?;
        let stdout = child.stdout.take().context("child stdout")?;
        // Read the first line on a thread, so a child that never prints cannot block
        // us past the deadline (killing it closes the pipe and ends the thread).
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let r = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send((r, reader));
        });
        let outcome = rx.recv_timeout(START_TIMEOUT);
        let mut guard = Reaper(Some(child));
        let what = || format!("sluice {}", spec.args.join(" "));
        match outcome {
            Ok((Ok(line), reader)) => match line.trim().strip_prefix("listening on ") {
                Some(address) => Ok(Child {
                    child: guard.0.take().context("child")?,
                    _stdout: reader,
                    address: address.to_string(),
                }),
                None => {
                    drop(guard);
                    bail!(
                        "{} printed {line:?}, not `listening on`; {}",
                        what(),
                        log_tail(&spec.log)
                    )
                }
            },
            Ok((Err(e), _)) => {
                drop(guard);
                bail!("reading from {}: {e}; {}", what(), log_tail(&spec.log))
            }
            Err(_) => {
                drop(guard);
                bail!(
                    "{} did not print `listening on` within {START_TIMEOUT:?}; {}",
                    what(),
                    log_tail(&spec.log)
                )
            }
        }
    }

    /// [`Child::start`] from async code.
    pub async fn start_async(spec: &Spec) -> anyhow::Result<Child> {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || Child::start(&spec)).await?
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// The OS process id (e.g. for `/proc/<id>/stat` figures).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGSTOP: the process freezes (its sockets stay open, nothing answers).
    pub fn pause(&self) -> anyhow::Result<()> {
        kill(self.pid(), Signal::SIGSTOP).context("SIGSTOP")
    }

    /// SIGCONT.
    pub fn resume(&self) -> anyhow::Result<()> {
        kill(self.pid(), Signal::SIGCONT).context("SIGCONT")
    }

    /// Whether it has exited (and is reaped).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Child {
    /// SIGKILL (also stops a paused process) and reap.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills and reaps a child not yet handed to a [`Child`].
struct Reaper(Option<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<std::process::Child>>);

/// Forks `cmd` on the spawner thread, with the parent-death signal set.
fn spawn(cmd: Command) -> std::io::Result<std::process::Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("chaos-spawner".into())
            .spawn(move || {
                // Lives until the process exits: the senders sit in a static.
                for (mut cmd, reply) in rx {
                    set_parent_death_signal(&mut cmd);
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the spawner thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    // A short section with no await: sending a request.
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, tx))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

#[cfg(target_os = "linux")]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as i32;
    // SAFETY: the closure runs in the forked child before exec and makes only two
    // async-signal-safe system calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl: then nobody would
            // send the signal; refuse to start instead.
            if nix::unistd::getppid().as_raw() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_cmd: &mut Command) {}

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

/// Reserves a port for a process that keeps its address across restarts: returns a
/// listener bound to it (drop it just before the process starts). The port is below
/// the kernel's ephemeral range, so neither a `bind(0)` (the proxies, moto) nor the
/// source port of an outgoing connection can take it while its process is down
/// between a kill and a restart; and it is never handed out twice by this process.
pub fn reserve_port() -> anyhow::Result<std::net::TcpListener> {
    use rand::Rng;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (low, high) = (10_000u16, ephemeral_low.max(10_500));
    // A short section with no await: picking and recording a port.
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let mut rng = rand::thread_rng();
    for _ in 0..1_000 {
        let port = rng.gen_range(low..high);
        if given.contains(&port) {
            continue;
        }
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            given.insert(port);
            return Ok(listener);
        }
    }
    bail!("no free port in {low}..{high} (below the ephemeral range) after 1000 tries")
}
