//! Liveness and garbage collection: the leader's timers, which turn silence into
//! replicated commands.
//!
//! ```text
//!  WorkerHeartbeat / RegisterWorker ──worker_seen──┐
//!  ClientHeartbeat / GetOrCreateIteration ─client_seen─┤   Timers (soft state, this node only)
//!                                                  ▼
//!  every check interval, on the leader:  read_leader(view) ─► late? ─► propose
//!     WorkerLost { address, worker_uid }   worker silent  > worker_timeout
//!     ReleaseClient { client_id }          consumer silent > client_timeout
//!     GcIteration { iteration_id }         no consumer    > job_gc_timeout
//!     ForgetIteration { iteration_id }     done, no consumer > finished_job_ttl
//!     ForgetDataset { dataset_id, uses }   no job, same use count > unused_dataset_ttl
//! ```
//!
//! Soft state, by design: the instants live only in the leader's memory and are
//! never replicated. Every timer counts from the later of the last sighting and
//! the start of the current *leading epoch*; an epoch starts when this node
//! becomes leader (a new term) and again whenever it failed to confirm its
//! leadership with a quorum (`read_leader` failed). So a failover, or an outage of
//! the dispatcher quorum, never makes anybody look silent: heartbeats that could
//! not reach a serving leader do not count against their sender. On followers the
//! timers do nothing.
//!
//! Every proposal is a fact `apply` re-checks (`apply/liveness.rs`), so a late,
//! repeated or overtaken proposal is harmless. Each tick proposes at most
//! [`MAX_PROPOSALS_PER_TICK`] commands, one after the other.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::command::{Command, Response};
use crate::config::DispatcherConfig;
use crate::core::Core;
use crate::state::{ClientId, DatasetId, IterationId, Mode, State};

/// Bound on the commands one tick proposes; the rest wait for the next tick.
pub const MAX_PROPOSALS_PER_TICK: usize = 64;

/// The timers. A std `Mutex`: every section is a few map operations, no `.await`.
#[derive(Default)]
pub(crate) struct Liveness {
    timers: Mutex<Timers>,
}

#[derive(Default)]
struct Timers {
    /// The term this node leads in with a confirmed quorum, and since when.
    epoch: Option<(u64, Instant)>,
    /// Last heartbeat (or registration) per worker address, with the uid it came from.
    workers: HashMap<String, (u64, Instant)>,
    clients: HashMap<ClientId, Instant>,
    /// Since when each live, GC-eligible iteration has had no consumer.
    idle: HashMap<IterationId, Instant>,
    /// Since when each finished or collected iteration has had no consumer.
    done: HashMap<IterationId, Instant>,
    /// Since when each dataset has had no job over it, at its use count (a new
    /// count is a new key: the timer starts again).
    unused: HashMap<(DatasetId, u64), Instant>,
}

/// What one tick needs from the state, read on the leader.
struct View {
    workers: Vec<(String, u64)>,
    clients: Vec<ClientId>,
    idle: Vec<IterationId>,
    done: Vec<IterationId>,
    unused: Vec<(DatasetId, u64)>,
}

impl View {
    fn of(s: &State, gc_dynamic: bool) -> View {
        View {
            workers: s
                .workers
                .values()
                .filter(|w| !w.lost)
                .map(|w| (w.address.clone(), w.worker_uid))
                .collect(),
            clients: s.clients.keys().copied().collect(),
            idle: s
                .iterations
                .values()
                .filter(|it| it.is_live() && it.clients.is_empty())
                .filter(|it| {
                    gc_dynamic || s.jobs.get(&it.job_id).is_none_or(|j| j.mode != Mode::Dynamic)
                })
                .map(|it| it.id)
                .collect(),
            done: s
                .iterations
                .values()
                .filter(|it| !it.is_live() && it.clients.is_empty())
                .map(|it| it.id)
                .collect(),
            unused: {
                let used: HashSet<&DatasetId> = s.jobs.values().map(|j| &j.dataset_id).collect();
                s.datasets
                    .keys()
                    .filter(|id| !used.contains(id))
                    .map(|id| (id.clone(), s.owners.dataset_uses(id)))
                    .collect()
            },
        }
    }
}

/// The keys of `now_in` (those in some condition now) that have been in it too
/// long by `late`, counting from when `since` first saw each; `since` forgets
/// the keys no longer in it.
fn overdue<K: Clone + Eq + Hash>(
    since: &mut HashMap<K, Instant>,
    now_in: Vec<K>,
    now: Instant,
    late: impl Fn(Option<Instant>) -> bool,
) -> Vec<K> {
    let current: HashSet<K> = now_in.iter().cloned().collect();
    since.retain(|i, _| current.contains(i));
    now_in.into_iter().filter(|i| late(Some(*since.entry(i.clone()).or_insert(now)))).collect()
}

