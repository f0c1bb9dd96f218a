//! What a pool is started with (what `sluice worker --allow-python --python PATH
//! --python-processes N --python-call-timeout-secs S --python-memory-limit-mb M`
//! carries), and why it may fail to start.

use std::path::PathBuf;
use std::time::Duration;

/// At most this many processes in one pool.
pub const MAX_PROCESSES: usize = 256;
/// The smallest memory limit accepted: below it the interpreter and numpy alone
/// do not fit in the address space (`RLIMIT_AS` counts mapped, not used, memory).
pub const MIN_MEMORY_LIMIT: u64 = 256 << 20;
/// The longest per-call time limit accepted.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// A pool's configuration.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The interpreter (`--python`), e.g. `/opt/venv/bin/python`.
    pub python: PathBuf,
    /// Processes (`--python-processes`); default one per core.
    pub processes: usize,
    /// How long one call of the function may take (`--python-call-timeout-secs`):
    /// one element for map/filter/flat_map, one batch for map_batches.
    pub call_timeout: Duration,
    /// Address-space limit of each process (`--python-memory-limit-mb`), `None`
    /// for no limit.
    pub memory_limit_bytes: Option<u64>,
    /// Calls waiting for a process; `submit` blocks beyond it. Default: two per
    /// process.
    pub queue_bound: usize,
    /// Extra environment for the processes (e.g. `PYTHONPATH`), on top of the
    /// worker's own.
    pub env: Vec<(String, String)>,
}

impl PoolConfig {
    /// `python` with the defaults: one process per core, a 60 s call limit, no
    /// memory limit.
    pub fn new(python: impl Into<PathBuf>) -> Self {
        let processes = std::thread::available_parallelism().map_or(1, |n| n.get());
        PoolConfig {
            python: python.into(),
            processes,
            call_timeout: Duration::from_secs(60),
            memory_limit_bytes: None,
            queue_bound: 2 * processes,
            env: Vec::new(),
        }
    }

    /// Checks the values; the error names the flag to change.
    pub fn validate(&self) -> Result<(), PoolError> {
        let bad = |m: String| Err(PoolError::Config(m));
        if self.processes == 0 || self.processes > MAX_PROCESSES {
            return bad(format!(
                "--python-processes {} must be between 1 and {MAX_PROCESSES}",
                self.processes
            ));
        }
        if self.call_timeout.is_zero() || self.call_timeout > MAX_CALL_TIMEOUT {
            return bad(format!(
                "--python-call-timeout-secs {} must be more than 0 and at most {}",
                self.call_timeout.as_secs_f64(),
                MAX_CALL_TIMEOUT.as_secs()
            ));
        }
        if let Some(m) = self.memory_limit_bytes {
            if m < MIN_MEMORY_LIMIT {
                return bad(format!(
                    "--python-memory-limit-mb {} is below {} MiB, the room the interpreter and \
                     numpy need",
                    m >> 20,
                    MIN_MEMORY_LIMIT >> 20
                ));
            }
        }
        if self.queue_bound == 0 {
            return bad("the queue bound must be at least 1".into());
        }
        Ok(())
    }
}

/// Why a pool did not start.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A value out of range; the message names the flag.
    #[error("{0}")]
    Config(String),
    /// The interpreter cannot run the runner (missing, not Python, no numpy).
    #[error("--python {python} cannot run Python stages: {why}")]
    Interpreter { python: String, why: String },
}
