//! Sluice's one harness for child processes, shared by the end-to-end tests
//! (`tests/`), `sluice chaos` and `sluice bench`: it starts `sluice` servers, Raft
//! quorums of them and the moto S3 test server, and guarantees three things the
//! separate launchers it replaces each got partly right:
//!
//! - **No child outlives its owner.** A [`Child`] is SIGKILLed and reaped when
//!   dropped (also on a panic, by unwinding); if the owner dies without unwinding
//!   (SIGKILL, abort, Ctrl-C) the kernel kills the child (`PR_SET_PDEATHSIG`, see
//!   [`spawner`]).
//! - **No wait hangs.** Waiting for `listening on ADDR`, for a quorum's leader, for
//!   moto, for a command to finish: each has a deadline, and a failure carries the
//!   tail of the child's stderr, so the error says *why*.
//! - **No port is handed out twice.** A [`Port`] is claimed below the kernel's
//!   ephemeral range with a lock file held for the reservation's life, so no other
//!   reservation — in this process or another test binary, `sluice chaos` or
//!   `sluice bench` beside it — gets it, and no `bind(0)` can take it while its server
//!   is down between a kill and a restart (see [`ports`]).
//!
//! # Layout
//! ```text
//!  Spec ──► child::Child::spawn ──► spawner (one thread: fork + PDEATHSIG)
//!                │                        stderr ──► stderr::Capture (log file | tail)
//!                └─► Child::start ─ waits for `listening on ADDR` (deadline)
//!  ports::Port ─ flock'ed claim file + probe bind ─► the port a Spec passes to a child
//!  quorum::Quorum ─ N `sluice dispatcher --peers` children on reserved ports, leader wait
//!  moto::MotoServer ─ moto_server child on a reserved port, bucket = readiness
//!  sluice::Sluice ─ the test-facing front: the same calls, panicking with the stderr tail
//!  wait ─ wait_until / wait_blocking: a condition polled up to DEADLINE
//! ```
//! - [`child`]: [`Spec`] (what to start), [`Child`] (a running process), [`run`] (a
//!   command run to completion with a deadline).
//! - [`spawner`]: the one long-lived thread that forks every child.
//! - [`stderr`]: where a child's stderr goes and how its tail is read back.
//! - [`ports`], [`quorum`], [`moto`], [`sluice`], [`wait`]: as in the diagram.
//! - [`otlp`]: [`OtlpCollector`], an OTLP/gRPC trace collector stand-in that
//!   records the spans it is sent.
//! - [`python`]: the Python interpreter tests run (`SLUICE_TEST_PYTHON`, `.venv-py`).
//! - [`fuzz_corpus`]: replays the fuzz targets' committed inputs as tests.
//! - [`error`]: the one error type; every variant that concerns a child names it
//!   and carries its stderr tail.
//!
//! The library returns [`Error`]s (`sluice chaos` and `sluice bench` report them);
//! [`Sluice`] and the `wait` helpers panic instead, as a test wants.

pub mod child;
pub mod error;
pub mod fuzz_corpus;
pub mod moto;
pub mod otlp;
pub mod ports;
pub mod python;
pub mod quorum;
pub mod sluice;
pub mod spawner;
pub mod stderr;
pub mod wait;

pub use child::{run, Child, Output, Spec, START_TIMEOUT};
pub use error::Error;
pub use moto::MotoServer;
pub use otlp::{CollectedSpan, OtlpCollector};
pub use ports::Port;
pub use quorum::{group_flag, Quorum, QuorumConfig};
pub use sluice::{harness_log_env, sluice_log_env, Sluice};
pub use stderr::{log_tail, Stderr};
pub use wait::{wait_blocking, wait_until, DEADLINE};
