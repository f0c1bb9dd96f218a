//! The worker's configuration: a plain struct, checked by [`WorkerConfig::validate`].
//! The `sluice` binary fills it from flags; tests use [`WorkerConfig::for_tests`].

use sluice_proto::limits::ServerLimits;
use std::time::Duration;

use sluice_client::RetryPolicy;
use sluice_dataset::io::DataRoots;
use sluice_proto::MAX_MESSAGE_BYTES;

use crate::access::WorkerSecurity;
use crate::error::WorkerError;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// `host:port` of the dispatcher(s); at least one.
    pub dispatcher_addresses: Vec<String>,
    /// The address clients dial. `None`: `127.0.0.1:<bound port>` of the listener.
    pub advertised_address: Option<String>,
    /// Longest the dispatcher holds a heartbeat (a long poll) while it has no task
    /// to start or stop for this worker; also the pause after a failed heartbeat or
    /// an empty answer the dispatcher did not hold. A finished task is reported at
    /// once, and a new task starts as soon as the dispatcher answers the poll.
    pub heartbeat_interval: Duration,
    /// Elements buffered per task between its pipeline and its consumers.
    pub task_buffer_elements: usize,
    /// Most elements in one `ElementBatch`; requests may only lower it.
    pub max_elements_per_message: u32,
    /// Most encoded element bytes in one `ElementBatch`; requests may only lower it.
    /// A single larger element is still sent, alone.
    pub max_bytes_per_message: u64,
    /// Retries of every dispatcher call (registration, heartbeats, splits).
    pub dispatcher_retry: RetryPolicy,
    /// DYNAMIC mode: the most splits one GetSplit takes (1..=1024). Within it a
    /// task asks for about 20 ms of its own work per grant (`splits/size.rs`):
    /// more means fewer round trips and log entries per element, and more lost
    /// if the worker dies. Default [`DEFAULT_SPLITS_PER_REQUEST`].
    pub splits_per_request: u32,
    /// Byte bound of each cross-trainer cache task's window (tf.data's
    /// `cross_trainer_cache_size_bytes`). See [`DEFAULT_CROSS_TRAINER_CACHE_BYTES`].
    pub cross_trainer_cache_bytes: u64,
    /// On shutdown, how long streams in progress may run to their end before they
    /// are cut (`sluice worker --drain-timeout-secs`). Zero: stop at once.
    pub drain_timeout: Duration,
    /// Exit once no task has been unfinished for this long, after at least one
    /// task ran (`sluice worker --exit-when-idle`). `None`: serve until stopped.
    pub exit_when_idle: Option<Duration>,
    /// Bounds of the worker's gRPC server: streams per connection, request
    /// timeout (until a response starts: an element stream, once open, is
    /// bounded by the HTTP/2 keepalive instead), keepalives
    /// (`sluice worker --max-concurrent-streams --request-timeout-secs`).
    pub server: ServerLimits,
    /// TLS and tokens (`access.rs`).
    pub security: WorkerSecurity,
    /// The files and objects this worker's pipelines may open (`sluice worker
    /// --data-roots`); every file is checked right before it is opened, and a
    /// refused one fails that task's read with an error naming it. `None`: the
    /// defaults for the listen address ([`DataRoots::defaults`]: the current and
    /// temp directories on loopback, nothing elsewhere).
    pub data_roots: Option<DataRoots>,
}

/// The dispatcher's bound: within it a task asks for about 20 ms of its own
/// work per grant (`splits/size.rs`), so fine-grained DYNAMIC reads cost a
/// round trip per grant, not per split. A paused consumer of a shared job holds
/// no more than its streams' credit of what the workers made (issue 33,
/// `credit.rs`), so nothing but a worker's death bounds this lower.
pub const DEFAULT_SPLITS_PER_REQUEST: u32 = sluice_proto::contract::MAX_SPLITS_PER_GRANT;

