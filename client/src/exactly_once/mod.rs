//! The reader's side of exactly-once delivery (docs/exactly-once.md):
//! consumption tracking, reports to the dispatcher, lost-task acknowledgements
//! and positions.
//!
//! ```text
//!  task reader ──message origin (dropped records, unit ends) at receipt──┐
//!  ElementStream ──each element's origin when the application takes it──┤
//!                                                                        ▼
//!                                 Consumption (one mutex): pending reports per
//!                                 generation, own RecordSet, lost tasks, watermark
//!  manager (view) ──task lost──► drop its elements, queue the ack ──────┘   │
//!  reporter ◄──────────── take a report / answered / failed ──────────────┘
//!     └──ClientHeartbeat{consumed}──► dispatcher ──checkpoint watermark──► Consumption
//! ```
//!
//! Why one mutex for everything: an element is consumed, and a lost task
//! acknowledged, atomically with respect to each other. Once the manager has
//! marked a task lost (under the lock), no element of it is handed out, and the
//! report that carries the acknowledgement is taken (under the lock) after
//! every consumption of that task was recorded: what the dispatcher re-reads
//! for the lost task was never delivered here.
//!
//! Why a reporter task of its own rather than riding on the long poll: the long
//! poll may be held by the dispatcher for up to a second, and a consumer
//! should report soon after it consumes (the dispatcher's checkpoint watermark
//! and the re-reading of lost tasks wait for reports). The reporter sends a
//! report as soon as something is pending, and then at most every
//! [`REPORT_INTERVAL`] while the application keeps consuming; it also outlives
//! the manager, so what is consumed after the iteration ended is reported too.
//! A report leaves the pending state only when the dispatcher answered it
//! (applying one twice is harmless).

//!
//! Deterministic order (`reorder`): a reorder buffer between the manager's
//! channel and the stream hands out the consumer's splits in their places'
//! order; popping and consuming are one step under the stream's call.

mod consumption;
mod message;
pub(crate) mod reorder;
mod reporter;

use sluice_proto::v1 as pb;

pub(crate) use consumption::Consumption;
pub use consumption::MAX_REPORT_RUNS;
pub(crate) use message::take_origins;
pub use reporter::ORDERED_REPORT_INTERVAL;
pub use reporter::REPORT_INTERVAL;
pub(crate) use reporter::{flush, report_loop};

/// What delivery a read gets: the dispatcher's answer for its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// An element a worker took but did not deliver is gone when the worker dies.
    AtMostOnce,
    /// No element lost or repeated through worker deaths and restores; the
    /// reader reports its consumption and can take positions.
    ExactlyOnce,
}

impl Delivery {
    /// An unset field (a dispatcher that predates exactly-once) is at most once.
    pub(crate) fn from_wire(d: i32) -> Self {
        if d == pb::Delivery::ExactlyOnce as i32 {
            Delivery::ExactlyOnce
        } else {
            Delivery::AtMostOnce
        }
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Delivery::AtMostOnce => "at_most_once",
            Delivery::ExactlyOnce => "exactly_once",
        })
    }
}
