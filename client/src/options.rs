//! What a reader asks for: processing mode, job sharing and bounds, and the
//! checks of a combination before anything reaches the dispatcher.
//!
//! A leaf: the readers depend on these types, never the other way round.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sluice_positions::Position;
use sluice_proto::v1 as pb;

use crate::compression::Compression;
use crate::error::ClientError;
use crate::retry::RetryPolicy;

/// How a job divides the dataset among workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessingMode {
    /// Every worker processes the whole dataset; with N workers each element
    /// arrives N times. tf.data's "parallel_epochs".
    Off,
    /// The dispatcher hands out splits of the source, each to one worker; every
    /// element arrives once. tf.data's "distributed_epoch".
    Dynamic,
    /// Static: worker `i` of the dispatcher's `n` listed workers reads the files
    /// `f` with `f mod n == i`.
    File,
    /// Static: worker `i` of `n` keeps the elements with index `mod n == i`.
    Data,
    /// Static: FILE for a file source with at least `n` files, DATA otherwise.
    FileOrData,
    /// Static: every `shard(SHARD_HINT, SHARD_HINT)` becomes `shard(n, i)`.
    Hint,
}

impl ProcessingMode {
    pub(crate) fn to_wire(self) -> pb::ProcessingMode {
        match self {
            ProcessingMode::Off => pb::ProcessingMode::Off,
            ProcessingMode::Dynamic => pb::ProcessingMode::Dynamic,
            ProcessingMode::File => pb::ProcessingMode::File,
            ProcessingMode::Data => pb::ProcessingMode::Data,
            ProcessingMode::FileOrData => pb::ProcessingMode::FileOrData,
            ProcessingMode::Hint => pb::ProcessingMode::Hint,
        }
    }

    pub(crate) fn from_wire(m: pb::ProcessingMode) -> Option<Self> {
        Some(match m {
            pb::ProcessingMode::Off => ProcessingMode::Off,
            pb::ProcessingMode::Dynamic => ProcessingMode::Dynamic,
            pb::ProcessingMode::File => ProcessingMode::File,
            pb::ProcessingMode::Data => ProcessingMode::Data,
            pb::ProcessingMode::FileOrData => ProcessingMode::FileOrData,
            pb::ProcessingMode::Hint => ProcessingMode::Hint,
            #[allow(unreachable_patterns)]
            _ => return None,
        })
    }

    /// FILE, DATA, FILE_OR_DATA and HINT: sharded over the dispatcher's fixed
    /// worker list.
    pub fn is_static(self) -> bool {
        !matches!(self, ProcessingMode::Off | ProcessingMode::Dynamic)
    }
}

impl FromStr for ProcessingMode {
    type Err = ClientError;
    /// Accepts `off`/`parallel_epochs`, `dynamic`/`distributed_epoch`, `file`,
    /// `data`, `file_or_data` and `hint`, any case.
    fn from_str(s: &str) -> Result<Self, ClientError> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "parallel_epochs" => Ok(ProcessingMode::Off),
            "dynamic" | "distributed_epoch" => Ok(ProcessingMode::Dynamic),
            "file" => Ok(ProcessingMode::File),
            "data" => Ok(ProcessingMode::Data),
            "file_or_data" => Ok(ProcessingMode::FileOrData),
            "hint" => Ok(ProcessingMode::Hint),
            _ => Err(ClientError::InvalidArgument(format!(
                "unknown processing mode `{s}`; use `off` (alias `parallel_epochs`), \
                 `dynamic` (alias `distributed_epoch`), or a static mode over the \
                 dispatcher's --worker-addresses: `file`, `data`, `file_or_data`, `hint`"
            ))),
        }
    }
}

impl fmt::Display for ProcessingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProcessingMode::Off => "off",
            ProcessingMode::Dynamic => "dynamic",
            ProcessingMode::File => "file",
            ProcessingMode::Data => "data",
            ProcessingMode::FileOrData => "file_or_data",
            ProcessingMode::Hint => "hint",
        })
    }
}

/// Which workers' tasks a reader reads. Part of a job's identity: readers of one
/// named job must agree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TargetWorkers {
    /// The same as ANY: Sluice has no COLOCATED worker tags to avoid.
    #[default]
    Auto,
    /// Every task of the iteration.
    Any,
    /// Only tasks of workers running in this process (see [`crate::local_workers`]);
    /// the read ends when those tasks end.
    Local,
}

impl TargetWorkers {
    pub(crate) fn to_wire(self) -> pb::TargetWorkers {
        match self {
            TargetWorkers::Auto => pb::TargetWorkers::Auto,
            TargetWorkers::Any => pb::TargetWorkers::Any,
            TargetWorkers::Local => pb::TargetWorkers::Local,
        }
    }
}

