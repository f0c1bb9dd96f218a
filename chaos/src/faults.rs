//! The fault schedule of a run, drawn from its seed, and (in [`execute`]) the
//! executor that applies it to the cluster while the consumers read.
//!
//! A schedule is a list of faults, each with the pause before it and how long it
//! lasts until healed. `ChaCha8Rng::seed_from_u64(seed)` draws everything the
//! plan contains (kinds, which follower, which pair, delays, durations), so a seed
//! replays the same plan; only what depends on the live cluster (which node leads
//! when the fault starts) is resolved by the executor.
//!
//! Spacing: faults never overlap. Each is healed within [`MAX_HOLD`], then the
//! executor waits until the cluster is whole (a leader, every node caught up)
//! before the pause to the next, so a majority is back between any two faults and
//! at most one quorum-losing fault is ever in force. The first fault starts when
//! the consumers have received a seeded fraction of epoch 0: mid-epoch on a fast
//! machine and a slow one alike.

pub mod execute;

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenarios::{FaultKind, Scenario};

/// Longest time any fault stays in force before it is healed.
pub const MAX_HOLD: Duration = Duration::from_secs(6);
/// Most faults one run injects.
pub const MAX_FAULTS: usize = 16;

/// Two dispatchers whose link a network fault affects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// The leader (when the fault starts) and its `pick % 2`-th follower.
    WithLeader { pick: usize },
    /// A fixed pair of node ids, whatever their roles.
    Pair(u64, u64),
}

/// One planned fault, its targets drawn; what needs the live cluster is resolved
/// when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    KillLeader,
    /// The `pick % 2`-th follower (by node id).
    KillFollower {
        pick: usize,
    },
    /// The leader, or the `pick % 2`-th follower.
    Pause {
        leader: bool,
        pick: usize,
    },
    /// The leader and its `pick % 2`-th follower.
    KillTwo {
        pick: usize,
    },
    FullRestart,
    /// The `pick % 2`-th follower.
    Wipe {
        pick: usize,
    },
    /// Down: the `pick % 2`-th follower g, then the leader; wiped: the other follower.
    WipeWithCrash {
        pick: usize,
    },
    Partition(Link),
    Delay {
        link: Link,
        ms: u64,
    },
    Drop(Link),
    S3Slow {
        ms: u64,
    },
    S3Down,
    KillWorker {
        worker: u32,
    },
    /// Restore this many trainers (1..=3) from the last checkpoint.
    RestartTrainers {
        consumers: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Pause before the fault: after the previous one healed and the cluster is
    /// whole (for the first: after `Schedule::first_after_elements`).
    pub after: Duration,
    pub fault: Planned,
    /// How long it stays in force before it is healed (≤ [`MAX_HOLD`]).
    pub hold: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The first fault starts once the consumers together received this many
    /// elements (a fraction of epoch 0).
    pub first_after_elements: u64,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The schedule of `scenario` for `seed`: `scenario.first` in order, then draws
    /// from `scenario.kinds`, `scenario.faults` in all (at most [`MAX_FAULTS`]).
    pub fn plan(scenario: &Scenario, seed: u64) -> Schedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let copies = match scenario.mode {
            sluice_client::ProcessingMode::Off => scenario.workers as u64,
            // DYNAMIC and the static modes deliver each element once.
            _ => 1,
        };
        let epoch = scenario.dataset_len * copies;
        let first_after_elements = epoch * rng.gen_range(15..=50) / 100;
        let count = scenario.faults.clamp(scenario.first.len(), MAX_FAULTS);
        let mut kinds: Vec<FaultKind> = scenario.first.to_vec();
        while kinds.len() < count {
            match scenario.kinds.choose(&mut rng) {
                Some(k) => kinds.push(*k),
                None => break,
            }
        }
        let steps = kinds
            .into_iter()
            .enumerate()
            .map(|(i, kind)| {
                let after = if i == 0 {
                    Duration::ZERO
                } else {
                    Duration::from_millis(rng.gen_range(500..=3_000))
                };
                let (fault, hold) = draw(kind, scenario, &mut rng);
                Step { after, fault, hold: hold.min(MAX_HOLD) }
            })
            .collect();
        Schedule { first_after_elements, steps }
    }
}

