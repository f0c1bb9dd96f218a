//! The check of an exactly-once run (`trainers.rs`): per epoch, what the trainers
//! consumed and kept must be every element of the dataset exactly once, through
//! worker kills, dispatcher failovers and trainer restarts.
//!
//! What a trainer *kept*: a trainer that read to the end of the epoch kept all it
//! consumed; a trainer stopped by a `Restore` from generation `g` kept what it
//! consumed before its `Checkpoint` of generation `g` (a restored training job
//! rolls back to that checkpoint, so the rest must come again); one stopped by a
//! `Restore` with no generation kept nothing. Then, per epoch:
//! - **exactly-once**: every value of `0..dataset_len` kept exactly once;
//! - **completion**: every trainer of the epoch's last incarnation ended with "end";
//! - **history**: a restore names a generation one of its ended trainers never took;
//! - **deterministic-order** (when the `Start` names an order): what the trainers
//!   at each consumer index kept, incarnation after incarnation, is that index's
//!   sequence of the order (`order.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::order::{self, EpochOrder};
use super::verdict::{
    first_lines, CheckResult, Summary, Violation, COMPLETION, EXACTLY_ONCE, HISTORY,
};
use crate::history::{Event, OrderSpec};

/// Per epoch: each trainer's element lines, checkpoints and how it ended.
#[derive(Default)]
struct Epoch {
    /// trainer → its (line, value) in history order.
    elements: BTreeMap<u32, Vec<(usize, i64)>>,
    /// trainer → generation → line of its Checkpoint.
    checkpoints: BTreeMap<u32, BTreeMap<u64, usize>>,
    /// trainer → (line, outcome) of its EpochEnd.
    ends: BTreeMap<u32, (usize, String)>,
    /// trainer → (line, generation) of the Restore that stopped it.
    stopped: BTreeMap<u32, (usize, Option<u64>)>,
    /// Trainers started by restores.
    started: BTreeSet<u32>,
    restores: usize,
    /// Each incarnation's trainers in consumer-index order: the first restore's
    /// `ended`, then every restore's `started`.
    incarnations: Vec<Vec<u32>>,
}