/// 256 MiB per cache task. tf.data defaults to 10 GiB, sized for dedicated
/// input hosts; a Sluice worker may run several cache tasks at once and shares the
/// host with its pipelines. 256 MiB still holds 64 full-size messages (4 MiB, the
/// default `max_bytes_per_message`), i.e. room for trainers a few hundred batches
/// apart; raise it when trainers drift further and memory allows.
pub const DEFAULT_CROSS_TRAINER_CACHE_BYTES: u64 = 256 * 1024 * 1024;

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            dispatcher_addresses: Vec::new(),
            advertised_address: None,
            heartbeat_interval: Duration::from_millis(500),
            task_buffer_elements: 256,
            max_elements_per_message: 64,
            max_bytes_per_message: 4 * 1024 * 1024,
            dispatcher_retry: RetryPolicy::default(),
            splits_per_request: DEFAULT_SPLITS_PER_REQUEST,
            cross_trainer_cache_bytes: DEFAULT_CROSS_TRAINER_CACHE_BYTES,
            drain_timeout: Duration::ZERO,
            exit_when_idle: None,
            server: ServerLimits::default(),
            security: WorkerSecurity::default(),
            data_roots: None,
        }
    }
}

impl WorkerConfig {
    pub fn new(dispatchers: Vec<String>) -> Self {
        WorkerConfig { dispatcher_addresses: dispatchers, ..WorkerConfig::default() }
    }

    /// Short heartbeat polls and retry deadlines for tests on loopback.
    pub fn for_tests(dispatchers: Vec<String>) -> Self {
        WorkerConfig {
            heartbeat_interval: Duration::from_millis(100),
            dispatcher_retry: RetryPolicy::for_tests(),
            ..WorkerConfig::new(dispatchers)
        }
    }

    /// The address to advertise, as `HOST:PORT`: `advertised_address` checked
    /// by the one address parser (`sluice_security::ServerAddress`) with a scheme,
    /// if any, that matches this worker's TLS dropped. Readers dial it, so an
    /// address that does not parse, or a plain-text `http://` one on a worker
    /// serving TLS, fails the worker at start instead of every read (issue 31).
    /// `None`: not set.
    pub fn advertised(&self) -> Result<Option<String>, WorkerError> {
        let Some(address) = &self.advertised_address else { return Ok(None) };
        let tls = self.security.tls.as_ref().is_some_and(|t| t.has_identity());
        sluice_security::ServerAddress::parse_for(address, tls)
            .map(|a| Some(a.to_string()))
            .map_err(|e| WorkerError::Config(format!("--advertise (advertised_address): {e}")))
    }

    pub fn validate(&self) -> Result<(), WorkerError> {
        let bad = |m: &str| Err(WorkerError::Config(m.to_string()));
        if let Err(e) = self.server.validate() {
            return bad(&e);
        }
        if self.dispatcher_addresses.is_empty() {
            return bad("dispatcher_addresses: at least one dispatcher address is needed");
        }
        if self.dispatcher_addresses.iter().any(|a| a.trim().is_empty()) {
            return bad("dispatcher_addresses: an address is empty");
        }
        if matches!(&self.advertised_address, Some(a) if a.trim().is_empty()) {
            return bad("advertised_address: must not be empty when set");
        }
        self.advertised()?;
        let most = sluice_proto::contract::MAX_SPLITS_PER_GRANT;
        if !(1..=most).contains(&self.splits_per_request) {
            return bad(&format!("splits_per_request: must be between 1 and {most}"));
        }
        if self.heartbeat_interval.is_zero() {
            return bad("heartbeat_interval: must be > 0");
        }
        if self.cross_trainer_cache_bytes == 0 {
            return bad("cross_trainer_cache_bytes: must be > 0");
        }
        if self.task_buffer_elements == 0 {
            return bad("task_buffer_elements: must be > 0");
        }
        if self.max_elements_per_message == 0 {
            return bad("max_elements_per_message: must be > 0");
        }
        if self.max_bytes_per_message == 0 || self.max_bytes_per_message > MAX_MESSAGE_BYTES as u64
        {
            return Err(WorkerError::Config(format!(
                "max_bytes_per_message: must be in 1..={MAX_MESSAGE_BYTES} (the gRPC message bound)"
            )));
        }
        Ok(())
    }
}
