//! An exactly-once message's positions, as a task reader receives them.

use sluice_positions::wire::{split_positions, ElementOrigins};
use sluice_proto::v1 as pb;

use super::consumption::Consumption;
use crate::error::ClientError;

/// The origins of a message's `elements` elements, once the message's own
/// origin (records dropped after its last element, unit ends) is recorded as
/// consumed: it counts on receipt. `Ok(None)`: the task was lost, drop the
/// message. Columns that do not match the elements fail the read: the counts
/// are the worker's word and are checked, never trusted.
pub(crate) fn take_origins(
    positions: Option<pb::Positions>,
    elements: usize,
    task_id: u64,
    consumption: &Consumption,
    worker: &str,
) -> Result<Option<ElementOrigins>, ClientError> {
    let protocol = |message: String| ClientError::Protocol { address: worker.to_string(), message };
    let Some(positions) = positions else {
        if elements > 0 {
            return Err(protocol(format!(
                "task {task_id} sent {elements} elements without their positions in an \
                 exactly-once read; the worker predates exactly-once delivery: run workers of \
                 the dispatcher's version"
            )));
        }
        return Ok((!consumption.is_lost(task_id)).then(ElementOrigins::default));
    };
    let (per_element, own) = split_positions(&positions, elements).map_err(|e| {
        protocol(format!("task {task_id} sent positions that do not match its elements: {e}"))
    })?;
    Ok(consumption.consume(task_id, &own).then_some(per_element))
}

#[cfg(test)]
mod tests {
    use sluice_positions::wire::join_positions;
    use sluice_positions::{Origin, Run};

    use super::*;

    fn consumption() -> Consumption {
        Consumption::new("j".into(), "d".into(), 0, None)
    }

    #[test]
    fn the_message_origin_counts_at_receipt_and_element_origins_wait() {
        let c = consumption();
        let dropped = Origin { runs: vec![Run::record(9, 0)], unit_ends: vec![(3, 2)] };
        let p = join_positions([Origin::record(3, 0), Origin::record(3, 1)], dropped);
        let origins = take_origins(Some(p), 2, 1, &c, "w:1").unwrap().expect("not lost");
        assert_eq!((origins.len(), origins.runs_of(0)), (2, &[Run::record(3, 0)][..]));
        assert_eq!(origins.origin(1), Origin::record(3, 1));
        let report = c.take_report().expect("the message's own records");
        assert_eq!(report.consumed.firsts, vec![9, 1], "only the dropped record so far");
        assert!(report.consumed.runs.is_empty());
        assert_eq!(report.consumed.unit_ends, vec![3, 2]);
    }

    #[test]
    fn columns_that_do_not_match_or_are_missing_fail_naming_the_worker() {
        let c = consumption();
        let p = join_positions([Origin::record(3, 0)], Origin::default());
        let e = take_origins(Some(p.clone()), 2, 1, &c, "w:1").unwrap_err();
        assert!(e.to_string().contains("w:1") && e.to_string().contains("do not match"), "{e}");
        let mut lying = p;
        lying.runs_per_element = vec![5, 0];
        assert!(take_origins(Some(lying), 1, 1, &c, "w:1").is_err());
        let e = take_origins(None, 1, 1, &c, "w:1").unwrap_err();
        assert!(e.to_string().contains("without their positions"), "{e}");
        assert_eq!(take_origins(None, 0, 1, &c, "w:1").unwrap(), Some(ElementOrigins::default()));
        assert!(c.take_report().is_none(), "nothing recorded from refused messages");
    }

    #[test]
    fn a_message_of_a_lost_task_is_dropped_unrecorded() {
        let c = consumption();
        c.task_lost(4);
        let p = join_positions([Origin::record(3, 0)], Origin::record(8, 0));
        assert_eq!(take_origins(Some(p), 1, 4, &c, "w:1").unwrap(), None);
        assert_eq!(take_origins(None, 0, 4, &c, "w:1").unwrap(), None);
        let r = c.take_report().unwrap();
        assert!(r.consumed.runs.is_empty() && r.consumed.firsts.is_empty());
        assert_eq!(r.consumed.lost_tasks_done, vec![4]);
    }
}
