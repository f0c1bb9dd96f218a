//! The cross-trainer cache of one task (tf.data §6.7): a sliding window over ONE
//! shared element sequence, bounded in bytes, that every trainer reads at its own
//! cursor.
//!
//! ```text
//!   task buffer (FCFS runner) ──extend (one requester at a time)──▶ Window
//!                                                                   [first ........ end)
//!                                                                    ▲ evict oldest   ▲ append
//!   trainer "a" cursor ─────────────────────────────────────────────┘        │
//!   trainer "b" cursor ──────────────────────────────────────────────────────┘
//! ```
//!
//! A request of trainer `t` returns the elements at `t`'s cursor if they are cached
//! and advances the cursor; otherwise the requester takes the `extending` lock (the
//! others queue on it, FIFO, each bounded by its stream's life), checks again, and
//! pulls the next batch from the task's FCFS buffer into the window, evicting the
//! oldest elements until each new one fits. Cursors are absolute indices:
//! - a new trainer starts at the oldest cached element;
//! - a trainer whose cursor fell behind the window jumps to the oldest cached
//!   element: it skips data, which is counted and logged;
//! - a cursor only moves forward, so a trainer never gets an element twice, and two
//!   readers with the same trainer id share one cursor (they split the stream).
//!
//! The byte bound is exact: the window never holds more than `capacity` bytes of
//! elements (measured as each element's framed length in an `ElementBatch`). An
//! extension takes at most `capacity` bytes, so it never evicts what it just added;
//! a single element larger than the whole cache fails the task's cache for good
//! (InvalidArgument naming both sizes), as does end of sequence (the cache needs an
//! infinite dataset).
//!
//! Soft state: the window and cursors live only in this process. A restarted worker
//! starts its task's sequence over, and every trainer starts at its first element.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use sluice_proto::v1 as pb;
use tonic::Status;

use crate::buffer::{framed_len, Limits, TaskBuffer};

/// Trainers remembered per task; past this many the one furthest behind is
/// forgotten (it restarts at the oldest cached element if it comes back).
const MAX_TRAINERS: usize = 4096;

pub(crate) struct CrossTrainerCache {
    task_id: u64,
    /// Short sections without `.await` only.
    window: Mutex<Window>,
    /// Held by the one requester that extends the window from the task's buffer.
    extending: tokio::sync::Mutex<()>,
}

impl CrossTrainerCache {
    pub(crate) fn new(task_id: u64, capacity: u64) -> Self {
        CrossTrainerCache {
            task_id,
            window: Mutex::new(Window::new(capacity)),
            extending: tokio::sync::Mutex::new(()),
        }
    }

    fn window(&self) -> MutexGuard<'_, Window> {
        // Every section leaves the window consistent; poisoning is ignored.
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next elements for `trainer` (at least one), within the message bounds.
    ///
    /// Cancel-safe: the awaits are the `extending` lock and the task buffer's own
    /// cancel-safe `next_batch`; nothing is taken from the window before them.
    pub(crate) async fn next_batch(
        &self,
        buffer: &TaskBuffer,
        trainer: &str,
        limits: Limits,
    ) -> Result<Vec<pb::Element>, Status> {
        loop {
            if let Some(batch) = self.window().read(self.task_id, trainer, limits)? {
                return Ok(batch);
            }
            let _extending = self.extending.lock().await;
            // Another requester may have extended the window while this one queued.
            if self.window().has_next(trainer) {
                continue;
            }
            let capacity = self.window().capacity;
            // At most `capacity` bytes per extension (a single larger element still
            // comes alone, and is refused below): the new elements never evict
            // each other.
            let pull = Limits::bounded(limits.max_elements, limits.max_bytes.min(capacity));
            let batch = match buffer.next_batch(pull).await {
                Ok(batch) => batch,
                Err(status) => return Err(self.window().fail(status)),
            };
            let mut window = self.window();
            let ended = batch.end_of_sequence && batch.elements.is_empty();
            for element in batch.elements {
                window.insert(self.task_id, element)?;
            }
            // The task's buffer answers end of sequence again on the next pull, once
            // the elements above were read.
            if ended {
                let end = window.end();
                return Err(window.fail(Status::invalid_argument(format!(
                    "task {}: the cross-trainer cache needs an infinite dataset, and this \
                     pipeline ended after {end} elements; add `repeat` without a count",
                    self.task_id
                ))));
            }
        }
    }