impl FromStr for TargetWorkers {
    type Err = ClientError;
    /// Accepts `auto` (or empty), `any`, `local`, any case.
    fn from_str(s: &str) -> Result<Self, ClientError> {
        match s.to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(TargetWorkers::Auto),
            "any" => Ok(TargetWorkers::Any),
            "local" => Ok(TargetWorkers::Local),
            _ => Err(ClientError::InvalidArgument(format!(
                "unknown target workers `{s}`; use `auto`, `any` or `local`"
            ))),
        }
    }
}

impl fmt::Display for TargetWorkers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TargetWorkers::Auto => "auto",
            TargetWorkers::Any => "any",
            TargetWorkers::Local => "local",
        })
    }
}

/// The kind of a read. A plain read takes every task's elements as they come; the
/// other two are ways for several trainers to share one named job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReadKind {
    /// Every task of the iteration, each as fast as its worker delivers.
    #[default]
    Plain,
    /// `num_consumers` readers of the named (infinite) job read in rounds, each
    /// round's elements from one worker; this reader is `consumer_index`
    /// (`< num_consumers`). See [`crate::coordinated`].
    Coordinated { num_consumers: u32, consumer_index: u32 },
    /// The job shares each worker's element sequence among trainers through a
    /// byte-bounded sliding window (tf.data's cross-trainer cache); this reader is
    /// `trainer_id`, which reads the windows at its own cursor (readers with the
    /// same id split the stream). Needs a job name and an infinite dataset.
    CrossTrainerCache { trainer_id: String },
}

impl ReadKind {
    /// The coordinated read's number of consumers (part of a job's identity).
    pub fn num_consumers(&self) -> Option<u32> {
        match self {
            ReadKind::Coordinated { num_consumers, .. } => Some(*num_consumers),
            _ => None,
        }
    }

    /// The cross-trainer cache's trainer id, if this is such a read.
    pub fn trainer_id(&self) -> Option<&str> {
        match self {
            ReadKind::CrossTrainerCache { trainer_id } => Some(trainer_id),
            _ => None,
        }
    }
}

/// Options of one read (one iteration of a job).
#[derive(Clone, Debug)]
pub struct ReadOptions {
    pub mode: ProcessingMode,
    /// Which workers' tasks to read (default AUTO = ANY).
    pub target_workers: TargetWorkers,
    /// Readers with the same job name share one job, first come first served;
    /// `None` makes a private, anonymous job.
    pub job_name: Option<String>,
    /// Which pass over the job to read; readers of a named job share a repetition.
    pub repetition: u64,
    /// Bounds the client's memory: at most this many element messages buffered,
    /// and at most this many tasks streamed at once.
    pub max_outstanding_requests: usize,
    /// Upper bound of elements per message asked from workers; 0 = worker default.
    pub max_elements_per_message: u32,
    /// How often to ask the dispatcher for the task list and end of iteration
    /// when it does not long-poll (see `long_poll`); with long polls, the least
    /// time between two calls that brought no change.
    pub heartbeat_interval: Duration,
    /// How long the dispatcher may hold a `ClientHeartbeat` until the task list
    /// or the end of the iteration changes (it caps this, at 1 s by default):
    /// one call stays outstanding and the end of the iteration arrives as it is
    /// applied, not at the next poll. Zero: plain polling every
    /// `heartbeat_interval`.
    pub long_poll: Duration,
    /// Retries of an unavailable worker.
    pub worker_retry: RetryPolicy,
    /// Plain, coordinated or through the cross-trainer cache: one enum, so a
    /// reader cannot be both (see [`ReadKind`]).
    pub kind: ReadKind,
    /// When a task this reader had not read to its end was ended because its
    /// worker was lost: `false` (default) ends the stream with
    /// [`ClientError::DataLost`](crate::ClientError::DataLost); `true` ends it
    /// normally and the loss is in [`ElementStream::loss_report`](crate::ElementStream::loss_report).
    pub accept_data_loss: bool,
    /// Whether workers compress the elements they send this reader (default
    /// `Auto`: zstd from workers off this host, raw over loopback).
    pub compression: Compression,
    /// Ask for exactly-once delivery (docs/exactly-once.md): the job is refused
    /// unless its pipeline can be replayed, and the reader can take positions.
    /// A reader that joins a job created exactly-once by another reader gets
    /// exactly-once delivery without asking.
    pub exactly_once: bool,
    /// Exactly-once where the job can have it (a DYNAMIC plain read of a
    /// replayable pipeline, and not a job of that name created at-most-once);
    /// otherwise the read is at-most-once and
    /// [`ElementStream::at_most_once_reason`](crate::ElementStream::at_most_once_reason)
    /// says why. Never refused for it; `exactly_once` wins.
    pub exactly_once_auto: bool,
    /// Restore the iteration from a position (one consumer's, or the merge of a
    /// checkpoint's): needs `exactly_once` and the position's job name and
    /// repetition (see [`ReadOptions::restore`]).
    pub restore: Option<Position>,
    /// Deterministic order (docs/exactly-once.md): this reader is consumer
    /// `consumer_index` of `num_consumers` of a job whose splits are handed out
    /// in the order `seed` draws; needs `exactly_once` and a job name.
    pub deterministic: Option<Deterministic>,
}

