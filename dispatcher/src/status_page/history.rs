//! The status page's throughput history: every `interval`, the sampler task reads
//! each job's progress counter from this node's replica (source elements handed
//! out in DYNAMIC splits, over all its iterations) into a bounded ring, and
//! publishes the ring on a `watch` channel for the page to read.
//!
//! ```text
//!  sampler task (sole owner of the ring) ──every interval──► Core::read_local(progress_of)
//!        │ push, drop the oldest past `capacity`
//!        └──watch::Sender<Arc<History>>──► StatusPage (readers; never block the sampler)
//! ```
//!
//! Soft state of this node, never replicated: a restarted dispatcher (or a new
//! leader) starts an empty history, and the chart fills again within a few
//! intervals. Bounded: `capacity` samples of at most [`MAX_JOBS_PER_SAMPLE`] jobs
//! (the newest job ids: the ones being read).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::core::Core;
use crate::state::{JobId, State};

/// Jobs kept per sample (the newest ids).
pub const MAX_JOBS_PER_SAMPLE: usize = 32;

/// One reading of every job's counter.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: Instant,
    /// Source elements handed out per job, so far.
    pub elements: BTreeMap<JobId, u64>,
}

impl Sample {
    /// Each job's counter in `s`, now.
    pub fn of(s: &State, at: Instant) -> Sample {
        let mut elements = BTreeMap::new();
        for job_id in s.jobs.keys().rev().take(MAX_JOBS_PER_SAMPLE) {
            elements.insert(*job_id, 0u64);
        }
        for it in s.iterations.values() {
            if let Some(total) = elements.get_mut(&it.job_id) {
                let (_, handed_out) =
                    it.handed_out(s.source_cardinality_of(it.job_id).unwrap_or(0));
                *total = total.saturating_add(handed_out);
            }
        }
        Sample { at, elements }
    }
}

/// A job's throughput: (seconds before `now`, elements per second) per interval,
/// oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub job_id: JobId,
    pub points: Vec<(f64, f64)>,
}

/// The ring of samples, oldest first.
#[derive(Clone, Debug)]
pub struct History {
    capacity: usize,
    samples: VecDeque<Sample>,
}

impl History {
    pub fn new(capacity: usize) -> History {
        History { capacity: capacity.max(2), samples: VecDeque::new() }
    }

    pub fn push(&mut self, sample: Sample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// How far back the oldest sample is from `now`.
    pub fn span(&self, now: Instant) -> Duration {
        self.samples.front().map_or(Duration::ZERO, |s| now.saturating_duration_since(s.at))
    }

    /// Each job's throughput between consecutive samples, with `live` (a reading
    /// taken now) as the last. A job absent from the earlier sample of a pair
    /// started between them (from 0); a counter that went down (its iteration
    /// forgotten) counts as 0 for that interval, not as negative throughput.
    pub fn series(&self, live: &Sample) -> Vec<Series> {
        let mut out: BTreeMap<JobId, Vec<(f64, f64)>> = BTreeMap::new();
        let all: Vec<&Sample> = self.samples.iter().chain(std::iter::once(live)).collect();
        for pair in all.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let secs = b.at.saturating_duration_since(a.at).as_secs_f64();
            if secs < 0.001 {
                continue;
            }
            let ago = live.at.saturating_duration_since(b.at).as_secs_f64();
            for (job, now) in &b.elements {
                let before = a.elements.get(job).copied().unwrap_or(0);
                let rate = now.saturating_sub(before) as f64 / secs;
                out.entry(*job).or_default().push((ago, rate));
            }
        }
        out.into_iter().map(|(job_id, points)| Series { job_id, points }).collect()
    }
}

/// Starts the sampler: a first sample at once, then one every `interval`, into a
/// ring of `capacity`. Stops when the returned handle is aborted or every
/// receiver is dropped.
pub fn spawn_sampler(
    core: Arc<Core>,
    interval: Duration,
    capacity: usize,
) -> (JoinHandle<()>, watch::Receiver<Arc<History>>) {
    let (tx, rx) = watch::channel(Arc::new(History::new(capacity)));
    let task = tokio::spawn(async move {
        let mut history = History::new(capacity);
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            history.push(core.read_local(|s| Sample::of(s, Instant::now())));
            if tx.send(Arc::new(history.clone())).is_err() {
                return;
            }
        }
    });
    (task, rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, jobs: &[(JobId, u64)]) -> Sample {
        Sample { at, elements: jobs.iter().copied().collect() }
    }

    #[test]
    fn the_ring_keeps_the_newest_samples_and_rates_are_deltas_over_time() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut h = History::new(3);
        for (i, n) in [0u64, 50, 100, 200].into_iter().enumerate() {
            h.push(sample(at(5 * i as u64), &[(1, n)]));
        }
        assert_eq!(h.len(), 3, "bounded: the oldest sample is dropped");
        assert_eq!(h.span(at(15)), Duration::from_secs(10));
        let live = sample(at(20), &[(1, 150), (2, 40)]);
        let series = h.series(&live);
        assert_eq!(series.len(), 2);
        // 50→100, 100→200 over 5 s, then a counter that went down (0, not negative).
        assert_eq!(
            series[0],
            Series { job_id: 1, points: vec![(10.0, 10.0), (5.0, 20.0), (0.0, 0.0)] }
        );
        // Job 2 started after the last sample: counted from 0.
        assert_eq!(series[1], Series { job_id: 2, points: vec![(0.0, 8.0)] });
    }
}
