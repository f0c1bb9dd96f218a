//! One child process: what to start ([`Spec`]), the running process ([`Child`]),
//! and a command run to completion ([`run`]).
//!
//! A server tells that it serves by printing `listening on ADDR` as its first
//! stdout line; [`Child::start`] waits for that line with a deadline, on a reader
//! thread, so a child that hangs before printing cannot hang the caller (the thread
//! ends when the killed child's pipe closes). A child that exits instead, prints
//! something else, or stays silent past the deadline is killed and reaped, and the
//! error carries the tail of its stderr. After the line, stdout stays open (unread):
//! closing it would kill a server on its next write.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::stderr::{Capture, Stderr};
use crate::{spawner, Error};

/// How long a child may take to print `listening on`.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a killed or exited child's stderr may take to close, so its last
/// lines reach the tail before an error quotes it.
const STDERR_CLOSE: Duration = Duration::from_secs(5);

/// How to start one process (kept to start it again, e.g. on the same port).
#[derive(Clone, Debug)]
pub struct Spec {
    pub exe: PathBuf,
    pub args: Vec<String>,
    /// Added to the child's environment in order (a later entry wins).
    pub envs: Vec<(String, String)>,
    /// Taken out of the child's environment (before `envs` are added).
    pub env_removed: Vec<String>,
    pub stderr: Stderr,
    /// Pipe stdout to this process (to read `listening on`, or for the caller's
    /// [`Child::take_stdout`]); otherwise it goes to /dev/null.
    pub pipe_stdout: bool,
}

impl Spec {
    /// `exe ARGS`, stdout piped, stderr kept as an in-memory tail (not echoed).
    pub fn new<S: Into<String>>(
        exe: impl Into<PathBuf>,
        args: impl IntoIterator<Item = S>,
    ) -> Spec {
        Spec {
            exe: exe.into(),
            args: args.into_iter().map(Into::into).collect(),
            envs: vec![],
            env_removed: vec![],
            stderr: Stderr::Tail { echo: false },
            pipe_stdout: true,
        }
    }

    /// Adds environment variables (after those already set).
    pub fn envs(mut self, envs: impl IntoIterator<Item = (String, String)>) -> Spec {
        self.envs.extend(envs);
        self
    }

    /// Leaves `name` out of the child's environment, unless `envs` sets it.
    pub fn env_remove(mut self, name: &str) -> Spec {
        self.env_removed.push(name.to_string());
        self
    }

    pub fn stderr(mut self, stderr: Stderr) -> Spec {
        self.stderr = stderr;
        self
    }

    /// `NAME ARGS` (the executable's file name), for messages.
    pub fn what(&self) -> String {
        let name = self.exe.file_name().unwrap_or(self.exe.as_os_str()).to_string_lossy();
        std::iter::once(name.into_owned())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.exe);
        for name in &self.env_removed {
            cmd.env_remove(name);
        }
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(if self.pipe_stdout { Stdio::piped() } else { Stdio::null() });
        cmd
    }
}

/// A running child: SIGKILLed and reaped when dropped, killed by the kernel if this
/// process dies first (see [`crate::spawner`]).
pub struct Child {
    child: std::process::Child,
    what: String,
    /// Kept open after `listening on` (see the module doc); `None` once taken.
    stdout: Option<BufReader<ChildStdout>>,
    stderr: Capture,
    address: Option<String>,
    spawned_at: Instant,
    listening_after: Option<Duration>,
}

impl Child {
    /// Starts the process and returns at once (stdout is the caller's, see
    /// [`Child::take_stdout`]).
    pub fn spawn(spec: &Spec) -> Result<Child, Error> {
        let (stderr_stdio, capture) = spec.stderr.open()?;
        let mut cmd = spec.command();
        cmd.stderr(stderr_stdio);
        let spawned_at = Instant::now();
        let mut child =
            spawner::spawn(cmd).map_err(|source| Error::Spawn { what: spec.what(), source })?;
        capture.attach(child.stderr.take());
        let stdout = child.stdout.take().map(BufReader::new);
        Ok(Child {
            child,
            what: spec.what(),
            stdout,
            stderr: capture,
            address: None,
            spawned_at,
            listening_after: None,
        })
    }

    /// Starts a server and waits (up to [`START_TIMEOUT`]) for its `listening on`
    /// line. Blocking: call [`Child::start_async`] from async code.
    pub fn start(spec: &Spec) -> Result<Child, Error> {
        Child::start_within(spec, START_TIMEOUT)
    }

    /// [`Child::start`] with another deadline.
    pub fn start_within(spec: &Spec, within: Duration) -> Result<Child, Error> {
        let mut child = Child::spawn(spec)?;
        child.wait_listening(within)?;
        Ok(child)
    }

