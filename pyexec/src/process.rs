//! One Python process of the pool: started with the runner script, spoken to in
//! frames, its stderr forwarded to `tracing`, killed and reaped when dropped.
//!
//! No process outlives the worker: a [`Process`] is SIGKILLed and reaped on drop,
//! and the kernel kills it if the worker dies without unwinding
//! (`PR_SET_PDEATHSIG`). The death signal follows the *thread* that forked the
//! child, so each process is started by its supervising thread, which lives as
//! long as the pool.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, BufWriter, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::codec::{self, Answer, Hello};
use crate::config::PoolConfig;
use crate::frame::{read_frame, FrameBuilder, FrameError};
use crate::watchdog::Watchdog;

/// The runner, embedded: started as `<python> -u -c <RUNNER>`.
pub const RUNNER: &str = include_str!("runner.py");

/// How long a process may take to say hello (import numpy and cloudpickle).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of a process's stderr kept for the message when it dies.
const TAIL_LINES: usize = 40;
/// A longer stderr line is cut.
const MAX_LINE: u64 = 8192;

pub(crate) struct Process {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// Disconnects when the stderr thread has read EOF.
    stderr_done: Receiver<()>,
    pub(crate) hello: Hello,
}

/// Why a process could not start.
pub(crate) enum StartError {
    /// The interpreter could not be run, or died before saying hello.
    Spawn(String),
    /// It said hello, but cannot run Python stages (no numpy).
    NoNumpy(String),
}

impl Process {
    /// Starts process `index` and waits (up to [`START_TIMEOUT`]) for its hello.
    pub(crate) fn start(
        index: usize,
        config: &PoolConfig,
        watchdog: &Watchdog,
    ) -> Result<Process, StartError> {
        let mut cmd = Command::new(&config.python);
        cmd.arg("-u")
            .arg("-c")
            .arg(RUNNER)
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("OMP_NUM_THREADS", "1")
            .env("MKL_NUM_THREADS", "1")
            .env("SLUICE_PY_CALL_TIMEOUT", config.call_timeout.as_secs_f64().to_string())
            .env("SLUICE_PY_MEMORY_LIMIT", config.memory_limit_bytes.unwrap_or(0).to_string())
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a terminal's Ctrl-C goes to the worker, which
            // decides when its processes end.
            .process_group(0);
        set_parent_death_signal(&mut cmd);
        let mut child =
            cmd.spawn().map_err(|e| StartError::Spawn(format!("cannot start it: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three pipes were asked for")
        };
        grow_pipe(&stdin);
        grow_pipe(&stdout);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (done_tx, stderr_done) = channel::<()>();
        let t = tail.clone();
        let pid = child.id();
        std::thread::Builder::new()
            .name(format!("python-{index}-stderr"))
            .spawn(move || {
                forward_stderr(index, pid, stderr, &t);
                drop(done_tx);
            })
            .map_err(|e| StartError::Spawn(format!("cannot start a thread: {e}")))?;
        let mut p = Process {
            child,
            stdin: BufWriter::with_capacity(1 << 16, stdin),
            stdout: BufReader::with_capacity(1 << 16, stdout),
            tail,
            stderr_done,
            hello: Hello {
                python: String::new(),
                numpy: String::new(),
                numpy_error: String::new(),
                cloudpickle: String::new(),
            },
        };
        watchdog.arm(index, pid, Instant::now() + START_TIMEOUT);
        let first = p.recv();
        let timed_out = watchdog.disarm(index);
        match first {
            Ok(Answer::Hello(h)) if h.numpy.is_empty() => Err(StartError::NoNumpy(h.numpy_error)),
            Ok(Answer::Hello(h)) => {
                tracing::info!(
                    process = index,
                    pid,
                    python = %h.python,
                    numpy = %h.numpy,
                    cloudpickle = %h.cloudpickle,
                    "Python process started"
                );
                p.hello = h;
                Ok(p)
            }
            Ok(other) => Err(StartError::Spawn(format!("it answered {other:?} before its hello"))),
            Err(e) => {
                let (status, tail) = p.kill_and_reap();
                let why = match e {
                    _ if timed_out => {
                        format!("it did not start within {}s", START_TIMEOUT.as_secs())
                    }
                    FrameError::Closed(_) => format!("it {status} before saying hello"),
                    FrameError::Malformed(m) => {
                        format!("it answered something other than the runner's hello ({m})")
                    }
                };
                Err(StartError::Spawn(with_tail(why, &tail)))
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs the process's group: the processes the function forked die with
    /// it. (The group is the runner's own, `process_group(0)`, and outlives it
    /// only while a member lives, so its id is not reused meanwhile.)
    fn kill_group(&self) {
        let _ = crate::watchdog::kill_group(self.child.id());
    }

    /// Forgets the stderr lines so far: a failure then shows only what its own
    /// call printed.
    pub(crate) fn clear_tail(&self) {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub(crate) fn send(&mut self, frame: FrameBuilder) -> std::io::Result<()> {
        frame.write_to(&mut self.stdin)
    }

    pub(crate) fn recv(&mut self) -> Result<Answer, FrameError> {
        codec::answer(read_frame(&mut self.stdout)?)
    }

    /// Kills the process (if still running), reaps it, and returns how it ended
    /// ("was killed by signal 6 (SIGABRT)") and the last lines of its stderr.
    pub(crate) fn kill_and_reap(&mut self) -> (String, String) {
        self.kill_group();
        let _ = self.child.kill();
        let status = match self.child.wait() {
            Ok(s) => describe(s),
            Err(e) => format!("could not be reaped ({e})"),
        };
        // The stderr thread reads to EOF now that the process is gone (unless a
        // grandchild holds the pipe: then do not wait long).
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(1));
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        let tail: Vec<&str> = tail.iter().map(String::as_str).collect();
        (status, tail.join("\n"))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill_group();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// "exited with status 3", "was killed by signal 6 (SIGABRT)".
pub(crate) fn describe(status: ExitStatus) -> String {
    if let Some(sig) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(sig).map_or("?", |s| s.as_str());
        format!("was killed by signal {sig} ({name})")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}

pub(crate) fn with_tail(message: String, tail: &str) -> String {
    if tail.is_empty() {
        message
    } else {
        format!("{message}; its last words:\n{tail}")
    }
}

fn forward_stderr(index: usize, pid: u32, stderr: impl Read, tail: &Mutex<VecDeque<String>>) {
    let mut r = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut r).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        tracing::info!(target: "sluice_pyexec::stderr", process = index, pid, "{text}");
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(text);
    }
}

/// Asks for a 1 MiB pipe buffer (the default 64 KiB makes a 1 MiB frame cross in
/// 16 rounds of wake-ups); unprivileged processes may go up to
/// `/proc/sys/fs/pipe-max-size`, 1 MiB by default. Best effort.
fn grow_pipe(fd: &impl std::os::fd::AsFd) {
    use nix::fcntl::{fcntl, FcntlArg};
    let _ = fcntl(fd, FcntlArg::F_SETPIPE_SZ(1 << 20));
}

fn set_parent_death_signal(cmd: &mut Command) {
    use nix::sys::signal::Signal;
    let parent = std::process::id() as i32;
    // SAFETY: runs in the forked child before exec; makes only async-signal-safe
    // system calls (prctl, getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The worker may have died between fork and prctl: refuse to run.
            if nix::unistd::getppid().as_raw() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}