fn ms(rng: &mut ChaCha8Rng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.gen_range(range))
}

fn link(rng: &mut ChaCha8Rng) -> Link {
    if rng.gen_bool(0.5) {
        Link::WithLeader { pick: rng.gen_range(0..2) }
    } else {
        let pairs = [(1, 2), (1, 3), (2, 3)];
        let (a, b) = pairs[rng.gen_range(0..pairs.len())];
        Link::Pair(a, b)
    }
}

/// The targets and the hold of one fault of `kind`.
fn draw(kind: FaultKind, scenario: &Scenario, rng: &mut ChaCha8Rng) -> (Planned, Duration) {
    let pick = rng.gen_range(0..2);
    match kind {
        FaultKind::KillLeader => (Planned::KillLeader, ms(rng, 500..=4_000)),
        FaultKind::KillFollower => (Planned::KillFollower { pick }, ms(rng, 500..=4_000)),
        FaultKind::Pause => {
            (Planned::Pause { leader: rng.gen_bool(0.5), pick }, ms(rng, 1_000..=4_000))
        }
        FaultKind::KillTwo => (Planned::KillTwo { pick }, ms(rng, 1_000..=4_000)),
        FaultKind::FullRestart => (Planned::FullRestart, ms(rng, 500..=3_000)),
        FaultKind::Wipe => (Planned::Wipe { pick }, ms(rng, 500..=3_000)),
        FaultKind::WipeWithCrash => (Planned::WipeWithCrash { pick }, ms(rng, 1_000..=4_000)),
        FaultKind::Partition => (Planned::Partition(link(rng)), ms(rng, 1_000..=5_000)),
        FaultKind::Delay => {
            let delay = [20, 100, 300][rng.gen_range(0..3)];
            (Planned::Delay { link: link(rng), ms: delay }, ms(rng, 1_000..=5_000))
        }
        FaultKind::Drop => (Planned::Drop(link(rng)), ms(rng, 1_000..=4_000)),
        FaultKind::S3Slow => {
            let delay = [20, 100, 300][rng.gen_range(0..3)];
            (Planned::S3Slow { ms: delay }, ms(rng, 1_000..=4_000))
        }
        FaultKind::S3Down => (Planned::S3Down, ms(rng, 1_000..=4_000)),
        FaultKind::KillWorker => {
            let worker = rng.gen_range(0..scenario.workers.max(1));
            (Planned::KillWorker { worker }, ms(rng, 500..=3_000))
        }
        FaultKind::RestartTrainers => {
            // The deterministic order depends on the number of consumers: keep it.
            let consumers =
                if scenario.deterministic { scenario.consumers } else { rng.gen_range(1..=3) };
            (Planned::RestartTrainers { consumers }, ms(rng, 0..=500))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios;

    #[test]
    fn a_seed_replays_the_same_schedule_and_another_differs() {
        for s in scenarios::all() {
            assert_eq!(Schedule::plan(&s, 7), Schedule::plan(&s, 7), "{}", s.name);
        }
        let s = scenarios::by_name("leader").unwrap();
        assert!((0..20).any(|seed| Schedule::plan(&s, seed) != Schedule::plan(&s, 7)));
    }

    #[test]
    fn every_schedule_starts_with_the_required_faults_and_is_bounded() {
        for s in scenarios::all() {
            for seed in 0..50 {
                let plan = Schedule::plan(&s, seed);
                assert_eq!(plan.steps.len(), s.faults.clamp(s.first.len(), MAX_FAULTS));
                assert!(plan.steps.iter().all(|st| st.hold <= MAX_HOLD));
                let epoch = s.dataset_len
                    * if s.mode == sluice_client::ProcessingMode::Off { 2 } else { 1 };
                assert!(plan.first_after_elements > 0 && plan.first_after_elements < epoch);
                if s.name == "leader" {
                    assert_eq!(plan.steps[0].fault, Planned::KillLeader, "seed {seed}");
                }
            }
        }
    }
}
