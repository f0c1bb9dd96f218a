//! The standard gRPC health service (`grpc.health.v1`) on the client port, for
//! orchestrators' probes: SERVING while this node knows a leader and has applied
//! its whole log (so its answers are current), NOT_SERVING otherwise (an election,
//! a node catching up after a restart, a node cut off from the quorum).
//!
//! A node that knows a leader and lags its log only briefly stays SERVING: a busy
//! node nearly always has an entry appended and not yet applied, and judged at
//! each change its status flipped many times a second under load (at 2,000
//! workers + 2,000 consumers, ~20,000 flips a run on three nodes), so a readiness
//! probe saw NOT_SERVING at random. It turns NOT_SERVING once it has lagged
//! without a break for [`APPLY_GRACE`] (a node catching up), or at once when it
//! knows no leader. A node that starts lagging (after a restart) is NOT_SERVING
//! until it has applied its whole log.
//!
//! Why from Raft's metrics: they are the one place that knows both; a task follows
//! their watch channel and sets the status on every change, so a probe reads a
//! stored status and never waits on Raft. Answered without a token
//! (`sluice_security::HEALTH_PATH`): probes send none.

use std::sync::Arc;
use std::time::Duration;

use sluice_proto::v1::dispatcher_server::DispatcherServer;
use tokio::task::JoinHandle;
use tonic::server::NamedService;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::core::Core;
use crate::service::DispatcherService;

/// How long a serving node with a leader may lag its own log without a break
/// before it reports NOT_SERVING (module docs).
pub const APPLY_GRACE: Duration = Duration::from_secs(2);

/// Whether a node with these metrics has caught up: a leader is known and
/// everything in its log is applied.
pub fn serving(leader: Option<u64>, last_log: Option<u64>, applied: Option<u64>) -> bool {
    leader.is_some() && applied.is_some() && applied >= last_log
}

/// The status to report: `caught_up` now, or still serving through a lag of
/// `lagged_for` shorter than [`APPLY_GRACE`] while a leader is known.
pub fn decide(
    was_serving: bool,
    leader_known: bool,
    caught_up: bool,
    lagged_for: Duration,
) -> bool {
    caught_up || (was_serving && leader_known && lagged_for < APPLY_GRACE)
}

/// Follows the node's Raft metrics, setting the overall status (`""`) and the
/// Dispatcher service's, until Raft stops (then NOT_SERVING).
pub(crate) fn spawn(core: Arc<Core>, reporter: HealthReporter) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut metrics = core.raft().metrics();
        let mut last = None;
        // Since when the node has lagged its log without a break.
        let mut lagging_since: Option<tokio::time::Instant> = None;
        loop {
            let (leader_known, caught_up) = {
                let m = metrics.borrow_and_update();
                let running = m.running_state.is_ok();
                let applied = m.last_applied.map(|l| l.index);
                let caught_up = serving(m.current_leader, m.last_log_index, applied);
                (running && m.current_leader.is_some(), running && caught_up)
            };
            lagging_since = if caught_up {
                None
            } else {
                lagging_since.or_else(|| Some(tokio::time::Instant::now()))
            };
            let lagged_for = lagging_since.map_or(Duration::ZERO, |since| since.elapsed());
            let serving_now = decide(last == Some(true), leader_known, caught_up, lagged_for);
            if last != Some(serving_now) {
                set(&reporter, serving_now).await;
                tracing::info!(serving = serving_now, "health");
                last = Some(serving_now);
            }
            // Serving through a lag: look again when the grace ends.
            let grace_end = lagging_since.filter(|_| serving_now).map(|s| s + APPLY_GRACE);
            let changed = match grace_end {
                Some(end) => tokio::select! {
                    changed = metrics.changed() => changed,
                    () = tokio::time::sleep_until(end) => Ok(()),
                },
                None => metrics.changed().await,
            };
            if changed.is_err() {
                set(&reporter, false).await;
                return;
            }
        }
    })
}

pub(crate) async fn set(reporter: &HealthReporter, serving: bool) {
    let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
    reporter.set_service_status("", status).await;
    let name = <DispatcherServer<DispatcherService> as NamedService>::NAME;
    reporter.set_service_status(name, status).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{decide, serving, APPLY_GRACE};

    #[test]
    fn serving_needs_a_leader_and_the_whole_log_applied() {
        assert!(serving(Some(1), Some(7), Some(7)));
        assert!(!serving(None, Some(7), Some(7)), "no leader known");
        assert!(!serving(Some(1), Some(7), Some(6)), "still applying");
        assert!(!serving(Some(1), None, None), "nothing applied yet");
    }

    #[test]
    fn a_serving_node_stays_serving_through_a_short_lag_but_not_a_long_one_or_without_leader() {
        let short = APPLY_GRACE / 4;
        assert!(decide(true, true, false, short), "an entry in flight on a busy node");
        assert!(!decide(true, true, false, APPLY_GRACE), "lagging without a break: catching up");
        assert!(!decide(true, false, false, short), "no leader: at once");
        assert!(!decide(false, true, false, short), "a node that starts behind waits to catch up");
        assert!(decide(false, true, true, Duration::ZERO));
    }
}
