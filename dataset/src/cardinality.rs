//! How many elements a pipeline yields, as far as its definition tells: a pure
//! function of the [`DatasetDef`], computed stage by stage the way tf.data's
//! `Cardinality()` is (`repeat()` of anything non-empty is infinite; file sources
//! are unknown; `filter`, `flat_map` and `interleave` lose a finite count but keep
//! infiniteness: over an endless input they never reach end of sequence).
//!
//! Coordinated reads and the cross-trainer cache use it: the dispatcher refuses such
//! a job over a pipeline that is known to end (it would stop the rounds, or the
//! shared window), and accepts an unknown one, as tf.data does; a worker whose
//! pipeline still ends then says so.

use crate::def::{range_len, DatasetDef, ShardArg, Stage};

/// A pipeline's number of elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    Finite(u64),
    Infinite,
    Unknown,
}

use Cardinality::*;

impl DatasetDef {
    /// The number of elements this pipeline yields, if its definition tells.
    pub fn cardinality(&self) -> Cardinality {
        let mut card = Finite(0);
        for (i, stage) in self.stages.iter().enumerate() {
            card = stage_cardinality(stage, card, i == 0);
        }
        card
    }

    /// Whether the pipeline never ends (it ends with `repeat()` of something
    /// non-empty, or equivalent).
    pub fn is_infinite(&self) -> bool {
        self.cardinality() == Infinite
    }
}

fn stage_cardinality(stage: &Stage, input: Cardinality, first: bool) -> Cardinality {
    match stage {
        Stage::Range { start, stop, step } => Finite(range_len(*start, *stop, *step)),
        Stage::FromTensorSlices(v) => Finite(v.len() as u64),
        Stage::ListFiles { files: Some(files), .. } => Finite(files.len() as u64),
        Stage::ListFiles { files: None, .. }
        | Stage::TfRecord { .. }
        | Stage::TextLines { .. }
        | Stage::WebDataset { .. }
        | Stage::Parquet(_) => Unknown,
        // A stage that is not a source cannot open a pipeline; nothing to say.
        _ if first => Unknown,
        Stage::Map { .. } | Stage::Prefetch { .. } | Stage::Shuffle { .. } => input,
        Stage::Enumerate { .. } | Stage::ParseExample { .. } => input,
        // Over an infinite input these never reach end of sequence either (they
        // may stop yielding, which is the user's to avoid).
        Stage::Python(p) if p.op == crate::python::PyOp::Map => input,
        Stage::Filter(_)
        | Stage::FlatMap(_)
        | Stage::Interleave { .. }
        | Stage::Python(_)
        | Stage::IgnoreErrors {} => match input {
            Finite(0) => Finite(0),
            Infinite => Infinite,
            _ => Unknown,
        },
        Stage::Batch { size, drop_remainder } => match input {
            Finite(n) if *size > 0 => {
                Finite(if *drop_remainder { n / size } else { n.div_ceil(*size) })
            }
            other => other,
        },
        Stage::Repeat { count: None } => match input {
            Finite(0) => Finite(0),
            _ => Infinite,
        },
        Stage::Repeat { count: Some(k) } => match input {
            _ if *k == 0 => Finite(0),
            Finite(n) => Finite(n.saturating_mul(*k)),
            other => other,
        },
        Stage::Take { count } => match input {
            Finite(n) => Finite(n.min(*count)),
            Infinite => Finite(*count),
            Unknown => Unknown,
        },
        Stage::Skip { count } => match input {
            Finite(n) => Finite(n.saturating_sub(*count)),
            other => other,
        },
        Stage::Shard { num_shards: ShardArg::Value(n), index: ShardArg::Value(i) } => match input {
            Finite(len) if *n > 0 && i < n => Finite(len / n + u64::from(len % n > *i)),
            other => other,
        },
        Stage::Shard { .. } => match input {
            Infinite => Infinite,
            Finite(0) => Finite(0),
            _ => Unknown,
        },
        Stage::Zip { datasets } => {
            let all = std::iter::once(input).chain(datasets.iter().map(|d| d.cardinality()));
            let mut out = Infinite;
            for c in all {
                out = match (out, c) {
                    (Finite(a), Finite(b)) => Finite(a.min(b)),
                    (Finite(a), _) | (_, Finite(a)) if a == 0 => Finite(0),
                    (Infinite, c) | (c, Infinite) => c,
                    _ => Unknown,
                };
            }
            out
        }
        Stage::Concatenate { dataset } => match (input, dataset.cardinality()) {
            (Finite(a), Finite(b)) => Finite(a.saturating_add(b)),
            (Infinite, _) | (_, Infinite) => Infinite,
            _ => Unknown,
        },
    }
}

impl DatasetDef {
    /// Whether the pipeline is known to end.
    pub fn is_known_finite(&self) -> bool {
        matches!(self.cardinality(), Finite(_))
    }
}
