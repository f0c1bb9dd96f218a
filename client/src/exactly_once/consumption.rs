//! [`Consumption`]: what one exactly-once reader consumed, reported and may claim
//! in a position. No I/O: the reporter and the stream drive it.
//!
//! Pending consumption is kept per generation (how many positions the reader
//! had taken when it consumed), oldest first: a report carries one
//! generation. A taken report stays *in flight* inside the state until the
//! dispatcher answers it, and is sent again until then, so a reporter that is
//! aborted (the stream dropped) or a call that fails loses nothing.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use sluice_positions::wire::{ends_to_flat, runs_to_flat};
use sluice_positions::{ConsumedLog, Origin, Position, RecordSet, Run, UnitRecords};
use sluice_proto::v1 as pb;
use tokio::sync::Notify;

/// The most runs (and unit ends) one `ConsumedReport` carries; the rest goes in
/// the next one (docs/exactly-once.md, "Bounds").
pub const MAX_REPORT_RUNS: usize = 65_536;

/// Entries (runs, spans, unit ends) the position log holds before they are
/// folded into the own set. Appending to a log is cheap and inserting into a
/// `RecordSet` is not (a B-tree search per entry), so the log is folded when a
/// position is taken, and pruned below the watermark as answers arrive; this
/// bound only matters when no watermark comes.
const FOLD_EVERY: usize = 1 << 20;

/// Watermarks answered for generations the reader has not reached yet are kept
/// up to this many (the smallest first dropped: a watermark is a lower bound).
const MAX_LATER_WATERMARKS: usize = 64;

/// Consumption not yet reported, of one generation.
#[derive(Debug, Default)]
struct Pending {
    generation: u64,
    log: ConsumedLog,
}

/// A report sent and not answered yet.
#[derive(Debug)]
struct InFlight {
    seq: u64,
    pending: Pending,
    acks: Vec<u64>,
    /// `drained_tasks` of the report (0: not said).
    drained: u64,
}

#[derive(Debug)]
struct State {
    /// Positions taken (counting the restored position's, for a restored reader).
    generation: u64,
    /// Unreported consumption, oldest generation first; never empty: the back
    /// is the current generation's buffer.
    queue: VecDeque<Pending>,
    in_flight: Option<InFlight>,
    next_seq: u64,
    /// Lost tasks acknowledged here, until a report carrying them is answered.
    acks: Vec<u64>,
    /// Lost tasks: nothing more is taken from them.
    lost: HashSet<u64>,
    /// Records consumed here (and the restored position's): what positions claim
    /// above the watermark.
    own: RecordSet,
    /// Consumed since the last fold into `own` (above the watermark).
    unfolded: ConsumedLog,
    /// The highest checkpoint watermark answered for a generation <= `generation`.
    watermark: u64,
    /// generation (> `generation`) → the highest watermark answered for it.
    later: BTreeMap<u64, u64>,
    /// The highest generation the dispatcher answered a report of.
    announced: u64,
    /// The end-of-epoch sweep: the reader holds nothing of the iteration's first
    /// `drained` tasks (0: it may hold something).
    drained: u64,
    /// The `drained` of the last answered report that carried one (0 after a
    /// new leader may have forgotten it: see `Consumption::resend_drained`).
    drained_told: u64,
}

/// One exactly-once reader's consumption (see the module docs).
#[derive(Debug)]
pub(crate) struct Consumption {
    state: Mutex<State>,
    /// Woken when something becomes pending (the reporter waits on it).
    pending: Notify,
    job_name: String,
    dataset_id: String,
    repetition: u64,
}

/// A report to send: the request's `consumed` and the token to answer it with.
pub(crate) struct Report {
    pub consumed: pb::ConsumedReport,
    pub seq: u64,
}

