//! What arrived in each epoch, value by value: DYNAMIC duplicates and losses
//! (losses attributed to worker kills), OFF copies. All consumers of an epoch
//! share one job iteration, so each epoch is checked on the union of what its
//! consumers received.

use std::collections::{BTreeMap, HashMap};

use super::run::{Mode, Run, MAX_CHECKED_DATASET_LEN};
use super::verdict::{
    first_lines, CheckOptions, Violation, BOUNDED_LOSS, EXACTLY_ONCE, NO_DUPLICATES, OFF_COPIES,
};
use crate::history::Millis;

/// Values shown in a message before "…".
const EXAMPLES: usize = 8;

/// Totals over all epochs, for the summary.
#[derive(Default)]
pub(crate) struct Tally {
    pub duplicates: u64,
    pub losses: u64,
    /// DYNAMIC: every worker kill's id with the losses attributed to it.
    pub lost_by_kill: BTreeMap<u32, u64>,
}

pub(crate) fn check(run: &Run, opts: &CheckOptions, out: &mut Vec<Violation>) -> Tally {
    let mut tally = Tally::default();
    let Some(setup) = &run.setup else { return tally };
    if setup.mode == Mode::Unknown || setup.dataset_len > MAX_CHECKED_DATASET_LEN {
        return tally;
    }
    if setup.mode == Mode::Dynamic {
        for kill in run.faults.iter().filter(|f| f.is_worker_kill()) {
            tally.lost_by_kill.insert(kill.id, 0);
        }
    }
    for epoch in 0..run.epochs.len() {
        let mut counts = vec![0u32; setup.dataset_len as usize];
        for &line in &run.epochs[epoch].elements {
            counts[run.value(line) as usize] += 1;
        }
        match setup.mode {
            Mode::Dynamic => dynamic_epoch(run, epoch, &counts, opts, &mut tally, out),
            Mode::Off => off_epoch(run, epoch, &counts, setup.workers, &mut tally, out),
            Mode::Unknown => {}
        }
    }
    tally
}

/// DYNAMIC: each value at most once, ever; in an epoch every consumer ended,
/// every value exactly once (dispatcher-only faults) or missing at most
/// `max_loss_per_worker_kill` per worker kill in force during the epoch.
fn dynamic_epoch(
    run: &Run,
    epoch: usize,
    counts: &[u32],
    opts: &CheckOptions,
    tally: &mut Tally,
    out: &mut Vec<Violation>,
) {
    if let Some(excess) = Excess::find(run, epoch, counts, 1) {
        tally.duplicates += excess.extra;
        out.push(Violation {
            invariant: NO_DUPLICATES,
            message: format!(
                "epoch {epoch}: {} values delivered more than once ({} extra deliveries): {}",
                excess.values, excess.extra, excess.examples
            ),
            lines: excess.lines,
        });
    }
    if !run.completed(epoch) {
        return;
    }
    let gaps = missing_runs(counts);
    let lost: u64 = gaps.iter().map(|(a, b)| b - a + 1).sum();
    if lost == 0 {
        return;
    }
    tally.losses += lost;
    let witnesses = gap_witnesses(run, epoch, counts, &gaps);
    let mut lines: Vec<usize> = witnesses.iter().take(3).flatten().map(|(line, _)| *line).collect();
    lines.extend(run.epochs[epoch].ends.iter().flatten());
    if run.faults.iter().all(|f| f.fault.is_dispatcher_only()) {
        out.push(Violation {
            invariant: EXACTLY_ONCE,
            message: format!(
                "epoch {epoch}: {lost} values never delivered although no worker was killed \
                 ({} dispatcher faults): {}; the lines show the value delivered next to each gap \
                 and the epoch's ends",
                run.faults.len(),
                fmt_ranges(&gaps)
            ),
            lines: first_lines(lines),
        });
        return;
    }
    let kills = run.worker_kills_in(epoch);
    let allowed = opts.max_loss_per_worker_kill * kills.len() as u64;
    // Each gap goes to the worker kill nearest in time to the delivery next to
    // it: the killed worker was streaming that split when it died.
    for ((a, b), witness) in gaps.iter().zip(&witnesses) {
        let at = witness.map(|(_, t)| t);
        let nearest = kills.iter().min_by_key(|k| at.map_or(0, |t| k.start.abs_diff(t)));
        if let Some(kill) = nearest {
            *tally.lost_by_kill.entry(kill.id).or_default() += b - a + 1;
        }
    }
    if lost > allowed {
        let ids: Vec<String> = kills.iter().map(|k| format!("#{}", k.id)).collect();
        let ids = if ids.is_empty() { String::new() } else { format!(" ({})", ids.join(", ")) };
        out.push(Violation {
            invariant: BOUNDED_LOSS,
            message: format!(
                "epoch {epoch}: {lost} values lost, more than {allowed} = {} worker kills in \
                 force during the epoch{ids} × {} per kill: {}",
                kills.len(),
                opts.max_loss_per_worker_kill,
                fmt_ranges(&gaps)
            ),
            lines: first_lines(lines),
        });
    }
}

