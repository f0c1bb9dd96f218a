//! Where a child's stderr goes, and how its last lines are read back for errors.
//!
//! Two sinks: a log file (`sluice chaos` and `sluice bench` keep one per process,
//! appended across restarts, for the run's report), or a bounded in-memory tail (a
//! test keeps no files). The tail is filled by a thread that reads the pipe to its
//! end, so a child that writes a lot never blocks on a full pipe, and the memory
//! held is bounded (the last [`TAIL_LINES`] lines, each cut at [`MAX_LINE`] bytes).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::Error;

/// Lines kept by an in-memory tail.
pub const TAIL_LINES: usize = 20;
/// Longer lines are cut (a line is still read to its end).
pub const MAX_LINE: usize = 2048;
/// Lines of a log file quoted in an error.
const LOG_TAIL_LINES: usize = 5;

/// Where a child's stderr goes.
#[derive(Clone, Debug)]
pub enum Stderr {
    /// Appended to this file (created if missing), kept across restarts.
    File(PathBuf),
    /// Kept in memory (the last lines). With `echo`, each line is also printed with
    /// `eprintln!`, so a test shows its children's logs the way it shows its own
    /// output (captured by the test runner, printed when the test fails).
    Tail { echo: bool },
}

impl Stderr {
    /// The `Stdio` to give the child, and the capture to read it back from (to be
    /// [`Capture::attach`]ed to the child's pipe once it runs).
    pub(crate) fn open(&self) -> Result<(Stdio, Capture), Error> {
        match self {
            Stderr::File(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
                Ok((file.into(), Capture::File(path.clone())))
            }
            Stderr::Tail { echo } => {
                Ok((Stdio::piped(), Capture::Tail(Arc::new(Tail::new(*echo)))))
            }
        }
    }
}

/// A running child's stderr, as far as it can be read back.
#[derive(Clone, Debug)]
pub enum Capture {
    File(PathBuf),
    Tail(Arc<Tail>),
}

impl Capture {
    /// Starts the draining thread for a piped stderr (nothing to do for a file).
    pub(crate) fn attach(&self, pipe: Option<ChildStderr>) {
        if let (Capture::Tail(tail), Some(pipe)) = (self, pipe) {
            let tail = tail.clone();
            std::thread::spawn(move || tail.drain(pipe));
        }
    }

    /// Waits (at most `within`) until the child's stderr is closed, so that the
    /// tail holds its last words; for a file there is nothing to wait for.
    pub fn wait_closed(&self, within: Duration) {
        if let Capture::Tail(tail) = self {
            tail.wait_closed(within);
        }
    }

    /// `log PATH ends: a | b` or `stderr ends: a | b`, for error messages.
    pub fn describe(&self) -> String {
        match self {
            Capture::File(path) => log_tail(path),
            Capture::Tail(tail) => format!("stderr ends: {}", tail.lines().join(" | ")),
        }
    }
}

/// The last lines of a child's stderr, filled by a draining thread.
#[derive(Debug)]
pub struct Tail {
    echo: bool,
    /// (lines, closed). A std `Mutex`: short sections, no await.
    state: Mutex<(VecDeque<String>, bool)>,
    closed: Condvar,
}

impl Tail {
    fn new(echo: bool) -> Tail {
        Tail { echo, state: Mutex::new((VecDeque::new(), false)), closed: Condvar::new() }
    }

    fn drain(&self, pipe: ChildStderr) {
        let mut reader = BufReader::new(pipe);
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match reader.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&raw);
            let line = text.trim_end_matches(['\n', '\r']);
            if self.echo {
                eprintln!("{line}");
            }
            let mut cut = line.len().min(MAX_LINE);
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.0.len() == TAIL_LINES {
                state.0.pop_front();
            }
            state.0.push_back(line[..cut].to_string());
        }
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.closed.notify_all();
    }

    fn wait_closed(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while !state.1 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = self.closed.wait_timeout(state, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The lines kept so far, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.iter().cloned().collect()
    }
}

/// The last lines of a child's log file, for error messages.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(LOG_TAIL_LINES).collect();
    format!(
        "log {} ends: {}",
        path.display(),
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    )
}
