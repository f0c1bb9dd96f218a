//! The deterministic-order check of an exactly-once run whose `Start` names an
//! order (`OrderSpec`; docs/exactly-once.md, "Deterministic order"): per epoch
//! and consumer index `i`, what the trainers at index `i` kept, incarnation
//! after incarnation, must be the order's sequence `i`.
//!
//! Why from the order's pure functions (`sluice_dispatcher::order`) and not from
//! an undisturbed read: the expected sequence is then independent of the run
//! and of the cluster (a bug that changes the order everywhere, a reference read
//! included, is still caught). With the dataset `range(dataset_len)` and
//! `eps` elements per split, split `s` is the values `[s·eps, (s+1)·eps)`; the
//! split at place `k` of the seeded order goes to consumer `k % n`, its values
//! in ascending order. What a trainer *kept* is decided by `trainers.rs` (a
//! trainer stopped by a restore keeps what it consumed before the restored
//! checkpoint), so the rolled-back rest must come again, in its place.

use std::collections::BTreeMap;

use sluice_dispatcher::order;

use super::verdict::{first_lines, Violation, DETERMINISTIC_ORDER};
use crate::history::OrderSpec;

/// Values shown on each side of the first difference.
const AROUND: usize = 3;

/// One epoch's trainers as the check needs them.
pub(super) struct EpochOrder<'a> {
    pub epoch: u32,
    /// Each incarnation's trainer ids, index `i` at place `i` (the first
    /// incarnation, then each restore's `started`).
    pub incarnations: &'a [Vec<u32>],
    /// trainer → the (line, value) it kept, in the order it consumed them.
    pub kept: &'a BTreeMap<u32, Vec<(usize, i64)>>,
    /// Every trainer of the last incarnation read to the end: a sequence
    /// shorter than expected is then a violation too.
    pub finished: bool,
}

/// Consumer `i`'s expected values for each `i` in `0..consumers`.
pub(super) fn expected(spec: &OrderSpec, consumers: u32, dataset_len: u64) -> Vec<Vec<i64>> {
    let n = u64::from(consumers.max(1));
    let splits = order::split_count(spec.elements_per_split, dataset_len);
    let mut out = vec![Vec::new(); n as usize];
    for k in 0..splits {
        let s = order::split_at(spec.seed, splits, k);
        let (begin, end) = order::split_range(s, spec.elements_per_split, dataset_len);
        out[(k % n) as usize].extend((begin..end).map(|v| v as i64));
    }
    out
}

