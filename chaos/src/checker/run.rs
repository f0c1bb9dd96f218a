//! The history read once into what the checks need: the run's setup (from the
//! `Start` line), each epoch's in-range element lines and its consumers' ends,
//! the fault spans (`FaultStart` paired with `FaultEnd` by id) and the registry
//! lines. Problems with the history itself (no `Start`, a fault never healed, a
//! read that never ended, a value outside the dataset) become violations here,
//! and the lines they concern are left out of the later checks.

use std::collections::BTreeMap;

use super::verdict::{first_lines, Violation, HISTORY, IN_RANGE};
use crate::history::{Event, Fault, Millis};

/// Above this `dataset_len` the per-value checks are skipped (they keep one
/// counter per value and epoch); chaos runs use far smaller datasets.
pub(crate) const MAX_CHECKED_DATASET_LEN: u64 = 50_000_000;

/// What the `Start` line says ran.
pub(crate) struct Setup {
    pub seed: u64,
    pub scenario: String,
    pub mode: Mode,
    pub mode_name: String,
    pub dataset_len: u64,
    pub workers: u32,
    pub consumers: u32,
    pub epochs: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Dynamic,
    Off,
    Unknown,
}

/// One injected fault, from its `FaultStart` to its `FaultEnd` (if it healed).
pub(crate) struct FaultSpan<'a> {
    pub id: u32,
    pub fault: &'a Fault,
    pub start: Millis,
    pub end: Option<Millis>,
    pub start_line: usize,
    pub end_line: Option<usize>,
}

impl FaultSpan<'_> {
    /// Whether the fault was in force at some instant of `[from, to]` (a fault
    /// that never healed lasts to the end of the history).
    pub fn overlaps(&self, from: Millis, to: Millis) -> bool {
        self.start <= to && self.end.unwrap_or(Millis::MAX) >= from
    }

    pub fn is_worker_kill(&self) -> bool {
        matches!(self.fault, Fault::KillWorker { .. })
    }
}

/// One epoch's lines: its in-range elements and each consumer's `EpochEnd`.
#[derive(Default)]
pub(crate) struct EpochLines {
    /// Lines of the epoch's in-range `Element`s, in history order.
    pub elements: Vec<usize>,
    /// Per consumer, the line of its first `EpochEnd` for this epoch.
    pub ends: Vec<Option<usize>>,
}

pub(crate) struct Run<'a> {
    pub events: &'a [Event],
    pub setup: Option<Setup>,
    /// Indexed by epoch (`0..setup.epochs`); empty without a `Start`.
    pub epochs: Vec<EpochLines>,
    pub faults: Vec<FaultSpan<'a>>,
    /// Arrival time of every `Element` line (in range or not), sorted.
    pub arrivals: Vec<Millis>,
    pub registry: Vec<usize>,
}

