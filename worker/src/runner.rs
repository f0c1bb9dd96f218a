//! The pipeline runner: the thread that runs one task's dataset pipeline and fills
//! its buffer.
//!
//! ```text
//!  TaskDef ──Pipeline::from_def──▶ DatasetDef (a static mode: this worker's shard)
//!                                     │ std::thread "sluice-task-<id>"
//!                                     ▼
//!  OFF, static: iter_local ───────▶ blocking_send ──▶ buffer (mpsc, bounded)
//!  DYNAMIC: iter_with_splits ◀── RemoteSplitProvider (`splits`) ◀── GetSplit
//! ```
//!
//! The pipeline runs on its own `std::thread` because the executor is synchronous.
//! It stops when the buffer's receiver is dropped (the task was dropped), after
//! sending an error, or at the end of its sequence, which it signals by dropping
//! its sender. A DYNAMIC source blocked on a split is released by the task's
//! [`StopReason`] signal or, once the worker drains, takes no new split.
//!
//! An exactly-once task (`TaskDef.exactly_once`, DYNAMIC) runs its pipeline
//! tagged (`DatasetDef::iter_tagged`): each element leaves with its origin plus
//! whatever the pipeline dropped since the previous one, and what it dropped
//! after the last one is left in the buffer for the end_of_sequence message.
//!
//! Soft state: the pipeline's position exists only in this thread. A restarted
//! worker runs its tasks from the beginning (OFF, and its whole shard again in a
//! static mode, as tf.data) or on new splits (DYNAMIC).

use sluice_client::DispatcherClient;
use sluice_dataset::{
    DatasetDef, DatasetError, DroppedSink, Element, FunctionRegistry, StaticPolicy,
};
use sluice_positions::{Tag, UnitRecords};
use sluice_proto::v1 as pb;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

use std::sync::Arc;

use crate::buffer::{BufferTx, StopReason};
use crate::ordered::Grants;
use crate::splits::RemoteSplitProvider;

/// Everything a pipeline thread needs besides its task.
#[derive(Clone)]
pub(crate) struct RunnerContext {
    pub registry: FunctionRegistry,
    pub dispatcher: DispatcherClient,
    /// The worker's runtime: a DYNAMIC source's GetSplit calls run there.
    pub runtime: Handle,
    pub worker_uid: u64,
    /// The most splits asked for per GetSplit (one grant, one range).
    pub splits_per_request: u32,
    /// True once the worker drains: DYNAMIC sources take no new split.
    pub draining: watch::Receiver<bool>,
}

/// Starts the pipeline thread of `def`, sending into `tx` and running in `span`.
/// Returns the signal that the thread returned, or why it could not start (a bad
/// definition, an unknown mode, no thread).
pub(crate) fn spawn(
    def: pb::TaskDef,
    ctx: &RunnerContext,
    span: tracing::Span,
    stop: watch::Receiver<Option<StopReason>>,
    tx: BufferTx,
    grants: Option<Arc<Grants>>,
) -> Result<oneshot::Receiver<()>, String> {
    let task_id = def.task_id;
    let counted = def.counted_units;
    let mut pipeline = Pipeline::from_def(def)?;
    if let Some(grants) = grants {
        pipeline.def.deterministic_order().map_err(|why| {
            format!("the task is read in a deterministic order, but its pipeline: {why}")
        })?;
        pipeline.grants = Some((grants, counted));
    }
    let (done_tx, done_rx) = oneshot::channel();
    let ctx = ctx.clone();
    std::thread::Builder::new()
        .name(format!("sluice-task-{task_id}"))
        .spawn(move || {
            let _entered = span.enter();
            run_catching_panics(task_id, tx, |tx| pipeline.run(task_id, &ctx, stop, tx));
            let _ = done_tx.send(());
        })
        .map_err(|e| format!("cannot start the pipeline thread: {e}"))?;
    Ok(done_rx)
}

