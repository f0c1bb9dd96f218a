//! One supervising thread per Python process: takes jobs from the pool's shared
//! queue, loads functions the process has not loaded yet, runs calls under a hard
//! deadline, and replaces the process when it dies, hangs or garbles an answer.
//!
//! Recovery: when the process breaks during a call, the outcomes it already sent
//! are kept, the process is killed and restarted, and the call's remaining inputs
//! are run **one at a time** on the fresh process, so only an input that breaks
//! the process again fails (`ProcessDied` or `Timeout`), after `retries` more
//! attempts. A one-input call's first break already was its attempt alone.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_dataset::{Element, PyCall, PyFailure, PyFunction, PyOp, PyOutcome, PyReply};

use crate::codec::{self, Answer, Hello};
use crate::config::PoolConfig;
use crate::frame::FrameError;
use crate::process::{with_tail, Process, StartError};
use crate::stats::Counters;
use crate::watchdog::Watchdog;

/// Added to a call's hard deadline (`call_timeout` × inputs): room for the
/// frames to cross and for Python's own `TimeoutError` to arrive first.
pub const GRACE: Duration = Duration::from_secs(2);
/// A load (an import) may take at least this long.
pub const MIN_LOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Functions one process keeps loaded; the least recently used is unloaded.
const MAX_LOADED: usize = 64;

pub(crate) enum Job {
    Call {
        call: PyCall,
        key: u64,
        ticket: u64,
        reply: Sender<PyReply>,
    },
    Prepare {
        function: Arc<PyFunction>,
        made_with: String,
        key: u64,
        reply: Sender<Result<(), PyFailure>>,
    },
    Echo {
        payload: Bytes,
        reply: Sender<Result<Bytes, PyFailure>>,
    },
}

/// Why an attempt stopped.
enum Stop {
    /// The function cannot be loaded (or the call cannot be sent): the call fails whole.
    Load(PyFailure),
    /// The process broke; it was killed and replaced.
    Broke(PyFailure),
}

pub(crate) struct Supervisor {
    index: usize,
    config: Arc<PoolConfig>,
    watchdog: Arc<Watchdog>,
    stats: Arc<Counters>,
    process: Option<Process>,
    /// Keys loaded in the current process, least recently used first.
    loaded: VecDeque<u64>,
}

impl Supervisor {
    pub(crate) fn new(
        index: usize,
        config: Arc<PoolConfig>,
        watchdog: Arc<Watchdog>,
        stats: Arc<Counters>,
    ) -> Self {
        Supervisor { index, config, watchdog, stats, process: None, loaded: VecDeque::new() }
    }