/// The options of a deterministic-order read (see `ReadOptions::deterministic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deterministic {
    pub seed: u64,
    pub num_consumers: u32,
    pub consumer_index: u32,
}

impl ReadOptions {
    pub fn new(mode: ProcessingMode) -> Self {
        ReadOptions {
            mode,
            target_workers: TargetWorkers::Auto,
            job_name: None,
            repetition: 0,
            max_outstanding_requests: 16,
            max_elements_per_message: 0,
            heartbeat_interval: Duration::from_millis(100),
            long_poll: Duration::from_secs(1),
            worker_retry: RetryPolicy::default(),
            kind: ReadKind::Plain,
            accept_data_loss: false,
            compression: Compression::Auto,
            exactly_once: false,
            exactly_once_auto: false,
            restore: None,
            deterministic: None,
        }
    }

    /// Asks for exactly-once delivery (see `exactly_once`).
    pub fn exactly_once(mut self, exactly_once: bool) -> Self {
        self.exactly_once = exactly_once;
        self
    }

    /// Asks for exactly-once delivery where the job can have it, at-most-once
    /// otherwise (see `exactly_once_auto`).
    pub fn exactly_once_auto(mut self, auto: bool) -> Self {
        self.exactly_once_auto = auto;
        self
    }

    /// Reads in a deterministic order: consumer `consumer_index` of
    /// `num_consumers` sees a sequence that depends only on `seed`, the dataset
    /// and `num_consumers` (needs `exactly_once(true)` and a job name; every
    /// consumer index must be read).
    pub fn deterministic(mut self, seed: u64, num_consumers: u32, consumer_index: u32) -> Self {
        self.deterministic = Some(Deterministic { seed, num_consumers, consumer_index });
        self
    }

    /// Restores the iteration from `position` and reads its repetition (the job
    /// name must be the position's; `exactly_once` must be set).
    pub fn restore(mut self, position: Position) -> Self {
        self.repetition = position.repetition;
        self.restore = Some(position);
        self
    }

    /// Reads a cross-trainer cache job as `trainer_id` (see `docs/architecture.md`,
    /// "Cross-trainer cache"). The job needs a name and an infinite dataset.
    pub fn cross_trainer_cache(mut self, trainer_id: impl Into<String>) -> Self {
        self.kind = ReadKind::CrossTrainerCache { trainer_id: trainer_id.into() };
        self
    }

    /// Coordinated reads: this reader is consumer `consumer_index` of
    /// `num_consumers` reading the (named, infinite) job in rounds.
    pub fn coordinated(mut self, num_consumers: u32, consumer_index: u32) -> Self {
        self.kind = ReadKind::Coordinated { num_consumers, consumer_index };
        self
    }

    pub fn job_name(mut self, name: impl Into<String>) -> Self {
        self.job_name = Some(name.into());
        self
    }

    pub fn target_workers(mut self, target: TargetWorkers) -> Self {
        self.target_workers = target;
        self
    }

    pub fn max_outstanding_requests(mut self, n: usize) -> Self {
        self.max_outstanding_requests = n;
        self
    }

    pub fn worker_retry(mut self, policy: RetryPolicy) -> Self {
        self.worker_retry = policy;
        self
    }

    /// Ends a read that lost data normally, with a loss report, instead of with
    /// [`ClientError::DataLost`](crate::ClientError::DataLost) (see `accept_data_loss`).
    pub fn accept_data_loss(mut self, accept: bool) -> Self {
        self.accept_data_loss = accept;
        self
    }