impl Consumption {
    /// A reader of `job_name`'s `repetition`; a restored reader starts from its
    /// position: the position's records count as its own, and its generation
    /// continues after the position's.
    pub(crate) fn new(
        job_name: String,
        dataset_id: String,
        repetition: u64,
        restored: Option<&Position>,
    ) -> Self {
        let (generation, own) = match restored {
            Some(p) => (p.generation.saturating_add(1), p.consumed.clone()),
            None => (0, RecordSet::new()),
        };
        let state = State {
            generation,
            queue: VecDeque::from([Pending { generation, log: ConsumedLog::default() }]),
            in_flight: None,
            next_seq: 1,
            acks: Vec::new(),
            lost: HashSet::new(),
            own,
            unfolded: ConsumedLog::default(),
            watermark: 0,
            later: BTreeMap::new(),
            announced: generation,
            drained: 0,
            drained_told: 0,
        };
        Consumption {
            state: Mutex::new(state),
            pending: Notify::new(),
            job_name,
            dataset_id,
            repetition,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `origin`, taken from `task`: an element the application took, or
    /// a message's own records when it arrives. `false` (and nothing recorded)
    /// when the task was lost: its elements must be dropped.
    pub(crate) fn consume(&self, task: u64, origin: &Origin) -> bool {
        self.consume_records(task, &origin.runs, &origin.unit_ends)
    }

    /// [`Self::consume`] of runs and unit ends (an element's, without making it
    /// an `Origin`).
    pub(crate) fn consume_records(
        &self,
        task: u64,
        runs: &[Run],
        unit_ends: &[(u64, u64)],
    ) -> bool {
        let mut s = self.lock();
        if !s.lost.is_empty() && s.lost.contains(&task) {
            return false;
        }
        if runs.is_empty() && unit_ends.is_empty() {
            return true;
        }
        let became_pending = s.record(runs, unit_ends);
        drop(s);
        if became_pending {
            self.pending.notify_one();
        }
        true
    }

    /// The view marked `task` lost: nothing more is taken from it, and the next
    /// reports acknowledge it until one is answered.
    pub(crate) fn task_lost(&self, task: u64) {
        let mut s = self.lock();
        if s.lost.insert(task) {
            s.acks.push(task);
            drop(s);
            self.pending.notify_one();
        }
    }

    /// Whether every unit of `[begin, end)` is whole among the records this
    /// reader consumed (and below the checkpoint watermark): a deterministic
    /// order's split is then done (`reorder.rs`). Folds the position log first.
    pub(crate) fn whole(&self, begin: u64, end: u64, counted: bool) -> bool {
        let mut s = self.lock();
        s.fold();
        let rule = if counted { UnitRecords::Counted } else { UnitRecords::One };
        (begin..end).all(|u| s.own.unit_complete(u, rule))
    }

    /// What the stream saw last: the manager's marker that the reader holds
    /// nothing of its first `tasks` tasks, or (0) a message of elements.
    pub(crate) fn set_drained(&self, tasks: u64) {
        let mut s = self.lock();
        if s.drained == tasks {
            return;
        }
        s.drained = tasks;
        let due = s.drained_due();
        drop(s);
        if due {
            self.pending.notify_one();
        }
    }

    /// Makes a drained reader say so again in its next report: the leader keeps
    /// it in memory only, and a new one must hear it (the reporter calls this
    /// about once a second).
    pub(crate) fn resend_drained(&self) {
        let mut s = self.lock();
        if s.drained > 0 {
            s.drained_told = 0;
            drop(s);
            self.pending.notify_one();
        }
    }

    /// Whether `task` was marked lost.
    pub(crate) fn is_lost(&self, task: u64) -> bool {
        self.lock().lost.contains(&task)
    }

    /// Whether more is pending than the next report carries: consumption of
    /// two or more generations (positions taken faster than reports went), or
    /// more runs or unit ends than one report holds. The reporter then sends
    /// the next report at once instead of after `REPORT_INTERVAL`: a report
    /// carries one generation, so at one report per interval the reports, and
    /// the checkpoint watermark positions are cut at, would fall further behind
    /// with every position.
    pub(crate) fn backlog(&self) -> bool {
        let s = self.lock();
        let mut pending = s.queue.iter().filter(|p| !p.log.is_empty());
        match (pending.next(), pending.next()) {
            (Some(_), Some(_)) => true,
            (Some(p), None) => p.log.exceeds(MAX_REPORT_RUNS),
            _ => false,
        }
    }

    /// Waits until there is something to report.
    pub(crate) async fn wait_pending(&self) {
        loop {
            let notified = self.pending.notified();
            if self.lock().has_pending() {
                return;
            }
            notified.await;
        }
    }

    /// The report to send now, if any: the one in flight again, else the
    /// oldest pending consumption (at most [`MAX_REPORT_RUNS`] runs), with the
    /// lost-task acknowledgements once nothing consumed before them is left out.
    pub(crate) fn take_report(&self) -> Option<Report> {
        let mut s = self.lock();
        if s.in_flight.is_none() {
            let taken = s.take_pending()?;
            s.in_flight = Some(taken);
        }
        let f = s.in_flight.as_ref().expect("set above");
        let mut consumed = pb::ConsumedReport {
            generation: f.pending.generation,
            lost_tasks_done: f.acks.clone(),
            drained_tasks: f.drained,
            ..Default::default()
        };
        let log = &f.pending.log;
        runs_to_flat(log.runs.iter().copied(), &mut consumed.runs);
        ends_to_flat(log.unit_ends.iter().copied(), &mut consumed.unit_ends);
        ends_to_flat(log.firsts.iter().copied(), &mut consumed.firsts);
        Some(Report { consumed, seq: f.seq })
    }

    /// The dispatcher answered report `seq` OK: it is done.
    pub(crate) fn answered(&self, seq: u64, resp: &pb::ClientHeartbeatResponse) {
        let mut s = self.lock();
        if s.in_flight.as_ref().is_some_and(|f| f.seq == seq) {
            let f = s.in_flight.take().expect("checked");
            s.acks.retain(|a| !f.acks.contains(a));
            s.announced = s.announced.max(f.pending.generation);
            if f.drained > 0 {
                s.drained_told = f.drained;
            }
        }
        s.note_watermark(resp.checkpoint_watermark, resp.checkpoint_generation);
    }

    /// A checkpoint watermark from any heartbeat answer (the long poll's too).
    pub(crate) fn note_watermark(&self, watermark: u64, generation: u64) {
        self.lock().note_watermark(watermark, generation);
    }

    /// This reader's position, and the generation moves on (see
    /// docs/exactly-once.md, "Positions").
    pub(crate) fn position(&self) -> Position {
        let mut s = self.lock();
        s.fold();
        let w = s.watermark;
        s.own.raise_watermark(w);
        let consumed = s.own.clone();
        let generation = s.generation;
        s.generation += 1;
        let next = s.generation;
        match s.queue.back_mut() {
            Some(back) if back.log.is_empty() => back.generation = next,
            _ => s.queue.push_back(Pending { generation: next, log: ConsumedLog::default() }),
        }
        s.promote_later();
        Position {
            job_name: self.job_name.clone(),
            dataset_id: self.dataset_id.clone(),
            repetition: self.repetition,
            generation,
            consumed,
            merged_consumers: 1,
        }
    }

    #[cfg(test)]
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Runs held for positions (the own set's and the log's).
    #[cfg(test)]
    pub(crate) fn own_run_count(&self) -> usize {
        let s = self.lock();
        s.own.run_count() + s.unfolded.len()
    }
}

impl State {
    /// Appends `origin` to the current generation's pending report and to the
    /// position log; whether that made something pending.
    fn record(&mut self, runs: &[Run], unit_ends: &[(u64, u64)]) -> bool {
        let back = self.queue.back_mut().expect("the queue is never empty");
        let was_empty = back.log.is_empty();
        back.log.push(runs, unit_ends);
        self.unfolded.push(runs, unit_ends);
        if self.unfolded.len() >= FOLD_EVERY {
            self.fold();
        }
        was_empty
    }

    fn fold(&mut self) {
        let unfolded = std::mem::take(&mut self.unfolded);
        unfolded.insert_into(&mut self.own);
    }

    fn has_pending(&self) -> bool {
        self.in_flight.is_some()
            || !self.acks.is_empty()
            || self.queue.iter().any(|p| !p.log.is_empty())
            || self.generation > self.announced
            || self.drained_due()
    }

    /// A drained state the dispatcher has not been told.
    fn drained_due(&self) -> bool {
        self.drained > 0 && self.drained != self.drained_told
    }

    /// Moves the oldest pending consumption (or, with nothing consumed, the news
    /// of a new generation) out of the queue as the report in flight.
    fn take_pending(&mut self) -> Option<InFlight> {
        while self.queue.len() > 1 && self.queue.front().is_some_and(|p| p.log.is_empty()) {
            self.queue.pop_front();
        }
        let only = self.queue.len() == 1;
        let drained_due = self.drained_due();
        let front = self.queue.front_mut().expect("the queue is never empty");
        if front.log.is_empty()
            && self.acks.is_empty()
            && front.generation <= self.announced
            && !drained_due
        {
            return None;
        }
        let generation = front.generation;
        let log = &mut front.log;
        let head = if log.exceeds(MAX_REPORT_RUNS) {
            log.take_front(MAX_REPORT_RUNS)
        } else if only {
            std::mem::take(log)
        } else {
            self.queue.pop_front().expect("front exists").log
        };
        let rest_empty = self.queue.iter().all(|p| p.log.is_empty());
        // An acknowledgement promises that everything consumed from the task is in
        // this report or an earlier one.
        let acks = if rest_empty { self.acks.clone() } else { Vec::new() };
        // Likewise, "drained" promises that everything consumed was reported.
        let drained = if rest_empty { self.drained } else { 0 };
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(InFlight { seq, pending: Pending { generation, log: head }, acks, drained })
    }

    fn note_watermark(&mut self, watermark: u64, generation: u64) {
        if watermark == 0 {
            return;
        }
        if generation <= self.generation {
            if watermark > self.watermark {
                self.watermark = watermark;
                // Every later position claims the units below it anyway.
                self.own.raise_watermark(watermark);
                self.unfolded.prune_below(watermark);
            }
            return;
        }
        let w = self.later.entry(generation).or_insert(0);
        *w = (*w).max(watermark);
        if self.later.len() > MAX_LATER_WATERMARKS {
            self.later.pop_first();
        }
    }

    /// Watermarks of generations now reached become usable.
    fn promote_later(&mut self) {
        let still_later = self.later.split_off(&(self.generation + 1));
        let reached = std::mem::replace(&mut self.later, still_later);
        if let Some(w) = reached.values().max() {
            self.note_watermark(*w, self.generation);
        }
    }
}

#[cfg(test)]
#[path = "consumption_tests.rs"]
mod tests;
