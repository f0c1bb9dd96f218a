//! The reorder buffer of a deterministic-order read (docs/exactly-once.md,
//! "Deterministic order"): consumer `i` of `n` hands out the splits of places
//! `i, i + n, i + 2n, …` in that order, each split's elements in the order its
//! task sent them (source order).
//!
//! ```text
//!  manager's channel ──pump (eager)──► Reorder (places → elements) ──pop──► ElementStream
//!                                          ▲ whole(units)?  Consumption
//! ```
//!
//! Why the pump reads eagerly: a worker's pipeline serves every consumer, so a
//! consumer that stopped reading (its trainer waits for another one at a
//! barrier) would hold up the split another consumer waits for. The pump takes
//! whatever arrives; what that costs is bounded by the splits the dispatcher
//! hands out past the consumed watermark (`order::WINDOW_BLOCKS` blocks).
//!
//! When is a split done? Every message names its split (place, whole unit
//! range, counted records or not), and every grant is announced, so the buffer
//! knows each split it must wait for. The head split's buffered elements go out
//! first; once none is buffered, the split is done when every unit of its range
//! is whole among what this reader consumed (its own records, the records the
//! pipeline dropped and unit ends, consumed on receipt, and a restored
//! position's). A task lost mid-split is no problem: its unreleased elements are
//! dropped as they are popped (`Consumption::consume` refuses them), which keeps
//! the split incomplete until the dispatcher grants it again, with the same
//! place and its consumed records skipped. Popping and consuming happen in the
//! same call of the stream, so the head never moves past a split whose elements
//! are in flight.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::Consumption;
use crate::error::ClientError;
use sluice_dataset::Element;
use sluice_positions::Origin;
use sluice_proto::v1 as pb;

/// The most units a split may name (a split's completeness check walks them).
const MAX_SPLIT_UNITS: u64 = 1 << 24;

/// What the pump got: a message (its split, elements, worker, and the
/// manager's drained marker); an error; or the end (`None`).
pub(crate) type Received = Option<Result<Message, ClientError>>;

/// One message of the manager's channel, as the reorder buffer takes it.
pub(crate) struct Message {
    pub split: Option<pb::SplitNotice>,
    pub items: Vec<Item>,
    pub source: Arc<str>,
    /// The manager's drained marker (`Received::drained_tasks`), 0 otherwise.
    pub drained_tasks: u64,
}
/// The next element and its worker, as the stream hands it out.
type Next = Poll<Option<Result<(Arc<str>, Element), ClientError>>>;

/// One element waiting for its turn.
pub(crate) struct Item {
    pub source: Arc<str>,
    pub task_id: u64,
    pub element: Element,
    pub origin: Origin,
}

/// A split's announcement and its buffered elements.
#[derive(Default)]
struct Split {
    notice: Option<pb::SplitNotice>,
    items: VecDeque<Item>,
}

/// The places of one consumer, in order (pure: no I/O, no lock).
pub(crate) struct Reorder {
    consumer: u64,
    consumers: u64,
    /// The next place to hand out (≡ consumer mod consumers).
    head: u64,
    splits: BTreeMap<u64, Split>,
}

impl Reorder {
    pub(crate) fn new(consumer: u32, consumers: u32) -> Self {
        let consumers = u64::from(consumers.max(1));
        let consumer = u64::from(consumer) % consumers;
        Reorder { consumer, consumers, head: consumer, splits: BTreeMap::new() }
    }

    /// The next place of this consumer at or after `place`.
    fn own_at_or_after(&self, place: u64) -> u64 {
        let r = place % self.consumers;
        let up = (self.consumer + self.consumers - r) % self.consumers;
        place + up
    }

    /// Adds a message's split and elements.
    pub(crate) fn push(&mut self, split: pb::SplitNotice, items: Vec<Item>) {
        // Places below the floor are whole everywhere: move past them.
        let floor = self.own_at_or_after(split.floor);
        if floor > self.head {
            self.head = floor;
        }
        let entry = self.splits.entry(split.order_index).or_default();
        entry.notice = Some(split);
        entry.items.extend(items);
    }