impl<'a> Run<'a> {
    /// Reads the events; history-shape and range problems go to `out`.
    pub fn read(events: &'a [Event], out: &mut Vec<Violation>) -> Run<'a> {
        let setup = read_setup(events, out);
        let (epochs, consumers, values) = match &setup {
            Some(s) => (s.epochs, s.consumers, s.dataset_len),
            None => (0, 0, 0),
        };
        let mut run = Run {
            events,
            epochs: (0..epochs)
                .map(|_| EpochLines { elements: Vec::new(), ends: vec![None; consumers as usize] })
                .collect(),
            setup,
            faults: Vec::new(),
            arrivals: Vec::new(),
            registry: Vec::new(),
        };
        let mut out_of_range = Vec::new();
        let mut ended_twice = Vec::new();
        let mut bad_fault_lines = Vec::new();
        let mut open: BTreeMap<u32, usize> = BTreeMap::new();
        for (line, event) in events.iter().enumerate() {
            match event {
                // Exactly-once runs are checked by `trainers`, lifecycle runs by
                // `lifecycle`, not here.
                Event::Start { .. }
                | Event::Checkpoint { .. }
                | Event::Restore { .. }
                | Event::JobStart { .. }
                | Event::JobEnd { .. }
                | Event::WorkerUp { .. } => {}
                Event::Element { t_ms, consumer, epoch, value } => {
                    run.arrivals.push(*t_ms);
                    if run.setup.is_none() {
                        continue;
                    }
                    let in_range = *consumer < consumers
                        && *epoch < epochs
                        && *value >= 0
                        && (*value as u64) < values;
                    if in_range {
                        run.epochs[*epoch as usize].elements.push(line);
                    } else {
                        out_of_range.push(line);
                    }
                }
                Event::EpochEnd { consumer, epoch, .. } => {
                    if run.setup.is_none() {
                        continue;
                    }
                    if *consumer >= consumers || *epoch >= epochs {
                        out_of_range.push(line);
                        continue;
                    }
                    let slot = &mut run.epochs[*epoch as usize].ends[*consumer as usize];
                    match slot {
                        None => *slot = Some(line),
                        Some(first) => ended_twice.extend([*first, line]),
                    }
                }
                Event::FaultStart { t_ms, id, fault } => {
                    if open.contains_key(id) || run.faults.iter().any(|f| f.id == *id) {
                        bad_fault_lines.push(line);
                        continue;
                    }
                    open.insert(*id, run.faults.len());
                    run.faults.push(FaultSpan {
                        id: *id,
                        fault,
                        start: *t_ms,
                        end: None,
                        start_line: line,
                        end_line: None,
                    });
                }
                Event::FaultEnd { t_ms, id } => match open.remove(id) {
                    Some(i) => {
                        run.faults[i].end = Some(*t_ms);
                        run.faults[i].end_line = Some(line);
                    }
                    None => bad_fault_lines.push(line),
                },
                Event::Registry { .. } => run.registry.push(line),
            }
        }
        run.arrivals.sort_unstable();
        if !out_of_range.is_empty() {
            out.push(Violation {
                invariant: IN_RANGE,
                message: format!(
                    "{} lines name a value outside 0..{values}, an epoch outside 0..{epochs} or a \
                     consumer outside 0..{consumers} (corrupt data or a harness bug); they are \
                     left out of the other checks",
                    out_of_range.len()
                ),
                lines: first_lines(out_of_range),
            });
        }
        if !ended_twice.is_empty() {
            out.push(Violation {
                invariant: HISTORY,
                message: "a consumer ended the same epoch more than once; the first end counts"
                    .into(),
                lines: first_lines(ended_twice),
            });
        }
        if !bad_fault_lines.is_empty() {
            out.push(Violation {
                invariant: HISTORY,
                message: "a FaultStart reuses an id, or a FaultEnd has no open FaultStart".into(),
                lines: first_lines(bad_fault_lines),
            });
        }
        run.check_complete(out);
        run
    }

    /// A history cut short (the run crashed) leaves reads without an end or
    /// faults never healed: say so once, whatever else can still be checked.
    fn check_complete(&self, out: &mut Vec<Violation>) {
        let Some(setup) = &self.setup else { return };
        let unended: usize =
            self.epochs.iter().map(|e| e.ends.iter().filter(|end| end.is_none()).count()).sum();
        let unhealed: Vec<usize> =
            self.faults.iter().filter(|f| f.end.is_none()).map(|f| f.start_line).collect();
        if unended == 0 && unhealed.is_empty() {
            return;
        }
        let reads = setup.consumers as u64 * setup.epochs as u64;
        out.push(Violation {
            invariant: HISTORY,
            message: format!(
                "history incomplete (did the run stop early?): {unended} of {reads} consumer \
                 epoch reads have no EpochEnd and {} faults never healed; the checks below cover \
                 what was recorded, losses only in epochs every consumer ended",
                unhealed.len()
            ),
            lines: first_lines(unhealed),
        });
    }

    pub fn time(&self, line: usize) -> Millis {
        self.events[line].t_ms().unwrap_or(0)
    }

    /// The value of an `Element` line (only called on element lines).
    pub fn value(&self, line: usize) -> i64 {
        match &self.events[line] {
            Event::Element { value, .. } => *value,
            _ => unreachable!("line {line} is not an element"),
        }
    }

    /// Whether every consumer's read of `epoch` ended with "end".
    pub fn completed(&self, epoch: usize) -> bool {
        self.epochs[epoch].ends.iter().all(|end| {
            matches!(end, Some(l) if matches!(&self.events[*l], Event::EpochEnd { outcome, .. } if outcome == "end"))
        })
    }

    /// The span in which `epoch` was being read: from the earliest end of the
    /// previous epoch (the run's start for the first) or its first element if
    /// earlier, to its last consumer's end (open-ended if one never ended).
    pub fn span(&self, epoch: usize) -> (Millis, Millis) {
        let lines = &self.epochs[epoch];
        let first = lines.elements.iter().map(|l| self.time(*l)).min();
        let prev_end = if epoch == 0 {
            Some(0)
        } else {
            self.epochs[epoch - 1].ends.iter().flatten().map(|l| self.time(*l)).min()
        };
        let from = match (first, prev_end) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(0),
        };
        let to = if lines.ends.iter().all(Option::is_some) {
            lines.ends.iter().flatten().map(|l| self.time(*l)).max().unwrap_or(from)
        } else {
            Millis::MAX
        };
        (from, to)
    }

    /// Worker kills in force at some instant of `epoch`'s span.
    pub fn worker_kills_in(&self, epoch: usize) -> Vec<&FaultSpan<'a>> {
        let (from, to) = self.span(epoch);
        self.faults.iter().filter(|f| f.is_worker_kill() && f.overlaps(from, to)).collect()
    }
}

fn read_setup(events: &[Event], out: &mut Vec<Violation>) -> Option<Setup> {
    let starts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::Start { .. }))
        .map(|(i, _)| i)
        .collect();
    let Some(&line) = starts.first() else {
        out.push(Violation {
            invariant: HISTORY,
            message: "the history has no Start line: nothing about the dataset can be checked"
                .into(),
            lines: first_lines((0..events.len()).collect()),
        });
        return None;
    };
    if line != 0 || starts.len() > 1 {
        out.push(Violation {
            invariant: HISTORY,
            message: "the Start line must be the first line and appear once; the first is used"
                .into(),
            lines: first_lines(starts),
        });
    }
    let Event::Start { seed, scenario, mode, dataset_len, workers, consumers, epochs, .. } =
        &events[line]
    else {
        unreachable!("filtered on Start")
    };
    let parsed = match mode.to_ascii_lowercase().as_str() {
        "dynamic" => Mode::Dynamic,
        "off" => Mode::Off,
        _ => Mode::Unknown,
    };
    if parsed == Mode::Unknown {
        out.push(Violation {
            invariant: HISTORY,
            message: format!(
                "unknown mode {mode:?} (expected \"dynamic\" or \"off\"): no delivery checks"
            ),
            lines: vec![line],
        });
    }
    if *dataset_len > MAX_CHECKED_DATASET_LEN {
        out.push(Violation {
            invariant: HISTORY,
            message: format!(
                "dataset_len {dataset_len} is above {MAX_CHECKED_DATASET_LEN}: per-value checks \
                 skipped"
            ),
            lines: vec![line],
        });
    }
    Some(Setup {
        seed: *seed,
        scenario: scenario.clone(),
        mode: parsed,
        mode_name: mode.clone(),
        dataset_len: *dataset_len,
        workers: *workers,
        consumers: *consumers,
        epochs: *epochs,
    })
}
