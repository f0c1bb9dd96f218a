//! [`Client`]: register datasets, create or join jobs, read elements.

use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;
use tracing::Instrument;

use crate::coordinated;
use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::exactly_once::{Consumption, Delivery};
use crate::local_workers;
use crate::options::{ReadKind, ReadOptions, TargetWorkers};
use crate::reader::{ElementStream, StreamInfo};
use crate::retry::RetryPolicy;
use crate::status::ServiceStatus;
use crate::task_readers;

/// A cloneable handle to a Sluice service, given the dispatcher addresses.
#[derive(Clone)]
pub struct Client {
    dispatcher: DispatcherClient,
}

impl Client {
    /// Connects lazily: the first call reaches the dispatcher, retrying per `policy`.
    pub fn new(dispatcher_addresses: &[String], policy: RetryPolicy) -> Result<Self, ClientError> {
        Ok(Client { dispatcher: DispatcherClient::new(dispatcher_addresses, policy)? })
    }

    /// [`Client::new`] over TLS and with the token of `security`; readers present
    /// the same to workers.
    pub fn with_security(
        dispatcher_addresses: &[String],
        policy: RetryPolicy,
        security: sluice_security::ClientSecurity,
    ) -> Result<Self, ClientError> {
        Ok(Client {
            dispatcher: DispatcherClient::with_security(dispatcher_addresses, policy, security)?,
        })
    }

    pub fn dispatcher(&self) -> &DispatcherClient {
        &self.dispatcher
    }

    /// Registers `def` and returns its dataset id: `dataset_id` if given (the same
    /// definition may be registered under the same id again), else a new one.
    pub async fn register_dataset(
        &self,
        def: &DatasetDef,
        dataset_id: Option<&str>,
    ) -> Result<String, ClientError> {
        def.validate()?;
        let req = pb::RegisterDatasetRequest {
            dataset: Some(pb::DatasetDef::from(def)),
            dataset_id: dataset_id.unwrap_or_default().to_string(),
        };
        Ok(self.dispatcher.register_dataset(req).await?.dataset_id)
    }

    /// Reads a registered dataset: gets or creates the job and its iteration, and
    /// streams the elements.
    pub async fn from_dataset_id(
        &self,
        dataset_id: &str,
        opts: ReadOptions,
    ) -> Result<ElementStream, ClientError> {
        opts.validate()?;
        if opts.target_workers == TargetWorkers::Local && local_workers::is_empty() {
            let static_note = if opts.mode.is_static() {
                " (for a static mode the worker must also be in the dispatcher's \
                 --worker-addresses)"
            } else {
                ""
            };
            return Err(ClientError::InvalidArgument(format!(
                "target_workers=LOCAL reads only workers in this process, and there are none; \
                 start a worker in-process (sluice local) or use ANY{static_note}"
            )));
        }
        if let Some(p) = opts.restore.as_ref().filter(|p| p.dataset_id != dataset_id) {
            return Err(ClientError::InvalidArgument(format!(
                "the position is of dataset `{}`, and this read is of dataset `{dataset_id}`: \
                 restore a position into a read of the same dataset",
                p.dataset_id
            )));
        }
        // One span for the whole read: the dispatcher's and workers' RPC spans of
        // this read are its children (the trace context travels on each call).
        let span = tracing::info_span!(
            "read",
            dataset_id,
            job = tracing::field::Empty,
            job_id = tracing::field::Empty,
            iteration_id = tracing::field::Empty,
            client_id = tracing::field::Empty,
        );
        let (job, it) = self.open_iteration(dataset_id, &opts).instrument(span.clone()).await?;
        span.record("job", job.job_name.as_str()).record("job_id", job.job_id);
        span.record("iteration_id", it.iteration_id).record("client_id", it.client_id);
        let delivery = self.delivery_of(&job, &it, &opts).await?;
        tracing::debug!(parent: &span, %delivery, reason = job.at_most_once_reason, "reading");
        if opts.exactly_once_auto && delivery == Delivery::AtMostOnce {
            tracing::warn!(
                parent: &span,
                reason = job.at_most_once_reason,
                "exactly_once_auto: this read is at-most-once"
            );
        }
        let (d, client_id) = (self.dispatcher.clone(), it.client_id);
        let (job_name, capacity) = (job.job_name, opts.max_outstanding_requests);
        // The stream's manager: rounds for a coordinated read, else one reader per task.
        let coordinated = match opts.kind {
            ReadKind::Coordinated { consumer_index, .. } => Some(consumer_index),
            _ => None,
        };
        // Also for a reader that joined an exactly-once job without asking: the
        // dispatcher waits for every reader's acknowledgement of a lost task.
        let consumption = (delivery == Delivery::ExactlyOnce && coordinated.is_none()).then(|| {
            let (name, id) = (job_name.clone(), dataset_id.to_string());
            std::sync::Arc::new(Consumption::new(name, id, opts.repetition, opts.restore.as_ref()))
        });
        let tracked = consumption.clone();
        let order = opts.deterministic.map(|d| (d.consumer_index, d.num_consumers));
        let manage = move |tx, loss| async move {
            match coordinated {
                Some(index) => coordinated::manage(d, client_id, index, opts, tx).await,
                None => task_readers::manage(d, client_id, opts, tracked, tx, loss).await,
            }
        };
        let info = StreamInfo {
            dispatcher: self.dispatcher.clone(),
            job_name,
            consumer: coordinated,
            iteration_id: it.iteration_id,
            client_id,
            delivery,
            at_most_once_reason: job.at_most_once_reason,
            consumption,
            order,
        };
        Ok(ElementStream::start(info, capacity, span, manage))
    }