impl Liveness {
    fn timers(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn worker_seen(&self, address: &str, worker_uid: u64) {
        self.timers().workers.insert(address.to_string(), (worker_uid, Instant::now()));
    }

    pub(crate) fn client_seen(&self, client_id: ClientId) {
        self.timers().clients.insert(client_id, Instant::now());
    }

    /// Last heartbeat per worker address, for `GetStatus`.
    pub(crate) fn heartbeats(&self) -> HashMap<String, Instant> {
        self.timers().workers.iter().map(|(a, (_, t))| (a.clone(), *t)).collect()
    }

    /// Voids every timer: the next leading epoch starts them afresh.
    fn stop_leading(&self) {
        let mut t = self.timers();
        t.epoch = None;
        t.idle.clear();
        t.done.clear();
        t.unused.clear();
    }

    /// The commands due now, given the state's view. Starts a leading epoch if
    /// none runs in `term`.
    fn due(&self, config: &DispatcherConfig, term: u64, view: View, now: Instant) -> Vec<Command> {
        let mut t = self.timers();
        let epoch = match t.epoch {
            Some((e_term, since)) if e_term == term => since,
            _ => {
                t.epoch = Some((term, now));
                t.idle.clear();
                t.done.clear();
                t.unused.clear();
                now
            }
        };
        let late = |since: Option<Instant>, timeout: Duration| {
            !timeout.is_zero() && now.duration_since(since.unwrap_or(epoch).max(epoch)) > timeout
        };
        let mut due = vec![];
        for (address, uid) in view.workers {
            let seen = t.workers.get(&address).filter(|(u, _)| *u == uid).map(|(_, at)| *at);
            if late(seen, config.worker_timeout) {
                due.push(Command::WorkerLost { address, worker_uid: uid });
            }
        }
        let known: HashSet<ClientId> = view.clients.iter().copied().collect();
        t.clients.retain(|c, _| known.contains(c));
        for client_id in view.clients {
            if late(t.clients.get(&client_id).copied(), config.client_timeout) {
                due.push(Command::ReleaseClient { client_id });
            }
        }
        let idle = overdue(&mut t.idle, view.idle, now, |since| late(since, config.job_gc_timeout));
        due.extend(idle.into_iter().map(|iteration_id| Command::GcIteration { iteration_id }));
        let done = overdue(&mut t.done, view.done, now, |s| late(s, config.finished_job_ttl));
        due.extend(done.into_iter().map(|iteration_id| Command::ForgetIteration { iteration_id }));
        let unused =
            overdue(&mut t.unused, view.unused, now, |s| late(s, config.unused_dataset_ttl));
        due.extend(
            unused
                .into_iter()
                .map(|(dataset_id, uses)| Command::ForgetDataset { dataset_id, uses }),
        );
        due.truncate(MAX_PROPOSALS_PER_TICK);
        due
    }

    /// One check: on the leader, proposes what is due. Followers only void their
    /// timers.
    async fn tick(&self, core: &Core, config: &DispatcherConfig) {
        if !core.is_leader() {
            self.stop_leading();
            return;
        }
        let gc_dynamic = config.gc_dynamic_jobs;
        let view = match core.read_leader(|s| View::of(s, gc_dynamic)).await {
            Ok(view) => view,
            Err(e) => {
                tracing::debug!(error = ?e, "liveness: leadership not confirmed; timers restart");
                self.stop_leading();
                return;
            }
        };
        let term = core.raft().metrics().borrow().current_term;
        for cmd in self.due(config, term, view, Instant::now()) {
            let what = format!("{cmd:?}");
            match core.propose(cmd).await {
                Ok(Response::WorkerLost { changed: true }) => {
                    tracing::warn!(command = %what, "worker lost: no heartbeat within the worker timeout; its unfinished tasks are ended")
                }
                Ok(Response::IterationCollected { changed: true }) => {
                    tracing::info!(command = %what, "iteration garbage-collected")
                }
                Ok(Response::IterationForgotten { changed: true, job_forgotten }) => {
                    tracing::info!(command = %what, job_forgotten, "finished iteration forgotten after the finished-job TTL")
                }
                Ok(Response::DatasetForgotten { changed: true }) => {
                    tracing::info!(command = %what, "unused dataset forgotten after the unused-dataset TTL")
                }
                Ok(Response::ClientReleased) => {
                    tracing::info!(command = %what, "consumer released: no heartbeat within the client timeout")
                }
                Ok(_) => {}
                // Already released (e.g. by the consumer itself): nothing to do.
                Err(crate::error::ProposeError::Rejected(e)) => {
                    tracing::debug!(command = %what, error = %e, "liveness proposal refused")
                }
                Err(e) => {
                    tracing::debug!(command = %what, error = ?e, "liveness proposal failed; next tick");
                    self.stop_leading();
                    return;
                }
            }
        }
    }

    /// Runs the checks every `config.liveness_check_interval()` until aborted.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        core: Arc<Core>,
        config: DispatcherConfig,
    ) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(config.liveness_check_interval());
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                this.tick(&core, &config).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DispatcherConfig {
        DispatcherConfig {
            worker_timeout: Duration::from_secs(1),
            client_timeout: Duration::from_secs(2),
            job_gc_timeout: Duration::from_secs(3),
            finished_job_ttl: Duration::from_secs(5),
            unused_dataset_ttl: Duration::from_secs(7),
            ..DispatcherConfig::default()
        }
    }