/// OFF: each of the W workers produces the whole dataset, so in an epoch every
/// consumer ended, each value arrives at least W times; and never more than
/// W + the worker kills in force during the epoch (a restarted worker starts
/// its copy over).
fn off_epoch(
    run: &Run,
    epoch: usize,
    counts: &[u32],
    workers: u32,
    tally: &mut Tally,
    out: &mut Vec<Violation>,
) {
    let kills = run.worker_kills_in(epoch).len() as u32;
    if let Some(excess) = Excess::find(run, epoch, counts, workers + kills) {
        tally.duplicates += excess.extra;
        out.push(Violation {
            invariant: OFF_COPIES,
            message: format!(
                "epoch {epoch}: {} values arrived more than {workers} workers + {kills} worker \
                 kills = {} times ({} extra): {}",
                excess.values,
                workers + kills,
                excess.extra,
                excess.examples
            ),
            lines: excess.lines,
        });
    }
    if !run.completed(epoch) {
        return;
    }
    let short: Vec<(usize, u32)> =
        counts.iter().enumerate().filter(|(_, c)| **c < workers).map(|(v, c)| (v, *c)).collect();
    if short.is_empty() {
        return;
    }
    let missing: u64 = short.iter().map(|(_, c)| (workers - c) as u64).sum();
    tally.losses += missing;
    let examples: Vec<String> =
        short.iter().take(EXAMPLES).map(|(v, c)| format!("{v} ×{c}")).collect();
    let more = if short.len() > EXAMPLES { ", …" } else { "" };
    let mut lines: Vec<usize> = run.epochs[epoch]
        .elements
        .iter()
        .copied()
        .filter(|l| short.first().is_some_and(|(v, _)| run.value(*l) == *v as i64))
        .collect();
    lines.extend(run.epochs[epoch].ends.iter().flatten());
    out.push(Violation {
        invariant: OFF_COPIES,
        message: format!(
            "epoch {epoch}: {} values arrived fewer than {workers} times ({missing} copies \
             missing): {}{more}",
            short.len(),
            examples.join(", ")
        ),
        lines: first_lines(lines),
    });
}

/// Values that arrived more than `allowed` times in an epoch.
struct Excess {
    /// Deliveries beyond `allowed`, summed over values.
    extra: u64,
    /// How many values arrived too often.
    values: usize,
    /// The first few such values, in the order they went over, with counts.
    examples: String,
    /// Every delivery of the first values to go over, in history order.
    lines: Vec<usize>,
}

impl Excess {
    fn find(run: &Run, epoch: usize, counts: &[u32], allowed: u32) -> Option<Excess> {
        let over = |v: i64| counts[v as usize] > allowed;
        let values = counts.iter().filter(|c| **c > allowed).count();
        if values == 0 {
            return None;
        }
        let extra = counts.iter().map(|c| c.saturating_sub(allowed) as u64).sum();
        // Replay the epoch to find the values in the order they went over.
        let mut seen: HashMap<i64, u32> = HashMap::new();
        let mut first: Vec<i64> = Vec::new();
        for &line in &run.epochs[epoch].elements {
            let v = run.value(line);
            if !over(v) {
                continue;
            }
            let n = seen.entry(v).or_default();
            *n += 1;
            if *n == allowed + 1 && first.len() < EXAMPLES {
                first.push(v);
            }
        }
        let shown: Vec<i64> = first.iter().copied().take(3).collect();
        let lines = run.epochs[epoch]
            .elements
            .iter()
            .copied()
            .filter(|l| shown.contains(&run.value(*l)))
            .collect();
        let mut examples: Vec<String> =
            first.iter().map(|v| format!("{v} ×{}", counts[*v as usize])).collect();
        if values > first.len() {
            examples.push("…".into());
        }
        Some(Excess { extra, values, examples: examples.join(", "), lines: first_lines(lines) })
    }
}

/// Inclusive runs of values that never arrived.
fn missing_runs(counts: &[u32]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (v, c) in counts.iter().enumerate() {
        if *c != 0 {
            continue;
        }
        let v = v as u64;
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == v => *end = v,
            _ => runs.push((v, v)),
        }
    }
    runs
}

/// For each gap, the first delivery of the value just before it (or, if that
/// one is missing too, just after it): its line and time.
fn gap_witnesses(
    run: &Run,
    epoch: usize,
    counts: &[u32],
    gaps: &[(u64, u64)],
) -> Vec<Option<(usize, Millis)>> {
    let delivered = |v: u64| (v as usize) < counts.len() && counts[v as usize] > 0;
    let neighbours: Vec<Option<i64>> = gaps
        .iter()
        .map(|(a, b)| {
            if *a > 0 && delivered(a - 1) {
                Some(*a as i64 - 1)
            } else if delivered(b + 1) {
                Some(*b as i64 + 1)
            } else {
                None
            }
        })
        .collect();
    let mut first: HashMap<i64, (usize, Millis)> =
        neighbours.iter().flatten().map(|v| (*v, (usize::MAX, 0))).collect();
    for &line in &run.epochs[epoch].elements {
        if let Some(slot) = first.get_mut(&run.value(line)) {
            if slot.0 == usize::MAX {
                *slot = (line, run.time(line));
            }
        }
    }
    neighbours.iter().map(|n| n.and_then(|v| first.get(&v).copied())).collect()
}

/// "3..=9 (7), 20 (1), … and 4 more gaps".
fn fmt_ranges(runs: &[(u64, u64)]) -> String {
    let mut parts: Vec<String> = runs
        .iter()
        .take(EXAMPLES)
        .map(|(a, b)| if a == b { format!("{a}") } else { format!("{a}..={b} ({})", b - a + 1) })
        .collect();
    if runs.len() > EXAMPLES {
        parts.push(format!("… and {} more gaps", runs.len() - EXAMPLES));
    }
    parts.join(", ")
}
