//! What a lifecycle run does, drawn from its seed: the stream of jobs (their
//! pipelines, modes, readers) and the stream of lifecycle events between them.
//! Pure: no clock, no cluster; the same seed draws the same streams (their
//! interleaving with the run's timing is not fixed).

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::history::{JobSpec, Pipeline};

/// Source elements of a short and a long job, tuned in a debug build (three times
/// as many in an optimized one, as `scenarios::by_build`).
const SHORT: std::ops::RangeInclusive<u64> = 100..=600;
const LONG: std::ops::RangeInclusive<u64> = 2_000..=4_000;

fn by_build(n: u64) -> u64 {
    if cfg!(debug_assertions) {
        n
    } else {
        3 * n
    }
}

/// One lifecycle event (the executor resolves which worker from the live ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL a live worker; after `replace_after`, start one on a new address.
    KillWorker { pick: u32, replace_after: Duration },
    /// SIGTERM a live worker (it drains) and start one on a new address.
    DrainWorker { pick: u32 },
    /// Restart the three dispatchers one by one, each waited for.
    RollingRestart,
}

/// The seeded streams of one run.
pub struct Plan {
    jobs: ChaCha8Rng,
    events: ChaCha8Rng,
    next_job: u32,
    /// The kinds left in this round of events (see [`Plan::next_event`]).
    round: Vec<u8>,
}

/// One round of events, shuffled: two worker kills, a drain, a rolling restart.
const ROUND: [u8; 4] = [0, 0, 1, 2];

impl Plan {
    pub fn new(seed: u64) -> Plan {
        Plan {
            // Two streams, so how many jobs the run's timing lets start does not
            // change which events come.
            jobs: ChaCha8Rng::seed_from_u64(seed),
            events: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_11fe_c7c1_e000),
            next_job: 0,
            round: Vec::new(),
        }
    }

    /// The next job: its number in the run and what it reads.
    pub fn next_job(&mut self) -> (u32, JobSpec) {
        let r = &mut self.jobs;
        let job = self.next_job;
        self.next_job += 1;
        let long = r.gen_bool(0.3);
        let n = by_build(if long { r.gen_range(LONG) } else { r.gen_range(SHORT) });
        // Exactly-once reads DYNAMIC, named, one reader (it checkpoints and is
        // restored); the rest mix modes, names and readers.
        let exactly_once = r.gen_bool(0.25);
        let dynamic = exactly_once || r.gen_bool(0.6);
        let named = exactly_once || r.gen_bool(0.6);
        let pipeline = match r.gen_range(0..3) {
            0 => Pipeline::Range { n },
            1 => Pipeline::Add { n, add: r.gen_range(1..=1_000_000) },
            _ => Pipeline::Batch { n, size: r.gen_range(2..=16) },
        };
        let readers = if named && !exactly_once { r.gen_range(1..=2) } else { 1 };
        let checkpoint_after =
            (exactly_once && r.gen_bool(0.7)).then(|| r.gen_range(n / 5..=n / 2));
        let spec = JobSpec {
            name: named.then(|| format!("lifecycle-{job}")),
            mode: if dynamic { "dynamic" } else { "off" }.to_string(),
            exactly_once,
            pipeline,
            readers,
            accept_loss: !exactly_once && r.gen_bool(0.5),
            checkpoint_after,
        };
        (job, spec)
    }

    /// The pause before the next job starts (jobs start while fewer than the
    /// run's bound are running).
    pub fn job_gap(&mut self) -> Duration {
        Duration::from_millis(self.jobs.gen_range(0..=1_500))
    }

    /// The pause before the next event, and the event. Events come in rounds of
    /// four in a seeded order, so every kind comes within the first four events
    /// of every seed (a one-minute run has about eight).
    pub fn next_event(&mut self) -> (Duration, Action) {
        let r = &mut self.events;
        if self.round.is_empty() {
            self.round = ROUND.to_vec();
            self.round.shuffle(r);
        }
        let gap = Duration::from_millis(r.gen_range(3_000..=8_000));
        let action = match self.round.pop().expect("refilled above") {
            0 => Action::KillWorker {
                pick: r.gen(),
                replace_after: Duration::from_millis(r.gen_range(500..=4_000)),
            },
            1 => Action::DrainWorker { pick: r.gen() },
            _ => Action::RollingRestart,
        };
        (gap, action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_jobs_and_events_and_the_streams_mix_every_kind() {
        let draw = |seed| {
            let mut p = Plan::new(seed);
            let jobs: Vec<_> = (0..200).map(|_| p.next_job()).collect();
            let events: Vec<_> = (0..50).map(|_| p.next_event()).collect();
            (jobs, events)
        };
        let (jobs, events) = draw(7);
        assert_eq!((jobs.clone(), events.clone()), draw(7));
        assert_ne!(jobs, draw(8).0);
        let has = |f: &dyn Fn(&JobSpec) -> bool| jobs.iter().any(|(_, s)| f(s));
        assert!(has(&|s| s.exactly_once && s.checkpoint_after.is_some()));
        assert!(has(&|s| s.mode == "off" && s.name.is_none()));
        assert!(has(&|s| s.mode == "dynamic" && s.readers == 2));
        assert!(has(&|s| matches!(s.pipeline, Pipeline::Batch { .. }) && s.accept_loss));
        assert!(jobs
            .iter()
            .all(|(_, s)| !s.exactly_once || (s.mode == "dynamic" && s.readers == 1)));
        for kind in 0..3 {
            assert!(events[..4].iter().any(|(_, a)| kind
                == match a {
                    Action::KillWorker { .. } => 0,
                    Action::DrainWorker { .. } => 1,
                    Action::RollingRestart => 2,
                }));
        }
    }
}
