//! How many elements a pipeline yields, as far as its definition tells: finite
//! (with the count when known), infinite, or unknown. A pure walk over the stages;
//! nothing runs. The cross-trainer cache uses it to refuse, at job creation, a
//! pipeline that is known to end (its window over one shared element sequence only
//! makes sense when the sequence never ends).
//!
//! Sources are finite (`range`, `from_tensor_slices`, files). `repeat` without a
//! count makes a non-empty input infinite; `take` makes anything finite; `filter`,
//! `batch`, `shuffle`… keep infiniteness (a filter over an infinite stream never
//! reaches end of sequence, even if it stops yielding). `flat_map` / `interleave`
//! over a finite input are unknown: a registry dataset function may itself be
//! infinite.

use crate::def::{range_len, DatasetDef, Stage};

/// What a definition says about its number of elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    /// Ends; `Some(n)` when the definition tells exactly how many elements.
    Finite(Option<u64>),
    /// Never reaches end of sequence.
    Infinite,
    /// Cannot be told from the definition.
    Unknown,
}

impl Cardinality {
    fn map_count(self, f: impl FnOnce(u64) -> Option<u64>) -> Cardinality {
        match self {
            Cardinality::Finite(Some(n)) => Cardinality::Finite(f(n)),
            other => other,
        }
    }
}

impl DatasetDef {
    /// The pipeline's cardinality, from its stages alone.
    pub fn cardinality(&self) -> Cardinality {
        let mut c = Cardinality::Unknown;
        for (i, stage) in self.stages.iter().enumerate() {
            c = step(if i == 0 { None } else { Some(c) }, stage);
        }
        c
    }

    /// Whether the pipeline never ends (e.g. it has `repeat` without a count over a
    /// non-empty input, and no `take` after it).
    pub fn is_infinite(&self) -> bool {
        self.cardinality() == Cardinality::Infinite
    }

    /// Whether the pipeline is known to end.
    pub fn is_known_finite(&self) -> bool {
        matches!(self.cardinality(), Cardinality::Finite(_))
    }
}

/// The cardinality after `stage`, given the cardinality of its input (`None` for a
/// source stage).
fn step(input: Option<Cardinality>, stage: &Stage) -> Cardinality {
    use Cardinality::*;
    let c = input.unwrap_or(Unknown);
    match stage {
        Stage::Range { start, stop, step } => Finite(Some(range_len(*start, *stop, *step))),
        Stage::FromTensorSlices(v) => Finite(Some(v.len() as u64)),
        Stage::ListFiles { files, .. } => Finite(files.as_ref().map(|f| f.len() as u64)),
        // Records / lines per file are unknown, but files end.
        Stage::TfRecord { .. } | Stage::TextLines { .. } => Finite(None),
        Stage::Map { .. }
        | Stage::Prefetch { .. }
        | Stage::Enumerate { .. }
        | Stage::ParseExample { .. }
        | Stage::Shuffle { .. } => c,
        Stage::Filter(_) => match c {
            Finite(_) => Finite(None),
            other => other,
        },
        Stage::Batch { size, drop_remainder } => c.map_count(|n| {
            let size = (*size).max(1);
            Some(if *drop_remainder { n / size } else { n.div_ceil(size) })
        }),
        Stage::Shard { .. } => match c {
            Finite(_) => Finite(None),
            other => other,
        },
        Stage::Repeat { count: Some(0) } => Finite(Some(0)),
        Stage::Repeat { count: Some(k) } => c.map_count(|n| n.checked_mul(*k)),
        Stage::Repeat { count: None } => match c {
            // Repeating nothing forever is still nothing.
            Finite(Some(0)) => Finite(Some(0)),
            // An unknown count may be 0 (a filter removing everything); the
            // runtime check catches that case, the definition says "forever".
            _ => Infinite,
        },
        Stage::Take { count } => match c {
            Finite(Some(n)) => Finite(Some(n.min(*count))),
            Infinite => Finite(Some(*count)),
            _ => Finite(None),
        },
        Stage::Skip { count } => c.map_count(|n| Some(n.saturating_sub(*count))),
        Stage::FlatMap(_) | Stage::Interleave { .. } => match c {
            Finite(Some(0)) => Finite(Some(0)),
            Infinite => Infinite,
            _ => Unknown,
        },
        Stage::Zip { datasets } => {
            let all = std::iter::once(c).chain(datasets.iter().map(DatasetDef::cardinality));
            all.fold(Infinite, |acc, d| match (acc, d) {
                (Infinite, x) | (x, Infinite) => x,
                (Finite(Some(a)), Finite(Some(b))) => Finite(Some(a.min(b))),
                (Finite(_), _) | (_, Finite(_)) => Finite(None),
                _ => Unknown,
            })
        }
        Stage::Concatenate { dataset } => match (c, dataset.cardinality()) {
            (Infinite, _) | (_, Infinite) => Infinite,
            (Finite(Some(a)), Finite(Some(b))) => Finite(a.checked_add(b)),
            (Finite(_), Finite(_)) => Finite(None),
            _ => Unknown,
        },
    }
}
