//! `prefetch(buffer_size)`: runs the upstream on its own thread, up to
//! `buffer_size` elements ahead of the consumer.
//!
//! The thread starts on the first `next()` (as tf.data's does) and feeds a bounded
//! `sync_channel`. It stops when the upstream ends or fails, or when the consumer is
//! gone: dropping this iterator drops the receiver, so the thread's next `send`
//! fails and it exits, dropping the upstream. It is never joined: a thread blocked
//! inside the upstream (e.g. waiting on a split RPC) exits when that call returns.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};

use crate::error::DatasetError;
use crate::tensor::Element;

use super::stream::{lock, ElementIter};

/// The largest channel capacity used: `std`'s bounded channel allocates its slots
/// up front, so a larger `buffer_size` is capped here rather than risking the
/// process on one allocation.
pub const MAX_PREFETCH: usize = 1 << 16;

type Item = Result<Element, DatasetError>;

enum State {
    NotStarted(ElementIter),
    Running(Receiver<Item>),
    /// The thread could not be started: the upstream runs on the caller's thread.
    Inline(ElementIter),
    Done,
}

pub(super) struct Prefetch {
    state: State,
    capacity: usize,
}

impl Prefetch {
    pub(super) fn new(input: ElementIter, buffer_size: u64) -> Self {
        let capacity = usize::try_from(buffer_size).unwrap_or(usize::MAX).clamp(1, MAX_PREFETCH);
        Prefetch { state: State::NotStarted(input), capacity }
    }

    fn start(&self, input: ElementIter) -> State {
        let (tx, rx) = sync_channel::<Item>(self.capacity);
        // The upstream goes through a slot so that it can be taken back if the
        // thread cannot be spawned.
        let slot = Arc::new(Mutex::new(Some(input)));
        let thread_slot = slot.clone();
        let spawned = std::thread::Builder::new().name("sluice-prefetch".into()).spawn(move || {
            let Some(mut input) = lock(&thread_slot).take() else {
                return;
            };
            tracing::debug!("prefetch thread started");
            for item in input.by_ref() {
                let failed = item.is_err();
                if tx.send(item).is_err() || failed {
                    break;
                }
            }
            // Release the upstream before the channel closes, so that whoever sees
            // the end also sees the upstream's resources released.
            drop(input);
            tracing::debug!("prefetch thread exiting");
        });
        match spawned {
            Ok(_) => State::Running(rx),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a prefetch thread; prefetching inline");
                match lock(&slot).take() {
                    Some(input) => State::Inline(input),
                    None => State::Running(rx),
                }
            }
        }
    }
}

impl Iterator for Prefetch {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let State::NotStarted(_) = self.state {
            if let State::NotStarted(input) = std::mem::replace(&mut self.state, State::Done) {
                self.state = self.start(input);
            }
        }
        let item = match &mut self.state {
            State::Running(rx) => rx.recv().ok(),
            State::Inline(input) => input.next(),
            State::NotStarted(_) | State::Done => None,
        };
        if item.is_none() {
            self.state = State::Done;
        }
        item
    }
}
