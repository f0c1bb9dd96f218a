//! The reporter: sends a [`Consumption`]'s reports to the dispatcher in
//! `ClientHeartbeat` calls of their own (see the module docs of
//! `exactly_once` for why not on the long poll).

use std::sync::Arc;
use std::time::Duration;

use sluice_proto::v1 as pb;
use tokio::time::Instant;
use tracing::debug;

use super::consumption::{Consumption, MAX_REPORT_RUNS};
use crate::dispatcher::DispatcherClient;

/// The least time between the starts of two reports while the application
/// keeps consuming.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(200);

/// [`REPORT_INTERVAL`] of a read in a deterministic order. The dispatcher hands
/// out its splits only within two blocks of 128 places past the consumed
/// watermark (`dispatcher/src/order.rs`), and the watermark moves with reports,
/// so the interval bounds the rate: at most the window's units per interval
/// (~60,000 elements/s with 100-element splits at 200 ms, docs/performance.md).
pub const ORDERED_REPORT_INTERVAL: Duration = Duration::from_millis(50);

/// How often a drained reader says so again (the leader keeps it in memory
/// only; see `ConsumedReport.drained_tasks`).
pub const DRAINED_RESEND_INTERVAL: Duration = Duration::from_secs(1);

/// How long a dropped stream may spend sending what it has not reported yet.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends reports while the stream lives: one as soon as something is pending,
/// then at most one per `interval` ([`REPORT_INTERVAL`], or
/// [`ORDERED_REPORT_INTERVAL`]); a drained reader's state again every
/// [`DRAINED_RESEND_INTERVAL`]. A failed report is sent again (the dispatcher
/// client already retried it up to its deadline).
pub(crate) async fn report_loop(
    dispatcher: DispatcherClient,
    client_id: u64,
    consumption: Arc<Consumption>,
    interval: Duration,
) {
    let mut last_start: Option<Instant> = None;
    loop {
        let quiet = tokio::time::timeout(DRAINED_RESEND_INTERVAL, consumption.wait_pending());
        if quiet.await.is_err() {
            consumption.resend_drained();
            continue;
        }
        if let Some(start) = last_start {
            tokio::time::sleep_until(start + interval).await;
        }
        last_start = Some(Instant::now());
        // A backlog (a full report, or positions taken faster than one per
        // interval: `Consumption::backlog`) goes at once, or the reports, the
        // checkpoint watermark and so the positions' size would fall further
        // behind the longer the read lasts.
        let sent = send_one(&dispatcher, client_id, &consumption).await;
        if sent == Some(true) || (sent.is_some() && consumption.backlog()) {
            last_start = None;
        }
    }
}

/// Sends one report, if one is pending. `None`: it failed; `Some(full)`: it
/// was answered (or nothing was pending), and whether it carried as many runs
/// or unit ends as one report may.
async fn send_one(
    dispatcher: &DispatcherClient,
    client_id: u64,
    consumption: &Consumption,
) -> Option<bool> {
    let Some(report) = consumption.take_report() else { return Some(false) };
    let c = &report.consumed;
    let full = c.runs.len() / 3 >= MAX_REPORT_RUNS || c.unit_ends.len() / 2 >= MAX_REPORT_RUNS;
    let req = pb::ClientHeartbeatRequest {
        client_id,
        consumed: Some(report.consumed),
        ..Default::default()
    };
    match dispatcher.client_heartbeat_with(req).await {
        Ok(resp) => {
            consumption.answered(report.seq, &resp);
            Some(full)
        }
        Err(e) => {
            debug!(client_id, error = %e, "a consumption report failed; it will be sent again");
            None
        }
    }
}

/// Sends everything still pending (a stream being dropped or closed), for at
/// most [`FLUSH_TIMEOUT`]; what is left is lost to the dispatcher (not to
/// positions already taken).
pub(crate) async fn flush(
    dispatcher: &DispatcherClient,
    client_id: u64,
    consumption: &Consumption,
) {
    let all = async {
        // Each answered report takes something out; a failed one ends the flush.
        for _ in 0..1024 {
            if consumption.take_report().is_none()
                || send_one(dispatcher, client_id, consumption).await.is_none()
            {
                return;
            }
        }
    };
    if tokio::time::timeout(FLUSH_TIMEOUT, all).await.is_err() {
        debug!(client_id, "the last consumption reports were not answered in time");
    }
}