    /// The delivery the dispatcher answered; an exactly-once read answered
    /// anything else (a dispatcher that predates it) leaves the iteration and fails.
    async fn delivery_of(
        &self,
        job: &pb::GetOrCreateJobResponse,
        it: &pb::GetOrCreateIterationResponse,
        opts: &ReadOptions,
    ) -> Result<Delivery, ClientError> {
        let answered = if it.delivery != 0 { it.delivery } else { job.delivery };
        let delivery = Delivery::from_wire(answered);
        if opts.exactly_once && delivery != Delivery::ExactlyOnce {
            let _ = self.dispatcher.release_iteration_client(it.client_id).await;
            let reason = match job.at_most_once_reason.as_str() {
                "" => "the dispatcher does not support exactly-once delivery: run dispatchers \
                       and workers of this client's version"
                    .to_string(),
                reason => reason.to_string(),
            };
            return Err(ClientError::InvalidArgument(format!(
                "job `{}` cannot be read exactly once: {reason}",
                job.job_name
            )));
        }
        Ok(delivery)
    }

    /// GetOrCreateJob then GetOrCreateIteration for a read of `dataset_id`.
    async fn open_iteration(
        &self,
        dataset_id: &str,
        opts: &ReadOptions,
    ) -> Result<(pb::GetOrCreateJobResponse, pb::GetOrCreateIterationResponse), ClientError> {
        let job = self
            .dispatcher
            .get_or_create_job(pb::GetOrCreateJobRequest {
                dataset_id: dataset_id.to_string(),
                mode: opts.mode.to_wire() as i32,
                job_name: opts.job_name.clone().unwrap_or_default(),
                target_workers: opts.target_workers.to_wire() as i32,
                use_cross_trainer_cache: matches!(opts.kind, ReadKind::CrossTrainerCache { .. }),
                num_consumers: opts.kind.num_consumers(),
                require_exactly_once: opts.exactly_once,
                prefer_exactly_once: opts.exactly_once_auto,
                deterministic: opts.deterministic.map(|d| pb::DeterministicOrder {
                    seed: d.seed,
                    num_consumers: d.num_consumers,
                }),
            })
            .await?;
        let it = self
            .dispatcher
            .get_or_create_iteration(pb::GetOrCreateIterationRequest {
                job_id: job.job_id,
                repetition: opts.repetition,
                restore: opts.restore.as_ref().map(|p| p.to_pb()),
            })
            .await?;
        Ok((job, it))
    }

    /// Registers `def` and reads it: `register_dataset` + `from_dataset_id`. A
    /// read restored from a position registers `def` under the position's dataset
    /// id (the same definition gets that id back; another one is refused), since a
    /// position restores only a read of its own dataset.
    pub async fn distribute(
        &self,
        def: &DatasetDef,
        opts: ReadOptions,
    ) -> Result<ElementStream, ClientError> {
        opts.validate()?;
        let restored = opts.restore.as_ref().map(|p| p.dataset_id.clone());
        let id = self.register_dataset(def, restored.as_deref()).await?;
        self.from_dataset_id(&id, opts).await
    }

    /// Workers, datasets, jobs and their progress, as the leader sees them (a
    /// follower's answer, flagged `from_leader = false`, when no leader answers).
    pub async fn status(&self) -> Result<ServiceStatus, ClientError> {
        let answers = self.dispatcher.status_of_each().await;
        let mut any = None;
        let mut last_err = None;
        for (_, r) in answers {
            match r {
                Ok(s) if s.from_leader => return Ok(s.into()),
                Ok(s) => any = any.or(Some(s)),
                Err(e) => last_err = Some(e),
            }
        }
        match (any, last_err) {
            (Some(s), _) => Ok(s.into()),
            (None, Some(e)) => Err(e),
            (None, None) => self.dispatcher.get_status().await.map(ServiceStatus::from),
        }
    }

    /// Each dispatcher's own answer (or error), in the order of the addresses.
    pub async fn status_of_each(&self) -> Vec<(String, Result<ServiceStatus, ClientError>)> {
        let answers = self.dispatcher.status_of_each().await;
        answers.into_iter().map(|(a, r)| (a, r.map(ServiceStatus::from))).collect()
    }
}