    /// [`Child::start`] on a blocking thread.
    pub async fn start_async(spec: &Spec) -> Result<Child, Error> {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || Child::start(&spec))
            .await
            .map_err(|e| Error::io("the start task", std::io::Error::other(e)))?
    }

    fn wait_listening(&mut self, within: Duration) -> Result<(), Error> {
        let mut stdout =
            self.stdout.take().ok_or_else(|| Error::Usage(format!("{}: no stdout", self.what)))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let r = stdout.read_line(&mut line).map(|_| line);
            let _ = tx.send((r, stdout));
        });
        let what = self.what.clone();
        match rx.recv_timeout(within) {
            Ok((Ok(line), stdout)) => {
                if let Some(address) = line.trim().strip_prefix("listening on ") {
                    self.address = Some(address.to_string());
                    self.listening_after = Some(self.spawned_at.elapsed());
                    self.stdout = Some(stdout);
                    return Ok(());
                }
                // End of stdout: the child exited (an exited child keeps its own
                // status through the kill), or it closed stdout and is killed now.
                let status = self.kill_and_status();
                let stderr = self.last_words();
                if line.is_empty() {
                    Err(Error::ExitedBeforeListening { what, status, stderr })
                } else {
                    Err(Error::NotListening { what, line, stderr })
                }
            }
            Ok((Err(e), _)) => {
                self.kill();
                Err(Error::io(format!("reading the stdout of {what}"), e))
            }
            Err(_) => {
                self.kill();
                Err(Error::StartTimeout { what, within, stderr: self.last_words() })
            }
        }
    }

    /// What it printed as `listening on ADDR`. Panics for a child started without
    /// waiting for that line ([`Child::spawn`]): a bug in the caller.
    pub fn address(&self) -> &str {
        self.address.as_deref().unwrap_or_else(|| panic!("{} is not a started server", self.what))
    }

    /// The OS process id (e.g. for `/proc/<id>/…` figures or `kill`).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// When it was spawned.
    pub fn spawned_at(&self) -> Instant {
        self.spawned_at
    }

    /// From spawn to its `listening on` line (`None` if not waited for).
    pub fn listening_after(&self) -> Option<Duration> {
        self.listening_after
    }

    /// Its stdout, for a child started with [`Child::spawn`].
    pub fn take_stdout(&mut self) -> Option<BufReader<ChildStdout>> {
        self.stdout.take()
    }

    /// `stderr ends: …` or `log PATH ends: …`, for messages (what has arrived so far).
    pub fn stderr_tail(&self) -> String {
        self.stderr.describe()
    }

    /// The tail of a killed or exited child, once its stderr has closed (waits a
    /// few seconds at most): what a test reads after the child ended, since
    /// the draining thread may not yet have read the pipe's last lines.
    pub fn last_words(&self) -> String {
        self.stderr.wait_closed(STDERR_CLOSE);
        self.stderr.describe()
    }

    fn signal(&self, signal: Signal, name: &'static str) -> Result<(), Error> {
        kill(Pid::from_raw(self.child.id() as i32), signal).map_err(|source| Error::Signal {
            what: self.what.clone(),
            signal: name,
            source,
        })
    }

    /// SIGSTOP: the process freezes (its sockets stay open, nothing answers).
    pub fn pause(&self) -> Result<(), Error> {
        self.signal(Signal::SIGSTOP, "SIGSTOP")
    }

    /// SIGCONT.
    pub fn resume(&self) -> Result<(), Error> {
        self.signal(Signal::SIGCONT, "SIGCONT")
    }

    /// SIGTERM: a server stops gracefully (a worker drains); see [`Child::try_wait`].
    pub fn terminate(&self) -> Result<(), Error> {
        self.signal(Signal::SIGTERM, "SIGTERM")
    }

    /// Its exit status if it has exited (reaping it), `None` while it runs.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Whether it has exited (and is reaped).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL (also ends a paused process) and reap. Idempotent.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn kill_and_status(&mut self) -> String {
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => format!("status unknown: {e}"),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A command run to completion.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// Runs `spec` to completion with `stdin` as its input, collecting stdout and
/// stderr whole (`spec.stderr` and `spec.pipe_stdout` are not used); past `within`
/// it is SIGKILLed and the error quotes its stderr.
pub fn run(spec: &Spec, stdin: Option<&str>, within: Duration) -> Result<Output, Error> {
    let mut cmd = spec.command();
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child =
        spawner::spawn(cmd).map_err(|source| Error::Spawn { what: spec.what(), source })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A child that exits without reading its input closes the pipe: its exit
        // status and stderr tell why, so a failed write is not an error here.
        let _ = pipe.write_all(input.as_bytes());
    }
    drop(child.stdin.take());
    let pid = Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    // Collect output on a thread so a full pipe never blocks the child.
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match rx.recv_timeout(within) {
        Ok(out) => {
            let out = out.map_err(|e| Error::io(format!("waiting for {}", spec.what()), e))?;
            Ok(Output { status: out.status, stdout: text(&out.stdout), stderr: text(&out.stderr) })
        }
        Err(_) => {
            // Not yet reaped (the thread reaps only after the pipes close), so the
            // pid is still this child's.
            let _ = kill(pid, Signal::SIGKILL);
            let stderr = match rx.recv_timeout(STDERR_CLOSE) {
                Ok(Ok(out)) => format!("stderr ends: {}", tail_of(&text(&out.stderr))),
                _ => "stderr unavailable".to_string(),
            };
            Err(Error::RunTimeout { what: spec.what(), within, stderr })
        }
    }
}

fn tail_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().rev().take(crate::stderr::TAIL_LINES).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}
