//! `--allow-python` and its companions: whether a worker runs pipelines' Python
//! stages, with which interpreter, how many processes, and within which limits
//! (docs/python-stages.md, "Operating it").

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_dataset::FunctionRegistry;

/// The flags of the worker's pool of Python processes.
#[derive(Args, Clone, Debug)]
pub struct PythonFlags {
    /// Run pipelines' Python stages (the users' own functions) in a pool of Python
    /// processes. Off by default: user code runs only where the operator allows it.
    /// Off loopback the worker must then authenticate callers (--auth-tokens).
    #[arg(long, env = "SLUICE_ALLOW_PYTHON")]
    pub allow_python: bool,
    /// The interpreter of the pool (a venv's `bin/python` gives its packages); it
    /// needs numpy, and cloudpickle for functions shipped by value.
    #[arg(long, env = "SLUICE_PYTHON", default_value = "python3", value_name = "PATH")]
    pub python: String,
    /// Python processes in the pool (0: one per core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub python_processes: usize,
    /// How long one call of a user function may take (one element, or one batch of
    /// map_batches) before its process is stopped and restarted.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub python_call_timeout_secs: f64,
    /// Address-space limit of each Python process, in MiB (none by default): a
    /// function that allocates more gets a MemoryError.
    #[arg(long, value_name = "MIB")]
    pub python_memory_limit_mb: Option<u64>,
}

impl PythonFlags {
    /// `registry` with the pool attached when `--allow-python`; the pool is started
    /// here, so a missing interpreter or numpy stops the worker before it serves.
    pub fn attach(
        &self,
        registry: FunctionRegistry,
        host: &str,
        tokens: bool,
    ) -> anyhow::Result<FunctionRegistry> {
        let Some(config) = self.pool_config()? else {
            return Ok(registry);
        };
        sluice_security::require_auth_for_user_code(host, tokens)?;
        let pool = sluice_pyexec::Pool::start(config).context("--allow-python")?;
        Ok(registry.with_python(Arc::new(pool)))
    }

    /// The pool's configuration, `None` without `--allow-python`.
    pub fn pool_config(&self) -> anyhow::Result<Option<sluice_pyexec::PoolConfig>> {
        if !self.allow_python {
            return Ok(None);
        }
        let mut config = sluice_pyexec::PoolConfig::new(&self.python);
        if self.python_processes > 0 {
            config.processes = self.python_processes;
            config.queue_bound = 2 * self.python_processes;
        }
        config.call_timeout = Duration::try_from_secs_f64(self.python_call_timeout_secs)
            .ok()
            .filter(|d| !d.is_zero())
            .with_context(|| {
                format!(
                    "--python-call-timeout-secs {}: give a number of seconds > 0",
                    self.python_call_timeout_secs
                )
            })?;
        config.memory_limit_bytes =
            self.python_memory_limit_mb.map(|mb| mb.saturating_mul(1 << 20));
        Ok(Some(config))
    }
}
