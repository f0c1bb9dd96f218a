//! `repeat(count)`: runs its upstream stages `count` times (forever for `None`).
//!
//! Each epoch builds a fresh instance of the upstream stages from the plan, as
//! tf.data re-creates its input iterator. In split mode the shared split provider
//! is reset before every restart (not before the first epoch), which moves the
//! worker to the next repetition of the dispatcher's splits.
//!
//! An epoch that yields nothing stops the repeat when every later epoch would be
//! empty too (see `Plan::stop_on_empty_epoch`): `range(0).repeat()` ends instead
//! of spinning.

use std::sync::Arc;

use crate::error::DatasetError;
use crate::tensor::Element;

use super::plan::Plan;
use super::stream::ElementIter;

pub(super) struct Repeat {
    plan: Arc<Plan>,
    /// The upstream is `plan.stages[..upstream_end]`.
    upstream_end: usize,
    count: Option<u64>,
    epoch: u64,
    current: Option<ElementIter>,
    yielded_this_epoch: bool,
    done: bool,
}

impl Repeat {
    pub(super) fn new(plan: Arc<Plan>, upstream_end: usize, count: Option<u64>) -> Self {
        Repeat {
            plan,
            upstream_end,
            count,
            epoch: 0,
            current: None,
            yielded_this_epoch: false,
            done: false,
        }
    }

    /// Starts the current epoch's upstream, resetting the splits after epoch 0.
    fn start_epoch(&mut self) -> Result<(), DatasetError> {
        if self.epoch > 0 {
            tracing::debug!(epoch = self.epoch, "repeat: restarting the input");
            self.plan.reset_splits()?;
        }
        self.current = Some(self.plan.build(self.upstream_end));
        self.yielded_this_epoch = false;
        Ok(())
    }
}

impl Iterator for Repeat {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done || self.count.is_some_and(|c| self.epoch >= c) {
                self.done = true;
                return None;
            }
            if self.current.is_none() {
                if let Err(e) = self.start_epoch() {
                    self.done = true;
                    return Some(Err(e));
                }
            }
            let current = self.current.as_mut()?;
            match current.next() {
                Some(item) => {
                    self.yielded_this_epoch = true;
                    return Some(item);
                }
                None => {
                    // Drop the finished upstream before building the next one.
                    self.current = None;
                    self.epoch += 1;
                    if !self.yielded_this_epoch && self.plan.stop_on_empty_epoch() {
                        self.done = true;
                    }
                }
            }
        }
    }
}
