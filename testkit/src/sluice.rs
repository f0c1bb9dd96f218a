//! The test-facing front: `sluice` processes started the way a test wants them.
//!
//! The same calls as [`Child`], [`run`] and [`Quorum`], but a failure panics with
//! the error's text (which quotes the child's stderr), every child's stderr is an
//! in-memory tail echoed with `eprintln!` (so the test runner captures it with the
//! test's own output and prints it when the test fails), and `SLUICE_LOG` is passed
//! on (default `warn`).

use std::path::PathBuf;
use std::time::Duration;

use crate::{run, Child, Quorum, QuorumConfig, Spec, Stderr, DEADLINE};

/// `("SLUICE_LOG", $var or default)`: the log filter to give a child, taken from
/// this process's variable `var`.
pub fn sluice_log_env(var: &str, default: &str) -> (String, String) {
    ("SLUICE_LOG".to_string(), std::env::var(var).unwrap_or_else(|_| default.to_string()))
}

/// The log filter of the children of `sluice chaos` and `sluice bench`:
/// `$SLUICE_CHAOS_CHILD_LOG`, default `info,openraft=warn` (their logs are files
/// kept with the run's report, so they log more than a test's children).
pub fn harness_log_env() -> (String, String) {
    sluice_log_env("SLUICE_CHAOS_CHILD_LOG", "info,openraft=warn")
}

/// The `sluice` executable under test (tests pass `env!("CARGO_BIN_EXE_sluice")`).
#[derive(Clone, Debug)]
pub struct Sluice {
    exe: PathBuf,
}

impl Sluice {
    pub fn new(exe: impl Into<PathBuf>) -> Sluice {
        Sluice { exe: exe.into() }
    }

    pub fn exe(&self) -> &std::path::Path {
        &self.exe
    }

    /// `sluice ARGS` with `envs`, then `SLUICE_LOG` (from this process, default `warn`).
    pub fn spec(&self, args: &[&str], envs: &[(String, String)]) -> Spec {
        Spec::new(&self.exe, args.iter().copied())
            .envs(envs.iter().cloned())
            .envs([sluice_log_env("SLUICE_LOG", "warn")])
            .stderr(Stderr::Tail { echo: true })
    }

    /// Starts a server and waits for its `listening on` line; panics (quoting its
    /// stderr) if it exits, prints something else, or is silent for 30 s.
    pub fn server(&self, args: &[&str]) -> Child {
        self.server_env(args, &[])
    }

    /// [`Sluice::server`] with extra environment variables.
    pub fn server_env(&self, args: &[&str], envs: &[(String, String)]) -> Child {
        Child::start(&self.spec(args, envs)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `sluice ARGS` without waiting for anything; its stdout is the
    /// caller's ([`Child::take_stdout`]).
    pub fn spawn(&self, args: &[&str]) -> Child {
        Child::spawn(&self.spec(args, &[])).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `sluice ARGS` to completion, with a deadline; returns (status ok,
    /// stdout, stderr). Panics past [`DEADLINE`].
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        self.run_within(args, stdin, DEADLINE)
    }

    /// [`Sluice::run`] as a user runs it: the child logs at its own default
    /// level (no `SLUICE_LOG` from this process or the test's environment).
    pub fn run_as_user(&self, args: &[&str]) -> (bool, String, String) {
        let spec = Spec::new(&self.exe, args.iter().copied())
            .env_remove("SLUICE_LOG")
            .stderr(Stderr::Tail { echo: true });
        let out = run(&spec, None, DEADLINE).unwrap_or_else(|e| panic!("{e}"));
        (out.success(), out.stdout, out.stderr)
    }

    /// [`Sluice::run`] with a deadline scaled to the command's work (a read of tens
    /// of thousands of elements on a loaded machine can outlast [`DEADLINE`]).
    pub fn run_within(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        deadline: Duration,
    ) -> (bool, String, String) {
        let out = run(&self.spec(args, &[]), stdin, deadline).unwrap_or_else(|e| panic!("{e}"));
        (out.success(), out.stdout, out.stderr)
    }

    /// A quorum of `nodes` dispatchers on `work_dir` with `args` and `envs` (see
    /// [`Quorum`]); panics if a node does not start.
    pub fn quorum(
        &self,
        nodes: usize,
        work_dir: &str,
        args: &[&str],
        envs: &[(String, String)],
    ) -> Quorum {
        let mut config = QuorumConfig::new(&self.exe, nodes, work_dir);
        config.args = args.iter().map(|s| s.to_string()).collect();
        config.envs = envs.iter().cloned().chain([sluice_log_env("SLUICE_LOG", "warn")]).collect();
        Quorum::start(config).unwrap_or_else(|e| panic!("{e}"))
    }
}