    pub(crate) fn status(&self) -> pb::CacheTaskStatus {
        let w = self.window();
        pb::CacheTaskStatus {
            task_id: self.task_id,
            capacity_bytes: w.capacity,
            cached_bytes: w.bytes,
            cached_elements: w.elements.len() as u64,
            first_index: w.first,
            end_index: w.end(),
            peak_bytes: w.peak,
            skipped_elements: w.skipped,
            trainer_cursors: w.cursors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }
}

/// The window itself: plain data, no I/O, so its rules are tested on their own.
pub(crate) struct Window {
    pub(crate) capacity: u64,
    /// Each cached element with its framed length.
    elements: VecDeque<(pb::Element, u64)>,
    /// Absolute index of `elements[0]`.
    first: u64,
    bytes: u64,
    peak: u64,
    /// trainer id → the next absolute index it reads.
    cursors: HashMap<String, u64>,
    /// Elements skipped by trainers that fell behind, summed.
    skipped: u64,
    /// Sticky: every later request gets this error.
    failed: Option<Status>,
}

impl Window {
    pub(crate) fn new(capacity: u64) -> Self {
        Window {
            capacity,
            elements: VecDeque::new(),
            first: 0,
            bytes: 0,
            peak: 0,
            cursors: HashMap::new(),
            skipped: 0,
            failed: None,
        }
    }

    /// One past the newest cached element's index.
    pub(crate) fn end(&self) -> u64 {
        self.first + self.elements.len() as u64
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    #[cfg(test)]
    pub(crate) fn first(&self) -> u64 {
        self.first
    }

    #[cfg(test)]
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Whether `trainer` would get an element (or the sticky error) without extending.
    fn has_next(&self, trainer: &str) -> bool {
        let cursor = self.cursors.get(trainer).copied().unwrap_or(self.first);
        self.failed.is_some() || cursor.max(self.first) < self.end()
    }

    fn fail(&mut self, status: Status) -> Status {
        tracing::warn!(code = ?status.code(), message = status.message(), "cross-trainer cache failed");
        self.failed.get_or_insert(status).clone()
    }

    /// Appends an element, evicting the oldest ones until it fits.
    pub(crate) fn insert(&mut self, task_id: u64, element: pb::Element) -> Result<(), Status> {
        let len = framed_len(&element);
        if len > self.capacity {
            let index = self.end();
            return Err(self.fail(Status::invalid_argument(format!(
                "task {task_id}: element {index} is {len} bytes, larger than the whole \
                 cross-trainer cache of {} bytes; raise the worker's \
                 --cross-trainer-cache-bytes above {len} or make elements smaller",
                self.capacity
            ))));
        }
        while self.bytes + len > self.capacity {
            let Some((_, old)) = self.elements.pop_front() else { break };
            self.bytes -= old;
            self.first += 1;
        }
        self.elements.push_back((element, len));
        self.bytes += len;
        self.peak = self.peak.max(self.bytes);
        Ok(())
    }

    /// The cached elements at `trainer`'s cursor, up to the bounds (the first one
    /// even if alone it is over the byte bound), advancing the cursor. `None` when
    /// the trainer has read everything cached: the window must grow.
    pub(crate) fn read(
        &mut self,
        task_id: u64,
        trainer: &str,
        limits: Limits,
    ) -> Result<Option<Vec<pb::Element>>, Status> {
        if let Some(status) = &self.failed {
            return Err(status.clone());
        }
        if !self.cursors.contains_key(trainer) && self.cursors.len() >= MAX_TRAINERS {
            self.forget_furthest_behind();
        }
        let first = self.first;
        let cursor = self.cursors.entry(trainer.to_string()).or_insert(first);
        if *cursor < first {
            let skipped = first - *cursor;
            self.skipped += skipped;
            tracing::warn!(
                task_id,
                trainer,
                skipped,
                from = *cursor,
                to = first,
                "trainer fell behind the cross-trainer cache window; skipping to its oldest element"
            );
            *cursor = first;
        }
        let start = (*cursor - first) as usize;
        if start >= self.elements.len() {
            return Ok(None);
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for (element, len) in self.elements.range(start..) {
            let over = bytes.saturating_add(*len) > limits.max_bytes;
            if out.len() >= limits.max_elements || (!out.is_empty() && over) {
                break;
            }
            bytes += len;
            // Tensor payloads are `Bytes`: a clone shares them.
            out.push(element.clone());
        }
        *cursor += out.len() as u64;
        Ok(Some(out))
    }

    fn forget_furthest_behind(&mut self) {
        let oldest = self.cursors.iter().min_by_key(|(_, c)| **c).map(|(t, _)| t.clone());
        if let Some(trainer) = oldest {
            self.cursors.remove(&trainer);
        }
    }

    /// trainer → cursor, sorted.
    #[cfg(test)]
    pub(crate) fn cursors(&self) -> std::collections::BTreeMap<String, u64> {
        self.cursors.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}
