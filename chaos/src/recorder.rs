//! Funnels the events of a run (from the consumers and the fault executor) to one
//! writer task that appends them to `history.jsonl` as they come and keeps them
//! for the checker.
//!
//! ```text
//!  consumers ─┐ Recorder (cloneable; stamps t_ms from one clock)
//!  executor  ─┴──► mpsc (bounded) ──► writer task ──► history.jsonl + Vec<Event>
//! ```

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::history::{Event, HistoryWriter, Millis};

/// Events queued for the writer before producers wait.
const QUEUE: usize = 8_192;

/// A cloneable handle that records events; `t_ms` comes from [`Recorder::now`].
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Event>,
    start: Instant,
}

/// The writer task; [`Writer::finish`] returns every event once all recorders dropped.
pub struct Writer {
    task: JoinHandle<anyhow::Result<Vec<Event>>>,
}

impl Recorder {
    /// Creates `path` and starts the writer.
    pub fn create(path: &Path) -> anyhow::Result<(Recorder, Writer)> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let (tx, mut rx) = mpsc::channel::<Event>(QUEUE);
        let task = tokio::task::spawn_blocking(move || {
            let mut out = HistoryWriter::new(BufWriter::new(file));
            let mut events = Vec::new();
            while let Some(event) = rx.blocking_recv() {
                out.write(&event)?;
                events.push(event);
            }
            out.flush()?;
            Ok(events)
        });
        Ok((Recorder { tx, start: Instant::now() }, Writer { task }))
    }

    /// Milliseconds since the run started.
    pub fn now(&self) -> Millis {
        self.start.elapsed().as_millis() as Millis
    }

    /// Queues an event (waits while the queue is full). An event after the writer
    /// failed is dropped: the writer's error is reported by [`Writer::finish`].
    pub async fn record(&self, event: Event) {
        let _ = self.tx.send(event).await;
    }
}

impl Writer {
    /// Waits for every recorder to drop, then returns the events written.
    pub async fn finish(self) -> anyhow::Result<Vec<Event>> {
        self.task.await.context("the history writer panicked")?
    }
}