    /// Compression of the elements workers send (see [`Compression`]).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    pub fn validate(&self) -> Result<(), ClientError> {
        if self.max_outstanding_requests == 0 {
            return Err(ClientError::InvalidArgument(
                "max_outstanding_requests must be at least 1".into(),
            ));
        }
        if self.job_name.as_deref() == Some("") {
            return Err(ClientError::InvalidArgument(
                "job_name must not be empty; leave it unset for an anonymous job".into(),
            ));
        }
        if self.heartbeat_interval.is_zero() {
            return Err(ClientError::InvalidArgument("heartbeat_interval must be > 0".into()));
        }
        self.validate_kind()?;
        self.validate_exactly_once()
    }

    /// An exactly-once read is a plain DYNAMIC read; a restore names its job.
    fn validate_exactly_once(&self) -> Result<(), ClientError> {
        let bad = |m: String| Err(ClientError::InvalidArgument(m));
        if self.exactly_once && self.mode != ProcessingMode::Dynamic {
            return bad(format!(
                "exactly-once delivery needs processing mode `dynamic` (distributed_epoch), \
                 not `{}`: only the dispatcher's splits can be handed out again",
                self.mode
            ));
        }
        if self.exactly_once && self.kind != ReadKind::Plain {
            return bad("exactly-once delivery cannot be combined with coordinated reads or the \
             cross-trainer cache; read the job plainly"
                .into());
        }
        if let Some(d) = &self.deterministic {
            if !self.exactly_once {
                return bad("a deterministic order needs exactly-once delivery: set \
                 ReadOptions::exactly_once(true) (Python: exactly_once=True, CLI: \
                 --exactly-once)"
                    .into());
            }
            if d.num_consumers == 0 {
                return bad("num_consumers of a deterministic order must be at least 1".into());
            }
            if d.consumer_index >= d.num_consumers {
                return bad(format!(
                    "consumer_index={} must be less than num_consumers={} (consumers are \
                     numbered from 0)",
                    d.consumer_index, d.num_consumers
                ));
            }
            if self.job_name.is_none() {
                return bad("a deterministic order needs a job_name: its consumers find each \
                 other by it"
                    .into());
            }
        }
        let Some(p) = &self.restore else { return Ok(()) };
        if !self.exactly_once && !self.exactly_once_auto {
            return bad("restoring from a position needs an exactly-once read: set \
             ReadOptions::exactly_once(true) (Python: exactly_once=True)"
                .into());
        }
        if self.job_name.as_deref() != Some(p.job_name.as_str()) {
            return bad(format!(
                "the position is of job `{}`, and this read's job name is {}: read the job the \
                 position was taken of (set job_name to `{}`)",
                p.job_name,
                self.job_name.as_deref().map_or("unset".to_string(), |n| format!("`{n}`")),
                p.job_name
            ));
        }
        if self.repetition != p.repetition {
            return bad(format!(
                "the position is of repetition {}, and this read asks for repetition {}; \
                 restore reads the position's repetition",
                p.repetition, self.repetition
            ));
        }
        Ok(())
    }

    /// The checks of a coordinated or cross-trainer cache read, so a reader learns
    /// what is missing before anything reaches the dispatcher. The dispatcher
    /// checks the job name and the dataset's cardinality again when it creates
    /// the job.
    fn validate_kind(&self) -> Result<(), ClientError> {
        let bad = |m: String| Err(ClientError::InvalidArgument(m));
        match &self.kind {
            ReadKind::Plain => Ok(()),
            ReadKind::CrossTrainerCache { trainer_id } if trainer_id.is_empty() => {
                bad("trainer_id must not be empty for the cross-trainer cache".into())
            }
            ReadKind::CrossTrainerCache { .. } if self.job_name.is_none() => {
                bad("the cross-trainer cache needs a job name: trainers share the cache by \
                 joining the same named job (set ReadOptions.job_name / sluice read --job-name)"
                    .into())
            }
            ReadKind::CrossTrainerCache { .. } => Ok(()),
            ReadKind::Coordinated { num_consumers: 0, .. } => {
                bad("num_consumers must be at least 1".into())
            }
            ReadKind::Coordinated { num_consumers: n, consumer_index: i } if i >= n => {
                bad(format!("consumer_index={i} must be less than num_consumers={n}"))
            }
            ReadKind::Coordinated { .. } if self.job_name.is_none() => {
                bad("num_consumers and consumer_index need a job_name: the consumers of a \
                 coordinated read find each other by it"
                    .into())
            }
            ReadKind::Coordinated { .. } if self.target_workers == TargetWorkers::Local => {
                bad("num_consumers cannot be used with target_workers=LOCAL: every consumer of a \
                 round must read the same workers"
                    .into())
            }
            ReadKind::Coordinated { .. } => Ok(()),
        }
    }
}