/// Runs the pipeline body `run` with `tx`. A panic must not pass for the end of
/// the data: the sender would drop while unwinding, which consumers read as end of
/// sequence. So a clone keeps the channel open, and the panic is sent as the
/// task's last item. (Registry functions' panics are caught inside the executor
/// already, as `Function` errors; this catches the rest.)
fn run_catching_panics(task_id: u64, tx: BufferTx, run: impl FnOnce(BufferTx)) {
    let on_panic = tx.clone();
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(tx))) {
        let what = panic_message(&*panic);
        tracing::error!(task_id, "the pipeline thread panicked: {what}");
        let _ = on_panic.blocking_send(Err(DatasetError::Panicked(format!(
            "{what} (task {task_id}); the read fails rather than end early. This is a bug: \
             please report it with the worker's log"
        ))));
    }
}

/// A panic's message, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".to_string())
}

/// The static sharding policy of a static mode; `None` for OFF and DYNAMIC.
fn static_policy(mode: pb::ProcessingMode) -> Option<StaticPolicy> {
    match mode {
        pb::ProcessingMode::File => Some(StaticPolicy::File),
        pb::ProcessingMode::Data => Some(StaticPolicy::Data),
        pb::ProcessingMode::FileOrData => Some(StaticPolicy::FileOrData),
        pb::ProcessingMode::Hint => Some(StaticPolicy::Hint),
        _ => None,
    }
}

/// A task's dataset and how its source is read.
struct Pipeline {
    /// For a static mode, already this worker's shard.
    def: DatasetDef,
    mode: pb::ProcessingMode,
    /// A DYNAMIC exactly-once task: the pipeline runs tagged (origins on).
    exactly_once: bool,
    /// Deterministic order: where the split provider records its grants, and
    /// whether units have counted records (`ordered.rs`).
    grants: Option<(Arc<Grants>, bool)>,
}

impl Pipeline {
    fn from_def(def: pb::TaskDef) -> Result<Pipeline, String> {
        let mode = pb::ProcessingMode::try_from(def.mode)
            .ok()
            .filter(|m| *m != pb::ProcessingMode::Unspecified)
            .ok_or_else(|| format!("unsupported processing mode {}", def.mode))?;
        // One source per pipeline, hence at most one split provider.
        if mode == pb::ProcessingMode::Dynamic && def.num_split_providers > 1 {
            return Err(format!(
                "the task needs {} split providers; this worker's pipelines have one source",
                def.num_split_providers
            ));
        }
        let exactly_once = def.exactly_once && mode == pb::ProcessingMode::Dynamic;
        let wire = def.dataset.ok_or("the task definition has no dataset")?;
        let dataset = DatasetDef::try_from(wire).map_err(|e| e.to_string())?;
        let dataset = match static_policy(mode) {
            // Static sharding: this worker's shard of the pipeline (tf.data's
            // auto-shard rewrite), from its position in the dispatcher's list.
            Some(policy) => dataset
                .for_worker(policy, def.num_workers as usize, def.worker_index as usize)
                .map_err(|e| {
                    format!(
                        "{} sharding as worker {} of {}: {e}",
                        policy.name(),
                        def.worker_index,
                        def.num_workers
                    )
                })?,
            None => dataset,
        };
        if exactly_once {
            check_replayable(&dataset, def.counted_units)?;
        }
        Ok(Pipeline { def: dataset, mode, exactly_once, grants: None })
    }

    /// The most splits to ask for per GetSplit. A split of a file source is a
    /// whole file: granting several at once would leave one worker with many
    /// files while the others run dry, so file sources take one per request
    /// (and ask ahead only when a file takes less than the grant window).
    fn splits_per_request(&self, configured: u32) -> u32 {
        match self.def.stages.first() {
            Some(stage) if stage.is_file_source() => 1,
            _ => configured,
        }
    }