    /// Starts the process, reports it on `ready`, then serves jobs until the
    /// queue closes (the pool was dropped).
    pub(crate) fn run(
        mut self,
        jobs: Arc<Mutex<Receiver<Job>>>,
        ready: Sender<Result<Hello, StartError>>,
    ) {
        let _span = tracing::info_span!("python_process", index = self.index).entered();
        match Process::start(self.index, &self.config, &self.watchdog) {
            Ok(p) => {
                let _ = ready.send(Ok(p.hello.clone()));
                self.process = Some(p);
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        }
        drop(ready);
        loop {
            // Held while waiting: only one idle supervisor waits for the next job.
            let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
            match job {
                Err(_) => return,
                Ok(Job::Call { call, key, ticket, reply }) => {
                    let response = self.call(&call, key);
                    let _ = reply.send(PyReply { ticket, response });
                }
                Ok(Job::Prepare { function, made_with, key, reply }) => {
                    let r = self.ensure_loaded(key, &function, &made_with).map_err(|s| match s {
                        Stop::Load(f) | Stop::Broke(f) => f,
                    });
                    let _ = reply.send(r);
                }
                Ok(Job::Echo { payload, reply }) => {
                    let _ = reply.send(self.echo(&payload));
                }
            }
        }
    }

    fn call(&mut self, call: &PyCall, key: u64) -> Result<Vec<PyOutcome>, PyFailure> {
        let n = call.inputs.len();
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.stats.elements.fetch_add(n as u64, Ordering::Relaxed);
        let mut done = Vec::with_capacity(n);
        if n == 0 {
            return Ok(done);
        }
        let _span = tracing::debug_span!("python_call", function = call.function.display_name(), n)
            .entered();
        let mut first_break = match self.attempt(call, key, &call.inputs, &mut done) {
            Ok(()) => None,
            Err(Stop::Load(f)) => return Err(f),
            Err(Stop::Broke(f)) => Some(f),
        };
        if first_break.is_some() && n > 1 {
            tracing::info!(
                remaining = n - done.len(),
                "re-running the call's inputs one at a time"
            );
            first_break = None;
        }
        while done.len() < n {
            let i = done.len();
            let mut failure = first_break.take();
            let mut retries = call.retries;
            let outcome = loop {
                if let Some(f) = failure.take() {
                    if retries == 0 {
                        break PyOutcome::Failed(f);
                    }
                    retries -= 1;
                }
                let mut one = Vec::with_capacity(1);
                match self.attempt(call, key, &call.inputs[i..=i], &mut one) {
                    Ok(()) => break one.pop().expect("an attempt yields one outcome per input"),
                    Err(Stop::Load(f)) => return Err(f),
                    Err(Stop::Broke(f)) => failure = Some(f),
                }
            };
            done.push(outcome);
        }
        let failed = done.iter().filter(|o| matches!(o, PyOutcome::Failed(_))).count();
        self.stats.failures.fetch_add(failed as u64, Ordering::Relaxed);
        Ok(done)
    }

    /// Runs `inputs` in one CALL, appending their outcomes to `out` as they arrive.
    fn attempt(
        &mut self,
        call: &PyCall,
        key: u64,
        inputs: &[Element],
        out: &mut Vec<PyOutcome>,
    ) -> Result<(), Stop> {
        self.ensure_loaded(key, &call.function, &call.made_with)?;
        let frame = codec::call(key, call.op, inputs)
            .map_err(|m| Stop::Load(PyFailure::new("BadInput", m)))?;
        let n = inputs.len();
        let deadline = self.config.call_timeout.saturating_mul(n as u32).saturating_add(GRACE);
        let base = out.len();
        let p = self.process.as_mut().expect("ensure_loaded started a process");
        p.clear_tail();
        self.watchdog.arm(self.index, p.pid(), Instant::now() + deadline);
        let result = (|| -> Result<(), FrameError> {
            p.send(frame).map_err(FrameError::Closed)?;
            while out.len() - base < n {
                match p.recv()? {
                    Answer::Result { first, outcomes }
                        if first as usize == out.len() - base
                            && outcomes.len() <= n - (out.len() - base) =>
                    {
                        check_outcomes(call.op, &outcomes)?;
                        out.extend(outcomes);
                    }
                    other => return Err(unexpected(&other, "RESULT")),
                }
            }
            Ok(())
        })();
        let fired = self.watchdog.disarm(self.index);
        result.map_err(|e| {
            let what = format!(
                "running `{}` ({} input{})",
                call.function.display_name(),
                n,
                if n == 1 { "" } else { "s" }
            );
            Stop::Broke(self.replace(fired, deadline, &e, &what))
        })
    }

    fn ensure_loaded(
        &mut self,
        key: u64,
        function: &PyFunction,
        made_with: &str,
    ) -> Result<(), Stop> {
        if self.process.is_none() {
            self.restart();
        }
        let Some(p) = self.process.as_mut() else {
            return Err(Stop::Broke(PyFailure::new(
                "ProcessDied",
                "the Python process could not be restarted (see the worker's log)",
            )));
        };
        if let Some(at) = self.loaded.iter().position(|k| *k == key) {
            self.loaded.remove(at);
            self.loaded.push_back(key);
            return Ok(());
        }
        let frame = codec::load(key, function, made_with)
            .map_err(|m| Stop::Load(PyFailure::new("BadInput", m)))?;
        let timeout = self.config.call_timeout.max(MIN_LOAD_TIMEOUT) + GRACE;
        p.clear_tail();
        self.watchdog.arm(self.index, p.pid(), Instant::now() + timeout);
        let result = (|| -> Result<Result<(), PyFailure>, FrameError> {
            while self.loaded.len() >= MAX_LOADED {
                let old = self.loaded.pop_front().expect("not empty");
                p.send(codec::unload(old)).map_err(FrameError::Closed)?;
            }
            p.send(frame).map_err(FrameError::Closed)?;
            match p.recv()? {
                Answer::Loaded { key: k, result } if k == key => Ok(result),
                other => Err(unexpected(&other, "LOADED")),
            }
        })();
        let fired = self.watchdog.disarm(self.index);
        match result {
            Ok(Ok(())) => {
                self.loaded.push_back(key);
                Ok(())
            }
            Ok(Err(f)) => Err(Stop::Load(f)),
            Err(e) => {
                let what = format!("loading `{}`", function.display_name());
                Err(Stop::Load(self.replace(fired, timeout, &e, &what)))
            }
        }
    }

    fn echo(&mut self, payload: &Bytes) -> Result<Bytes, PyFailure> {
        if self.process.is_none() {
            self.restart();
        }
        let p = self.process.as_mut().ok_or_else(|| PyFailure::new("ProcessDied", "no process"))?;
        self.watchdog.arm(self.index, p.pid(), Instant::now() + MIN_LOAD_TIMEOUT);
        let r = p.send(codec::echo(payload)).map_err(FrameError::Closed).and_then(|()| p.recv());
        let fired = self.watchdog.disarm(self.index);
        match r {
            Ok(Answer::Echoed(b)) => Ok(b),
            Ok(other) => {
                Err(self.replace(fired, MIN_LOAD_TIMEOUT, &unexpected(&other, "ECHOED"), "echoing"))
            }
            Err(e) => Err(self.replace(fired, MIN_LOAD_TIMEOUT, &e, "echoing")),
        }
    }

    /// Kills and reaps the broken process, starts a fresh one, and says what
    /// happened as the failure of what it was doing.
    fn replace(
        &mut self,
        fired: bool,
        deadline: Duration,
        e: &FrameError,
        what: &str,
    ) -> PyFailure {
        let (status, tail) = match self.process.take() {
            Some(mut p) => p.kill_and_reap(),
            None => ("was gone".into(), String::new()),
        };
        self.loaded.clear();
        if self.watchdog.closing() {
            return PyFailure::new("ProcessDied", "the worker's Python pool was stopped");
        }
        self.stats.restarts.fetch_add(1, Ordering::Relaxed);
        let failure = if fired {
            PyFailure {
                error_type: "Timeout".into(),
                message: format!(
                    "the Python process {what} did not answer within {:.1}s (the worker's limit \
                     of {}s per call, --python-call-timeout-secs, plus {}s) and was killed; the \
                     function may be stuck in C code, or may have caught the TimeoutError raised \
                     at the limit",
                    deadline.as_secs_f64(),
                    self.config.call_timeout.as_secs_f64(),
                    GRACE.as_secs()
                ),
                traceback: tail,
            }
        } else if let FrameError::Malformed(m) = e {
            PyFailure {
                error_type: "BadOutput".into(),
                message: format!(
                    "the Python process {what} sent a malformed answer ({m}) and was restarted"
                ),
                traceback: tail,
            }
        } else {
            PyFailure {
                error_type: "ProcessDied".into(),
                message: format!("the Python process {what} {status}"),
                traceback: tail,
            }
        };
        tracing::warn!(
            process = self.index,
            error_type = %failure.error_type,
            "{}; restarting it",
            with_tail(failure.message.clone(), "")
        );
        self.restart();
        failure
    }

    fn restart(&mut self) {
        if self.watchdog.closing() {
            return;
        }
        match Process::start(self.index, &self.config, &self.watchdog) {
            Ok(p) => self.process = Some(p),
            Err(StartError::Spawn(m) | StartError::NoNumpy(m)) => {
                tracing::error!(process = self.index, "cannot restart the Python process: {m}");
            }
        }
    }
}

/// The outcome kinds `op` may answer (anything else is a malformed answer).
fn check_outcomes(op: PyOp, outcomes: &[PyOutcome]) -> Result<(), FrameError> {
    let fits = |o: &PyOutcome| {
        matches!(
            (op, o),
            (_, PyOutcome::Failed(_))
                | (PyOp::Map | PyOp::MapBatches, PyOutcome::Element(_))
                | (PyOp::Filter, PyOutcome::Keep(_))
                | (PyOp::FlatMap, PyOutcome::Elements(_))
        )
    };
    match outcomes.iter().find(|o| !fits(o)) {
        Some(o) => {
            let kind = match o {
                PyOutcome::Element(_) => "an element",
                PyOutcome::Keep(_) => "a keep flag",
                PyOutcome::Elements(_) => "a list of elements",
                PyOutcome::Failed(_) => "a failure",
            };
            Err(FrameError::Malformed(format!("a {} call answered {kind}", op.name())))
        }
        None => Ok(()),
    }
}

fn unexpected(answer: &Answer, wanted: &str) -> FrameError {
    let kind = match answer {
        Answer::Hello(_) => "HELLO",
        Answer::Loaded { .. } => "LOADED",
        Answer::Result { .. } => "RESULT out of order",
        Answer::Echoed(_) => "ECHOED",
    };
    FrameError::Malformed(format!("{kind} where {wanted} was due"))
}
