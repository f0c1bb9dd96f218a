//! What a read lost: the tasks it had not read to their end when the dispatcher
//! ended them because their worker was lost (declared dead, or restarted).
//!
//! Why a module of its own: a read that lost data must not end like a clean,
//! complete epoch. The task readers (`task_readers.rs`) collect the loss; at the
//! end the stream either fails with [`ClientError::DataLost`](crate::ClientError)
//! carrying the [`LossReport`] (the default) or, for a reader that accepted loss
//! (`ReadOptions::accept_data_loss`), ends normally and keeps the report for
//! [`ElementStream::loss_report`](crate::ElementStream::loss_report).

use std::fmt;
use std::sync::{Arc, Mutex};

/// One task whose undelivered elements are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostTask {
    pub task_id: u64,
    /// The worker that was lost.
    pub worker_address: String,
}

/// The tasks a read lost, in the order it learnt of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LossReport {
    pub tasks: Vec<LostTask>,
}

impl LossReport {
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

impl fmt::Display for LossReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tasks: Vec<String> = self
            .tasks
            .iter()
            .map(|t| format!("task {} on worker {}", t.task_id, t.worker_address))
            .collect();
        write!(
            f,
            "{} task(s) ended before their end of sequence because their worker was lost \
             ({}); the elements they had not delivered are gone",
            tasks.len(),
            tasks.join(", ")
        )
    }
}

/// Where a manager leaves the report of a read that accepted loss. A std `Mutex`:
/// set once at the end, read by the stream's owner; no `.await` inside.
pub(crate) type LossSlot = Arc<Mutex<Option<LossReport>>>;