    fn view() -> View {
        View {
            workers: vec![("w:1".into(), 7)],
            clients: vec![3000],
            idle: vec![2000],
            done: vec![2001],
            unused: vec![("d".into(), 0)],
        }
    }

    fn names(cmds: &[Command]) -> Vec<&'static str> {
        cmds.iter().map(Command::name).collect()
    }

    #[test]
    fn a_new_leading_epoch_starts_every_timer_afresh_whatever_was_seen_before() {
        let l = Liveness::default();
        let t0 = Instant::now();
        // Sightings from long ago (e.g. from an earlier term of this node).
        l.timers().workers.insert("w:1".into(), (7, t0));
        l.timers().clients.insert(3000, t0);
        let now = t0 + Duration::from_secs(60);
        assert!(l.due(&config(), 2, view(), now).is_empty(), "a new leader declares nobody late");
        let later = now + Duration::from_millis(1500);
        assert_eq!(names(&l.due(&config(), 2, view(), later)), ["WorkerLost"]);
        // Another term (a failover and back): afresh again.
        assert!(l.due(&config(), 3, view(), later).is_empty());
        // A failed leadership check voids the epoch too.
        l.stop_leading();
        let much_later = later + Duration::from_secs(10);
        assert!(l.due(&config(), 3, view(), much_later).is_empty());
        let all = l.due(&config(), 3, view(), much_later + Duration::from_secs(4));
        assert_eq!(names(&all), ["WorkerLost", "ReleaseClient", "GcIteration"]);
        let all = l.due(&config(), 3, view(), much_later + Duration::from_secs(6));
        assert_eq!(names(&all), ["WorkerLost", "ReleaseClient", "GcIteration", "ForgetIteration"]);
        let all = l.due(&config(), 3, view(), much_later + Duration::from_secs(8));
        assert_eq!(names(&all)[4..], ["ForgetDataset"]);
    }

    #[test]
    fn a_dataset_used_again_starts_its_timer_afresh() {
        let l = Liveness::default();
        let t0 = Instant::now();
        let unused = |uses: u64| View { unused: vec![("d".into(), uses)], ..view() };
        let forgets = |cmds: Vec<Command>| {
            cmds.into_iter()
                .filter_map(|c| match c {
                    Command::ForgetDataset { dataset_id, uses } => Some((dataset_id, uses)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        assert!(forgets(l.due(&config(), 1, unused(0), t0)).is_empty());
        // Registered again at 6 s: its count moved, so 8 s is 2 s of disuse.
        assert!(forgets(l.due(&config(), 1, unused(1), t0 + Duration::from_secs(6))).is_empty());
        assert!(forgets(l.due(&config(), 1, unused(1), t0 + Duration::from_secs(8))).is_empty());
        let due = forgets(l.due(&config(), 1, unused(1), t0 + Duration::from_secs(14)));
        assert_eq!(due, [("d".to_string(), 1)], "7 s after its last use, at that count");
    }

    #[test]
    fn a_heartbeat_resets_its_timer_and_only_for_the_uid_it_came_from() {
        let l = Liveness::default();
        let t0 = Instant::now();
        assert!(l.due(&config(), 1, view(), t0).is_empty());
        l.timers().workers.insert("w:1".into(), (7, t0 + Duration::from_secs(5)));
        let due = l.due(&config(), 1, view(), t0 + Duration::from_millis(5500));
        assert!(!names(&due).contains(&"WorkerLost"), "seen 0.5 s ago");
        // A sighting of another process at that address does not count for uid 7.
        l.timers().workers.insert("w:1".into(), (8, t0 + Duration::from_secs(6)));
        let due = l.due(&config(), 1, view(), t0 + Duration::from_millis(6500));
        assert!(names(&due).contains(&"WorkerLost"));
    }

    #[test]
    fn zero_disables_a_timer() {
        let l = Liveness::default();
        let t0 = Instant::now();
        let off = DispatcherConfig {
            worker_timeout: Duration::ZERO,
            client_timeout: Duration::ZERO,
            job_gc_timeout: Duration::ZERO,
            finished_job_ttl: Duration::ZERO,
            unused_dataset_ttl: Duration::ZERO,
            ..DispatcherConfig::default()
        };
        assert!(l.due(&off, 1, view(), t0).is_empty());
        assert!(l.due(&off, 1, view(), t0 + Duration::from_secs(3600)).is_empty());
        assert_eq!(off.liveness_check_interval(), Duration::from_secs(1));
        assert_eq!(config().liveness_check_interval(), Duration::from_millis(250));
    }
}