pub(super) fn check(events: &[Event]) -> CheckResult {
    let mut violations = Vec::new();
    let mut summary = Summary::default();
    let mut dataset_len = 0u64;
    let mut ordered: Option<(OrderSpec, u32)> = None;
    let mut epochs: BTreeMap<u32, Epoch> = BTreeMap::new();
    for (line, e) in events.iter().enumerate() {
        match e {
            Event::Start {
                seed,
                scenario,
                mode,
                dataset_len: n,
                epochs: count,
                order,
                consumers,
                ..
            } => {
                summary.seed = *seed;
                summary.scenario = scenario.clone();
                summary.mode = format!("{mode} exactly-once");
                if let Some(spec) = order {
                    summary.mode.push_str(" deterministic");
                    ordered = Some((*spec, *consumers));
                }
                dataset_len = *n;
                for epoch in 0..*count {
                    epochs.entry(epoch).or_default();
                }
            }
            Event::Element { consumer, epoch, value, .. } => {
                summary.elements_checked += 1;
                let ep = epochs.entry(*epoch).or_default();
                ep.elements.entry(*consumer).or_default().push((line, *value));
            }
            Event::Checkpoint { consumer, epoch, generation, .. } => {
                let ep = epochs.entry(*epoch).or_default();
                ep.checkpoints.entry(*consumer).or_default().insert(*generation, line);
            }
            Event::EpochEnd { consumer, epoch, outcome, .. } => {
                let ep = epochs.entry(*epoch).or_default();
                ep.ends.entry(*consumer).or_insert((line, outcome.clone()));
            }
            Event::Restore { epoch, generation, ended, started, .. } => {
                let ep = epochs.entry(*epoch).or_default();
                ep.restores += 1;
                if ep.incarnations.is_empty() {
                    ep.incarnations.push(ended.clone());
                }
                ep.incarnations.push(started.clone());
                ep.started.extend(started.iter().copied());
                for t in ended {
                    ep.stopped.insert(*t, (line, *generation));
                }
            }
            Event::FaultStart { fault, .. } => {
                *summary.faults_by_kind.entry(fault.kind_name().to_string()).or_default() += 1;
            }
            _ => {}
        }
    }
    let expected = ordered.map(|(spec, n)| order::expected(&spec, n, dataset_len));
    let (mut duplicates, mut losses) = (0u64, 0u64);
    for (epoch, ep) in &mut epochs {
        if ep.incarnations.is_empty() {
            let ids: BTreeSet<u32> = ep.elements.keys().chain(ep.ends.keys()).copied().collect();
            ep.incarnations.push(ids.into_iter().collect());
        }
        let ep = &*ep;
        let mut kept: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        let mut kept_by: BTreeMap<u32, Vec<(usize, i64)>> = BTreeMap::new();
        for (trainer, elements) in &ep.elements {
            let until = match ep.stopped.get(trainer) {
                None => usize::MAX,
                Some((_, None)) => 0,
                Some((restore_line, Some(g))) => {
                    match ep.checkpoints.get(trainer).and_then(|c| c.get(g)) {
                        Some(line) => *line,
                        None => {
                            violations.push(Violation {
                                invariant: HISTORY,
                                message: format!(
                                    "epoch {epoch}: trainer {trainer} was restored from \
                                     generation {g}, a position it never took"
                                ),
                                lines: vec![*restore_line],
                            });
                            0
                        }
                    }
                }
            };
            for (line, value) in elements.iter().filter(|(l, _)| *l < until) {
                kept.entry(*value).or_default().push(*line);
                kept_by.entry(*trainer).or_default().push((*line, *value));
            }
        }
        let repeated: Vec<(&i64, &Vec<usize>)> = kept.iter().filter(|(_, l)| l.len() > 1).collect();
        let missing: Vec<i64> = (0..dataset_len as i64).filter(|v| !kept.contains_key(v)).collect();
        let out_of_range: Vec<i64> =
            kept.keys().copied().filter(|v| *v < 0 || *v >= dataset_len as i64).collect();
        duplicates += repeated.iter().map(|(_, l)| l.len() as u64 - 1).sum::<u64>();
        let finished = !ep.ends.is_empty()
            && ep
                .elements
                .keys()
                .chain(ep.ends.keys())
                .chain(ep.started.iter())
                .filter(|t| !ep.stopped.contains_key(t))
                .all(|t| ep.ends.get(t).is_some_and(|(_, o)| o == "end"));
        if finished {
            losses += missing.len() as u64;
        }
        if !repeated.is_empty() || (finished && !missing.is_empty()) || !out_of_range.is_empty() {
            violations.push(Violation {
                invariant: EXACTLY_ONCE,
                message: format!(
                    "epoch {epoch}: {} value(s) kept more than once (first {:?}), {} never kept \
                     (first {:?}), {} out of range",
                    repeated.len(),
                    repeated.iter().take(5).map(|(v, _)| **v).collect::<Vec<_>>(),
                    missing.len(),
                    &missing[..missing.len().min(5)],
                    out_of_range.len()
                ),
                lines: first_lines(repeated.iter().flat_map(|(_, l)| l.iter().copied()).collect()),
            });
        }
        if let Some(expected) = &expected {
            let incarnations = &ep.incarnations;
            let this = EpochOrder { epoch: *epoch, incarnations, kept: &kept_by, finished };
            violations.extend(order::check(&this, expected));
        }
        let unfinished: BTreeSet<u32> = ep
            .ends
            .iter()
            .filter(|(t, (_, o))| !ep.stopped.contains_key(t) && o != "end")
            .map(|(t, _)| *t)
            .collect();
        if !finished || !unfinished.is_empty() {
            violations.push(Violation {
                invariant: COMPLETION,
                message: format!(
                    "epoch {epoch}: the last trainers did not all read to the end ({} restore(s); \
                     not ended or failed: {unfinished:?})",
                    ep.restores
                ),
                lines: first_lines(ep.ends.values().map(|(l, _)| *l).collect()),
            });
        } else {
            summary.epochs += 1;
        }
    }
    summary.duplicates = duplicates;
    summary.losses = losses;
    summary.violations = violations.len();
    CheckResult { summary, violations }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(n: u64) -> Event {
        Event::Start {
            seed: 1,
            scenario: "exactly-once".into(),
            mode: "dynamic".into(),
            dataset_len: n,
            workers: 2,
            consumers: 1,
            epochs: 1,
            work_dir_kind: "local disk".into(),
            exactly_once: true,
            order: None,
            lifecycle: false,
        }
    }
    fn el(consumer: u32, value: i64) -> Event {
        Event::Element { t_ms: 0, consumer, epoch: 0, value }
    }
    fn ckpt(consumer: u32, generation: u64) -> Event {
        Event::Checkpoint { t_ms: 0, consumer, epoch: 0, generation }
    }
    fn end(consumer: u32) -> Event {
        Event::EpochEnd { t_ms: 0, consumer, epoch: 0, outcome: "end".into() }
    }
    fn restore(generation: Option<u64>, ended: Vec<u32>, started: Vec<u32>) -> Event {
        Event::Restore { t_ms: 0, epoch: 0, generation, ended, started }
    }

    #[test]
    fn what_came_after_the_restored_checkpoint_must_come_again() {
        // Trainer 0 keeps 0, 1 (before generation 0), consumed 2 after it: rolled back.
        let ok = [
            start(4),
            el(0, 0),
            el(0, 1),
            ckpt(0, 0),
            el(0, 2),
            restore(Some(0), vec![0], vec![1]),
            el(1, 2),
            el(1, 3),
            end(1),
        ];
        let r = check(&ok);
        assert!(r.passed(), "{:?}", r.violations);
        assert_eq!(r.summary.epochs, 1);

        // The same, but 2 never comes again: lost.
        let lost = [&ok[..6], &[el(1, 3), end(1)]].concat();
        let r = check(&lost);
        assert_eq!(r.summary.losses, 1, "{:?}", r.violations);
        assert_eq!(r.violations[0].invariant, EXACTLY_ONCE);

        // 1 kept before the checkpoint and delivered again after the restore: repeated.
        let repeated = [&ok[..8], &[el(1, 1), end(1)]].concat();
        let r = check(&repeated);
        assert_eq!(r.summary.duplicates, 1, "{:?}", r.violations);
    }

    #[test]
    fn a_restore_without_a_generation_rolls_everything_back_and_an_unended_trainer_fails() {
        let events =
            [start(2), el(0, 0), restore(None, vec![0], vec![1, 2]), el(1, 0), el(2, 1), end(1)];
        let r = check(&events);
        assert!(r.violations.iter().any(|v| v.invariant == COMPLETION), "{:?}", r.violations);
        let r = check(&[&events[..], &[end(2)]].concat());
        assert!(r.passed(), "{:?}", r.violations);
    }

    #[test]
    fn a_restore_from_a_generation_never_taken_is_a_history_violation() {
        let r = check(&[start(1), el(0, 0), restore(Some(3), vec![0], vec![1]), el(1, 0), end(1)]);
        assert!(r.violations.iter().any(|v| v.invariant == HISTORY), "{:?}", r.violations);
    }
}
