//! [`Tag`]: an element's origin as a worker carries it through its pipeline,
//! and [`PositionColumns`]: a message's `Positions` written from its tags.
//!
//! Why not an [`Origin`]: nearly every element of an exactly-once pipeline
//! stands for one run (one record of one unit, or a batch of consecutive
//! records) and nothing else. An `Origin` holds that in a `Vec` (and an element
//! held it behind a `Box`), and the wire form `pb::Origin` in two more: three
//! allocations per element, about a fifth of a microsecond per scalar element
//! on the worker (docs/performance.md, "Exactly once"). A `Tag` keeps one run
//! inline and becomes a boxed `Origin` only when it holds more (runs that do not
//! touch, unit ends), and [`PositionColumns`] packs tags straight into the
//! message's columns, in the layout `wire::join_positions` writes, with no
//! per-element message in between.

use sluice_proto::v1 as pb;

use crate::origin::{Origin, Run};

/// The records one element stands for: [`Origin`] with its common case inline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tag {
    /// One run and no unit end (the run is never empty).
    Run(Run),
    /// Anything else.
    Origin(Box<Origin>),
}

impl Tag {
    /// The tag of record `record` of `unit`.
    pub fn record(unit: u64, record: u64) -> Self {
        Tag::Run(Run::record(unit, record))
    }

    /// The runs, in order (coalesced where they touch, as `Origin` keeps them).
    pub fn runs(&self) -> &[Run] {
        match self {
            Tag::Run(run) => std::slice::from_ref(run),
            Tag::Origin(o) => &o.runs,
        }
    }

    /// (unit, records) of the units this tag finished.
    pub fn unit_ends(&self) -> &[(u64, u64)] {
        match self {
            Tag::Run(_) => &[],
            Tag::Origin(o) => &o.unit_ends,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.runs().is_empty() && self.unit_ends().is_empty()
    }

    /// This tag as an `Origin`.
    pub fn into_origin(self) -> Origin {
        match self {
            Tag::Run(run) => Origin { runs: vec![run], unit_ends: vec![] },
            Tag::Origin(o) => *o,
        }
    }

    /// Moves everything of this tag into `origin` (coalescing as
    /// [`Origin::append`] does), with no allocation for an inline tag.
    pub fn append_to(self, origin: &mut Origin) {
        match self {
            Tag::Run(run) => origin.push_run(run),
            Tag::Origin(o) => origin.append(*o),
        }
    }

    /// Moves everything of `other` into this tag (a batch of elements, or
    /// dropped records joining the next element). Stays inline while the runs
    /// coalesce into one and no unit end joins.
    pub fn append(&mut self, other: Tag) {
        if other.is_empty() {
            return;
        }
        if let (Tag::Run(last), Tag::Run(next)) = (&mut *self, &other) {
            if last.unit == next.unit && last.end() == next.first {
                last.count = last.count.saturating_add(next.count);
                return;
            }
        }
        self.boxed().append(other.into_origin());
    }

    /// Moves everything of `other` into this tag.
    pub fn append_origin(&mut self, other: Origin) {
        self.append(Tag::from(other));
    }

    /// The boxed form, making it if this tag is inline.
    fn boxed(&mut self) -> &mut Origin {
        if let Tag::Run(run) = *self {
            *self = Tag::Origin(Box::new(Origin { runs: vec![run], unit_ends: vec![] }));
        }
        match self {
            Tag::Origin(o) => o,
            Tag::Run(_) => unreachable!("made boxed above"),
        }
    }

    /// The wire form of an element's origin (`pb::Element.origin`).
    pub fn to_pb(&self) -> pb::Origin {
        let mut runs = Vec::with_capacity(self.runs().len() * 3);
        crate::wire::runs_to_flat(self.runs().iter().copied(), &mut runs);
        let mut unit_ends = Vec::with_capacity(self.unit_ends().len() * 2);
        crate::wire::ends_to_flat(self.unit_ends().iter().copied(), &mut unit_ends);
        pb::Origin { runs, unit_ends }
    }

    /// Bytes this tag adds to a message's encoded `Positions`: its run count
    /// and its numbers, as packed varints.
    pub fn wire_len(&self) -> usize {
        let varint = |v: u64| prost::encoding::encoded_len_varint(v);
        let runs: usize =
            self.runs().iter().map(|r| varint(r.unit) + varint(r.first) + varint(r.count)).sum();
        let ends: usize = self.unit_ends().iter().map(|(u, n)| varint(*u) + varint(*n)).sum();
        varint(self.runs().len() as u64) + runs + ends
    }
}

impl From<Origin> for Tag {
    /// Inline when `origin` is one run and no unit end.
    fn from(origin: Origin) -> Self {
        match (origin.runs.as_slice(), origin.unit_ends.is_empty()) {
            ([run], true) => Tag::Run(*run),
            _ => Tag::Origin(Box::new(origin)),
        }
    }
}

/// A message's `Positions`, written element by element from their tags: the
/// columns `wire::join_positions` makes of the same origins, without an
/// `Origin` or `pb::Origin` per element.
#[derive(Debug, Default)]
pub struct PositionColumns {
    p: pb::Positions,
}

impl PositionColumns {
    /// Columns for about `elements` elements of one run each.
    pub fn with_capacity(elements: usize) -> Self {
        PositionColumns {
            p: pb::Positions {
                runs_per_element: Vec::with_capacity(elements + 1),
                runs: Vec::with_capacity(elements * 3),
                unit_ends: Vec::new(),
            },
        }
    }

    /// Adds the next element's tag (`None`: an element standing for no record).
    pub fn push(&mut self, tag: Option<&Tag>) {
        let Some(tag) = tag else {
            self.p.runs_per_element.push(0);
            return;
        };
        let runs = tag.runs();
        // At most `limits::MAX_RUNS` runs are ever decoded; an element never
        // holds anywhere near u32::MAX.
        self.p.runs_per_element.push(u32::try_from(runs.len()).unwrap_or(u32::MAX));
        for r in runs {
            self.p.runs.extend([r.unit, r.first, r.count]);
        }
        for (u, n) in tag.unit_ends() {
            self.p.unit_ends.extend([*u, *n]);
        }
    }

    /// The columns, closed by the message's own origin (records dropped after
    /// the last element, unit ends).
    pub fn finish(mut self, message: Origin) -> pb::Positions {
        self.p.runs_per_element.push(u32::try_from(message.runs.len()).unwrap_or(u32::MAX));
        crate::wire::runs_to_flat(message.runs, &mut self.p.runs);
        crate::wire::ends_to_flat(message.unit_ends, &mut self.p.unit_ends);
        self.p
    }
}

#[cfg(test)]
#[path = "tag_tests.rs"]
mod tests;
