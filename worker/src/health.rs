//! The standard gRPC health service (`grpc.health.v1`) on the worker's port, for
//! orchestrators' probes: SERVING while the worker is registered with the
//! dispatcher and not draining, NOT_SERVING before its first registration, while
//! it re-registers with a dispatcher that forgot it, and from the moment it drains
//! (so a load balancer or a readiness probe takes it out before it stops).
//! Answered without a token (`sluice_security::HEALTH_PATH`): probes send none.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use tonic::server::NamedService;

use crate::route::WorkerRoutes;
use crate::state::Worker;

/// The Worker service's name, as clients dial it.
const WORKER_SERVICE: &str = <WorkerRoutes as NamedService>::NAME;

/// Whether a worker in this state serves.
pub fn serving(registered: bool, draining: bool) -> bool {
    registered && !draining
}

/// Follows the worker's `registered` and `draining` flags, setting the overall
/// status (`""`) and the Worker service's.
pub(crate) fn spawn(worker: Arc<Worker>, reporter: HealthReporter) -> JoinHandle<()> {
    let mut registered = worker.registered.subscribe();
    let mut draining = worker.draining.subscribe();
    tokio::spawn(async move {
        let mut last = None;
        loop {
            let now = serving(*registered.borrow_and_update(), *draining.borrow_and_update());
            if last != Some(now) {
                let status = if now { ServingStatus::Serving } else { ServingStatus::NotServing };
                reporter.set_service_status("", status).await;
                reporter.set_service_status(WORKER_SERVICE, status).await;
                tracing::info!(serving = now, "health");
                last = Some(now);
            }
            tokio::select! {
                r = registered.changed() => if r.is_err() { return },
                r = draining.changed() => if r.is_err() { return },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::serving;

    #[test]
    fn serving_needs_registration_and_no_drain() {
        assert!(serving(true, false));
        assert!(!serving(false, false), "not registered yet");
        assert!(!serving(true, true), "draining");
    }
}
