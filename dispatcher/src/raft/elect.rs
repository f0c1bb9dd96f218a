//! Stands for election as soon as openraft's own rule allows, rather than at its
//! next tick.
//!
//! Why: openraft 0.9 checks a follower's election timer on a tick every 1.5
//! heartbeats (150 ms at the default 100 ms), so a follower whose leader died
//! stood up to 150 ms after its timer ran out; with the 110..220 ms election
//! timeouts that was a third of the failover (issue 33: kill to new leader 366
//! to 793 ms, median 520, against 330 to 440 ms by the timers). This task
//! applies the same rule every [`CHECK`]: a follower that has heard from a
//! leader in this process (`leader_heard`) and has then heard nothing for the
//! lease (`election_timeout_max`) plus a timeout drawn from `min..max` asks
//! openraft to elect (`Trigger::elect`, which a learner or a leader ignores).
//! The voters' lease check is openraft's and unchanged, so a live leader's
//! followers still refuse the vote. A node that has heard no leader since it
//! started (a restart, a new group) is left to openraft, as before.
//!
//! Soft state: the next timeout, drawn again after each election it asked for.

use std::time::Duration;

use rand::Rng;

use super::leader_heard::LeaderHeard;
use super::Raft;

/// How often the timer is checked.
pub(crate) const CHECK: Duration = Duration::from_millis(10);

/// The follower's timer: the lease and the range its timeout is drawn from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timer {
    pub lease: Duration,
    pub min: Duration,
    pub max: Duration,
}

impl Timer {
    fn draw(&self) -> Duration {
        let (min, max) = (self.min.as_millis() as u64, self.max.as_millis() as u64);
        self.lease + Duration::from_millis(rand::thread_rng().gen_range(min..=max.max(min)))
    }
}

/// Whether a follower silent for `silent` (none heard yet: `None`) stands now,
/// its drawn wait being `wait` and its last try `since_try` ago (if any).
pub(crate) fn due(silent: Option<Duration>, since_try: Option<Duration>, wait: Duration) -> bool {
    silent.is_some_and(|s| s >= wait) && since_try.is_none_or(|t| t >= wait)
}

/// Runs until aborted (`Core::shutdown`).
pub(crate) fn spawn(raft: Raft, heard: LeaderHeard, timer: Timer) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut wait = timer.draw();
        let mut tried: Option<std::time::Instant> = None;
        let mut ticks = tokio::time::interval(CHECK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticks.tick().await;
            if !due(heard.silent_for(), tried.map(|t| t.elapsed()), wait) {
                continue;
            }
            let follower = raft.metrics().borrow().state == openraft::ServerState::Follower;
            if !follower {
                continue;
            }
            tracing::info!(silent = ?heard.silent_for(), ?wait, "the leader is silent: standing");
            if raft.trigger().elect().await.is_err() {
                return; // Raft stopped.
            }
            // The next try, if this one wins nothing, after a new wait from now.
            tried = Some(std::time::Instant::now());
            wait = timer.draw();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_stands_only_after_hearing_a_leader_and_then_the_whole_wait() {
        let wait = Duration::from_millis(400);
        assert!(!due(None, None, wait), "never heard a leader: openraft's timer decides");
        assert!(!due(Some(Duration::from_millis(399)), None, wait));
        assert!(due(Some(wait), None, wait));
        // After a try that won nothing, the next one waits again.
        assert!(!due(Some(2 * wait), Some(Duration::from_millis(10)), wait));
        assert!(due(Some(2 * wait), Some(wait), wait));
    }

    #[test]
    fn the_wait_is_the_lease_plus_a_timeout_in_range() {
        let ms = Duration::from_millis;
        let timer = Timer { lease: ms(220), min: ms(110), max: ms(220) };
        for _ in 0..200 {
            let w = timer.draw();
            assert!((ms(330)..=ms(440)).contains(&w), "{w:?}");
        }
    }
}
