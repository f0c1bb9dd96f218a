//! The standard gRPC health service (`grpc.health.v1`) on the client port, for
//! orchestrators' probes: SERVING while this node knows a leader and has applied
//! its whole log (so its answers are current), NOT_SERVING otherwise (an election,
//! a node catching up after a restart, a node cut off from the quorum).
//!
//! Why from Raft's metrics: they are the one place that knows both; a task follows
//! their watch channel and sets the status on every change, so a probe reads a
//! stored status and never waits on Raft. Answered without a token
//! (`sluice_security::HEALTH_PATH`): probes send none.

use std::sync::Arc;

use sluice_proto::v1::dispatcher_server::DispatcherServer;
use tokio::task::JoinHandle;
use tonic::server::NamedService;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::core::Core;
use crate::service::DispatcherService;

/// Whether a node with these metrics serves: a leader is known and everything in
/// its log is applied.
pub fn serving(leader: Option<u64>, last_log: Option<u64>, applied: Option<u64>) -> bool {
    leader.is_some() && applied.is_some() && applied >= last_log
}

/// Follows the node's Raft metrics, setting the overall status (`""`) and the
/// Dispatcher service's, until Raft stops (then NOT_SERVING).
pub(crate) fn spawn(core: Arc<Core>, reporter: HealthReporter) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut metrics = core.raft().metrics();
        let mut last = None;
        loop {
            let now = {
                let m = metrics.borrow_and_update();
                m.running_state.is_ok()
                    && serving(m.current_leader, m.last_log_index, m.last_applied.map(|l| l.index))
            };
            if last != Some(now) {
                set(&reporter, now).await;
                tracing::info!(serving = now, "health");
                last = Some(now);
            }
            if metrics.changed().await.is_err() {
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
    use super::serving;

    #[test]
    fn serving_needs_a_leader_and_the_whole_log_applied() {
        assert!(serving(Some(1), Some(7), Some(7)));
        assert!(!serving(None, Some(7), Some(7)), "no leader known");
        assert!(!serving(Some(1), Some(7), Some(6)), "still applying");
        assert!(!serving(Some(1), None, None), "nothing applied yet");
    }
}