    /// The body of the pipeline thread.
    fn run(
        self,
        task_id: u64,
        ctx: &RunnerContext,
        stop: watch::Receiver<Option<StopReason>>,
        tx: BufferTx,
    ) {
        tracing::info!(mode = ?self.mode, "pipeline started");
        let iter = match self.mode {
            pb::ProcessingMode::Dynamic => {
                let splits = RemoteSplitProvider::new(
                    ctx.dispatcher.clone(),
                    ctx.runtime.clone(),
                    stop,
                    task_id,
                    ctx.worker_uid,
                    0,
                    self.splits_per_request(ctx.splits_per_request),
                )
                .draining(ctx.draining.clone())
                .ordered(self.grants.clone());
                if self.exactly_once {
                    self.def
                        .iter_tagged(&ctx.registry, Some(Box::new(splits)))
                        .map(|t| (t.elements, Some(t.dropped)))
                } else {
                    self.def.iter_with_splits(&ctx.registry, Box::new(splits)).map(|i| (i, None))
                }
            }
            _ => self.def.iter_local(&ctx.registry).map(|i| (i, None)),
        };
        let (iter, dropped) = match iter {
            Ok(iter) => iter,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        for item in iter {
            let item = match (&dropped, item) {
                (Some(dropped), Ok(e)) => Ok(with_dropped(e, dropped)),
                (_, item) => item,
            };
            let failed = item.is_err();
            if tx.blocking_send(item).is_err() {
                tracing::info!("pipeline stopped: the task was dropped");
                return;
            }
            if failed {
                return;
            }
        }
        if let Some(dropped) = dropped {
            tx.set_end_origin(dropped.take());
        }
        // Dropping `tx` tells the consumers: end of sequence.
        tracing::info!("pipeline reached end of sequence");
    }
}

/// An exactly-once task's pipeline must be replayable, with the units the
/// dispatcher counts (`TaskDef.counted_units`): otherwise the records this
/// worker names would not be the ones the dispatcher waits for.
fn check_replayable(def: &DatasetDef, counted_units: bool) -> Result<(), String> {
    let units = def.exactly_once().map_err(|reason| {
        format!("the task is exactly-once but its pipeline is not replayable: {reason}")
    })?;
    let counted = units == UnitRecords::Counted;
    if counted != counted_units {
        return Err(format!(
            "the dispatcher counts this exactly-once task's units as {}, this worker as {}; \
             run the dispatcher and the workers at the same version",
            if counted_units { "counted" } else { "one record each" },
            if counted { "counted" } else { "one record each" },
        ));
    }
    Ok(())
}

/// An element of a tagged pipeline with what the pipeline dropped before it
/// joined to its origin: those records are consumed with it.
fn with_dropped(mut element: Element, dropped: &DroppedSink) -> Element {
    let before = dropped.take();
    if !before.is_empty() {
        match &mut element.origin {
            Some(origin) => origin.append_origin(before),
            None => element.origin = Some(Tag::from(before)),
        }
    }
    element
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[test]
    fn a_panic_in_the_pipeline_is_its_last_item_not_the_end_of_sequence() {
        let (tx, mut rx) = mpsc::channel(4);
        let thread = std::thread::spawn(move || {
            run_catching_panics(7, tx.into(), |tx| {
                tx.blocking_send(Ok(sluice_dataset::Element::single(
                    sluice_dataset::Tensor::scalar_i64(1),
                )))
                .expect("sent");
                panic!("an executor bug");
            })
        });
        assert!(matches!(rx.blocking_recv(), Some(Ok(_))), "the element before the panic");
        match rx.blocking_recv() {
            Some(Err(DatasetError::Panicked(m))) => {
                assert!(m.contains("an executor bug") && m.contains("task 7"), "{m}")
            }
            other => panic!("expected the panic as an error, got {other:?}"),
        }
        assert!(rx.blocking_recv().is_none(), "then the channel closes");
        thread.join().expect("the panic was caught");
    }
}