/// The violations of one epoch (at most one per consumer index, at its first
/// difference), given each consumer's `expected` sequence.
pub(super) fn check(ep: &EpochOrder, expected: &[Vec<i64>]) -> Vec<Violation> {
    let epoch = ep.epoch;
    let mut violations = Vec::new();
    // Per consumer index: (line, value, trainer) of what its trainers kept.
    let mut got: Vec<Vec<(usize, i64, u32)>> = vec![Vec::new(); expected.len()];
    for trainers in ep.incarnations {
        if trainers.len() != expected.len() {
            violations.push(Violation {
                invariant: DETERMINISTIC_ORDER,
                message: format!(
                    "epoch {epoch}: an incarnation of {} trainer(s) {trainers:?}; the order is \
                     of {} consumers",
                    trainers.len(),
                    expected.len()
                ),
                lines: first_lines(
                    trainers.iter().filter_map(|t| ep.kept.get(t)?.first()).map(|e| e.0).collect(),
                ),
            });
            return violations;
        }
        for (i, t) in trainers.iter().enumerate() {
            got[i].extend(ep.kept.get(t).into_iter().flatten().map(|&(l, v)| (l, v, *t)));
        }
    }
    for (i, (got, want)) in got.iter().zip(expected).enumerate() {
        let values: Vec<i64> = got.iter().map(|e| e.1).collect();
        let d = values.iter().zip(want).take_while(|(a, b)| a == b).count();
        let differs = d < values.len() || (ep.finished && d < want.len());
        if !differs {
            continue;
        }
        let what = if d == values.len() {
            format!("ended after {d} of its {} elements", want.len())
        } else if d == want.len() {
            format!("has {} element(s) past its {} expected", values.len() - d, want.len())
        } else {
            format!("has {} at index {d} where the order has {}", values[d], want[d])
        };
        // The trainer (history `consumer`) that consumed the first difference.
        let who = match got.get(d).or(got.last()) {
            Some(e) => format!(" (trainer {})", e.2),
            None => String::new(),
        };
        let lo = d.saturating_sub(AROUND);
        let window = |s: &[i64]| s[lo.min(s.len())..(d + AROUND + 1).min(s.len())].to_vec();
        violations.push(Violation {
            invariant: DETERMINISTIC_ORDER,
            message: format!(
                "epoch {epoch}: consumer {i}{who} {what}: from index {lo} it consumed {:?}, the \
                 order is {:?}",
                window(&values),
                window(want)
            ),
            lines: first_lines(
                got[lo.min(got.len())..(d + AROUND + 1).min(got.len())]
                    .iter()
                    .map(|e| e.0)
                    .collect(),
            ),
        });
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::super::trainers;
    use super::*;
    use crate::checker::EXACTLY_ONCE;
    use crate::history::Event;

    const SPEC: OrderSpec = OrderSpec { seed: 5, elements_per_split: 2 };
    const LEN: u64 = 12;

    fn start() -> Event {
        Event::Start {
            seed: 5,
            scenario: "deterministic".into(),
            mode: "dynamic".into(),
            dataset_len: LEN,
            workers: 2,
            consumers: 2,
            epochs: 1,
            work_dir_kind: "local disk".into(),
            exactly_once: true,
            order: Some(SPEC),
            lifecycle: false,
        }
    }
    fn els(consumer: u32, values: &[i64]) -> Vec<Event> {
        values.iter().map(|&value| Event::Element { t_ms: 0, consumer, epoch: 0, value }).collect()
    }
    fn ckpt(consumer: u32) -> Event {
        Event::Checkpoint { t_ms: 0, consumer, epoch: 0, generation: 0 }
    }
    fn end(consumer: u32) -> Event {
        Event::EpochEnd { t_ms: 0, consumer, epoch: 0, outcome: "end".into() }
    }
    fn restore(started: Vec<u32>) -> Event {
        Event::Restore { t_ms: 0, epoch: 0, generation: Some(0), ended: vec![0, 1], started }
    }
    /// Consumer 0 and 1 each read their sequence `seqs[i]`, then end.
    fn history(seqs: [&[i64]; 2]) -> Vec<Event> {
        [vec![start()], els(0, seqs[0]), els(1, seqs[1]), vec![end(0), end(1)]].concat()
    }
    fn order_messages(events: &[Event]) -> Vec<String> {
        let r = trainers::check(events);
        r.violations
            .iter()
            .filter(|v| v.invariant == DETERMINISTIC_ORDER)
            .map(|v| v.message.clone())
            .collect()
    }

    #[test]
    fn the_expected_sequences_are_whole_splits_of_the_seeded_order_dealt_round_robin() {
        let exp = expected(&SPEC, 2, LEN);
        let mut all: Vec<i64> = exp.concat();
        assert_ne!(all, (0..LEN as i64).collect::<Vec<_>>(), "seeded, not the source order");
        all.sort_unstable();
        assert_eq!(all, (0..LEN as i64).collect::<Vec<_>>(), "every value once");
        for seq in &exp {
            assert_eq!(seq.len(), 6, "3 of the 6 splits each");
            for pair in seq.chunks(2) {
                assert!(pair[0] % 2 == 0 && pair[1] == pair[0] + 1, "a whole split: {seq:?}");
            }
        }
        // Place k goes to consumer k % 2.
        let splits = order::split_count(2, LEN);
        assert_eq!(exp[1][0], 2 * order::split_at(5, splits, 1) as i64);
    }

    #[test]
    fn each_consumer_in_its_order_passes_and_a_swapped_pair_fails_with_its_index() {
        let exp = expected(&SPEC, 2, LEN);
        let r = trainers::check(&history([&exp[0], &exp[1]]));
        assert!(r.passed(), "{:?}", r.violations);
        assert_eq!(r.summary.mode, "dynamic exactly-once deterministic");

        let mut swapped = exp[0].clone();
        swapped.swap(2, 3);
        let r = trainers::check(&history([&swapped, &exp[1]]));
        assert_eq!(r.violations.len(), 1, "exactly once still holds: {:?}", r.violations);
        let want = format!(
            "epoch 0: consumer 0 (trainer 0) has {} at index 2 where the order has {}",
            exp[0][3], exp[0][2]
        );
        assert!(r.violations[0].message.starts_with(&want), "{:?}", r.violations);
        assert_eq!(r.violations[0].lines, vec![1, 2, 3, 4, 5, 6], "the lines around index 2");
        // A pair swapped between the two consumers fails for both.
        let (mut a, mut b) = (exp[0].clone(), exp[1].clone());
        std::mem::swap(&mut a[0], &mut b[0]);
        assert_eq!(order_messages(&history([&a, &b])).len(), 2);
    }

    #[test]
    fn a_missing_or_repeated_element_fails_at_its_index() {
        let exp = expected(&SPEC, 2, LEN);
        let mut missing = exp[1].clone();
        missing.remove(3);
        let events = history([&exp[0], &missing]);
        let want = format!(
            "consumer 1 (trainer 1) has {} at index 3 where the order has {}",
            exp[1][4], exp[1][3]
        );
        assert!(order_messages(&events)[0].contains(&want), "{:?}", order_messages(&events));
        assert!(trainers::check(&events).violations.iter().any(|v| v.invariant == EXACTLY_ONCE));

        let mut repeated = exp[0].clone();
        repeated.insert(3, exp[0][2]);
        let want = format!(
            "consumer 0 (trainer 0) has {} at index 3 where the order has {}",
            exp[0][2], exp[0][3]
        );
        let messages = order_messages(&history([&repeated, &exp[1]]));
        assert!(messages.len() == 1 && messages[0].contains(&want), "{messages:?}");

        // The last element missing: the sequence ends early.
        let short = &exp[0][..5];
        let messages = order_messages(&history([short, &exp[1]]));
        assert!(
            messages[0].contains("consumer 0 (trainer 0) ended after 5 of its 6 elements"),
            "{messages:?}"
        );
    }

    #[test]
    fn a_restore_continues_each_index_and_what_was_rolled_back_comes_again_in_its_place() {
        let exp = expected(&SPEC, 2, LEN);
        // Trainers 0 and 1 checkpoint after 3 and 2 elements; trainer 0 consumes
        // one more, rolled back; trainers 2 and 3 continue indexes 0 and 1.
        let before = [
            vec![start()],
            els(0, &exp[0][..3]),
            vec![ckpt(0)],
            els(1, &exp[1][..2]),
            vec![ckpt(1)],
            els(0, &exp[0][3..4]),
        ]
        .concat();
        // Trainer 2 reads `a` (index 0), trainer 3 `b` (index 1), after the restore.
        let restored = |a: &[i64], b: &[i64]| {
            let after = [vec![restore(vec![2, 3])], els(3, b), els(2, a), vec![end(2), end(3)]];
            [vec![before.clone()], after.to_vec()].concat().concat()
        };
        let r = trainers::check(&restored(&exp[0][3..], &exp[1][2..]));
        assert!(r.passed(), "{:?}", r.violations);

        // The restored trainers swap indexes: each continues the other's sequence.
        let swapped = restored(&exp[1][2..], &exp[0][3..]);
        let messages = order_messages(&swapped);
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].contains("consumer 0 (trainer 2) has"), "{messages:?}");
        assert!(messages[0].contains("at index 3"), "{messages:?}");

        // A restore with another number of trainers breaks the order.
        let fewer = [before, vec![restore(vec![2])], els(2, &exp[0][3..]), vec![end(2)]].concat();
        let messages = order_messages(&fewer);
        assert!(messages[0].contains("an incarnation of 1 trainer(s) [2]"), "{messages:?}");
    }
}
