//! The pool: N Python processes, each behind a supervising thread, fed from one
//! bounded queue of calls; the [`PythonExecutor`] a worker hands its pipelines.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, sync_channel, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sluice_dataset::{PyCall, PyFailure, PyFunction, PyReply, PythonExecutor};

use crate::codec::Hello;
use crate::config::{PoolConfig, PoolError};
use crate::process::StartError;
use crate::stats::{Counters, PoolStats};
use crate::supervisor::{Job, Supervisor};
use crate::watchdog::Watchdog;

/// Distinct functions the pool remembers keys for; past it the table is cleared
/// (keys are never reused, so a forgotten function is just loaded again).
const MAX_KEYS: usize = 1024;

/// A worker's pool of Python processes. Dropping it closes the queue: each
/// supervisor finishes the call it runs, then kills its process and ends.
pub struct Pool {
    jobs: SyncSender<Job>,
    hello: Hello,
    processes: usize,
    stats: Arc<Counters>,
    keys: Mutex<Keys>,
    watchdog: Arc<Watchdog>,
}

#[derive(Default)]
struct Keys {
    by_function: HashMap<Arc<PyFunction>, u64>,
    next: u64,
}

impl Pool {
    /// Starts `config.processes` processes and waits for each to say hello; fails
    /// when the interpreter cannot be started or lacks numpy.
    pub fn start(config: PoolConfig) -> Result<Pool, PoolError> {
        config.validate()?;
        let python = config.python.display().to_string();
        let interpreter = |why: String| PoolError::Interpreter { python: python.clone(), why };
        let processes = config.processes;
        let watchdog = Watchdog::start(processes)
            .map_err(|e| interpreter(format!("no watchdog thread: {e}")))?;
        let (jobs, rx) = sync_channel(config.queue_bound);
        let rx = Arc::new(Mutex::new(rx));
        let stats = Arc::new(Counters::default());
        let config = Arc::new(config);
        let (ready_tx, ready) = channel();
        for index in 0..processes {
            let s = Supervisor::new(index, config.clone(), watchdog.clone(), stats.clone());
            let (rx, ready_tx) = (rx.clone(), ready_tx.clone());
            std::thread::Builder::new()
                .name(format!("python-{index}"))
                .spawn(move || s.run(rx, ready_tx))
                .map_err(|e| interpreter(format!("cannot start a thread: {e}")))?;
        }
        drop(ready_tx);
        let mut hello = None;
        for _ in 0..processes {
            match ready.recv() {
                Ok(Ok(h)) => hello = Some(h),
                Ok(Err(StartError::NoNumpy(e))) => {
                    return Err(interpreter(format!(
                        "{e}; install numpy there or name another interpreter with --python"
                    )))
                }
                Ok(Err(StartError::Spawn(e))) => {
                    return Err(interpreter(format!(
                        "{e}; name a Python 3 interpreter with numpy with --python"
                    )))
                }
                Err(_) => return Err(interpreter("a supervising thread ended at start".into())),
            }
        }
        let hello = hello.expect("at least one process");
        tracing::info!(processes, python = %hello.python, "Python pool started");
        Ok(Pool { jobs, hello, processes, stats, keys: Mutex::new(Keys::default()), watchdog })
    }

    /// What the processes reported at start (Python, numpy, cloudpickle versions).
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    pub fn stats(&self) -> PoolStats {
        let s = &self.stats;
        PoolStats {
            restarts: s.restarts.load(Ordering::Relaxed),
            calls: s.calls.load(Ordering::Relaxed),
            elements: s.elements.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
        }
    }

    /// Sends `payload` through one process and back (a measure of the pipes).
    pub fn echo(&self, payload: Bytes) -> Result<Bytes, PyFailure> {
        let (reply, rx) = channel();
        self.jobs.send(Job::Echo { payload, reply }).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }

    fn key(&self, function: &Arc<PyFunction>) -> u64 {
        // A short section with no blocking call: a std Mutex.
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keys.by_function.get(function) {
            return *k;
        }
        if keys.by_function.len() >= MAX_KEYS {
            keys.by_function.clear();
        }
        let k = keys.next;
        keys.next += 1;
        keys.by_function.insert(function.clone(), k);
        k
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Calls still running belong to stages that are gone (each holds the pool).
        self.watchdog.close();
    }
}

fn stopped() -> PyFailure {
    PyFailure::new("ProcessDied", "the worker's Python pool has stopped")
}

impl PythonExecutor for Pool {
    fn version(&self) -> &str {
        &self.hello.python
    }

    fn processes(&self) -> usize {
        self.processes
    }

    fn prepare(&self, function: &Arc<PyFunction>, made_with: &str) -> Result<(), PyFailure> {
        let (reply, rx) = channel();
        let key = self.key(function);
        let job =
            Job::Prepare { function: function.clone(), made_with: made_with.into(), key, reply };
        self.jobs.send(job).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }

    fn submit(&self, call: PyCall, ticket: u64, reply: Sender<PyReply>) {
        let key = self.key(&call.function);
        if let Err(e) = self.jobs.send(Job::Call { call, key, ticket, reply }) {
            if let Job::Call { reply, ticket, .. } = e.0 {
                let _ = reply.send(PyReply { ticket, response: Err(stopped()) });
            }
        }
    }
}