    /// The next element in order, if it is here; `whole(begin, end, counted)`
    /// says whether every unit of a range was consumed.
    pub(crate) fn pop(&mut self, whole: impl Fn(u64, u64, bool) -> bool) -> Option<Item> {
        loop {
            // Elements of a place already passed (not expected: a split is granted
            // again only while it is not whole) go out at once rather than never.
            let stale = self.splits.range(..self.head).find(|(_, s)| !s.items.is_empty());
            if let Some((&place, _)) = stale {
                return self.splits.get_mut(&place).and_then(|s| s.items.pop_front());
            }
            self.splits.retain(|p, _| *p >= self.head);
            let split = self.splits.get_mut(&self.head)?;
            if let Some(item) = split.items.pop_front() {
                return Some(item);
            }
            let n = split.notice?;
            if !whole(n.begin, n.end, n.counted) {
                return None;
            }
            self.splits.remove(&self.head);
            self.head += self.consumers;
        }
    }

    /// Whether any element is buffered.
    pub(crate) fn holds_items(&self) -> bool {
        self.splits.values().any(|s| !s.items.is_empty())
    }

    /// Whatever is left, in place order (the read ended).
    pub(crate) fn pop_any(&mut self) -> Option<Item> {
        let (_, s) = self.splits.iter_mut().find(|(_, s)| !s.items.is_empty())?;
        s.items.pop_front()
    }
}

/// The reorder buffer shared by its pump and its stream.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    consumption: Arc<Consumption>,
}

struct Inner {
    reorder: Reorder,
    waker: Option<Waker>,
    /// The manager's last drained marker (0 once a message followed it).
    drained: u64,
    ended: bool,
    error: Option<ClientError>,
}

impl Shared {
    pub(crate) fn new(consumer: u32, consumers: u32, consumption: Arc<Consumption>) -> Self {
        let reorder = Reorder::new(consumer, consumers);
        let inner = Inner { reorder, waker: None, drained: 0, ended: false, error: None };
        Shared { inner: Mutex::new(inner), consumption }
    }

    /// What the pump (`reader.rs`) received: a message's split and elements
    /// (`None` for a message of no split with no element), an error, or the end
    /// (`None`). Returns whether the pump is done.
    pub(crate) fn received(&self, message: Received) -> bool {
        let mut g = self.lock();
        match message {
            Some(Ok(Message { drained_tasks, .. })) if drained_tasks > 0 => {
                g.drained = drained_tasks;
            }
            Some(Ok(Message { split, items, source, .. })) => match split {
                Some(s) if s.end < s.begin || s.end - s.begin > MAX_SPLIT_UNITS => {
                    g.error = Some(ClientError::Protocol {
                        address: source.to_string(),
                        message: format!(
                            "split {} names units [{}, {}): not a range of at most \
                             {MAX_SPLIT_UNITS} units",
                            s.order_index, s.begin, s.end
                        ),
                    })
                }
                Some(s) => {
                    g.drained = 0;
                    g.reorder.push(s, items)
                }
                None if items.is_empty() => {}
                None => {
                    g.error = Some(ClientError::Protocol {
                        address: source.to_string(),
                        message: "a message of a deterministic-order task names no split; run \
                                  the workers at this client's version"
                            .into(),
                    })
                }
            },
            Some(Err(e)) => g.error = Some(e),
            None => g.ended = true,
        }
        let (waker, done) = (g.waker.take(), g.ended || g.error.is_some());
        drop(g);
        if let Some(w) = waker {
            w.wake();
        }
        done
    }

    /// A std `Mutex`: held to push or pop, never across an await.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next element in order, consumed as it is handed out.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Next {
        let c = &self.consumption;
        loop {
            let mut g = self.lock();
            let item = match g.reorder.pop(|b, e, counted| c.whole(b, e, counted)) {
                Some(item) => item,
                None if g.error.is_some() => return Poll::Ready(g.error.take().map(Err)),
                None if g.ended => match g.reorder.pop_any() {
                    Some(item) => item,
                    None => return Poll::Ready(None),
                },
                None => {
                    // The end-of-epoch sweep: drained only when nothing is held here.
                    let held = g.reorder.holds_items();
                    c.set_drained(if held { 0 } else { g.drained });
                    g.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            };
            drop(g);
            // A lost task's element is dropped: its split waits for the re-grant.
            if c.consume(item.task_id, &item.origin) {
                return Poll::Ready(Some(Ok((item.source, item.element))));
            }
        }
    }
}

#[cfg(test)]
#[path = "reorder_tests.rs"]
mod tests;
