//! Deterministic order (docs/exactly-once.md, "Deterministic order"): the seeded
//! order in which an exactly-once iteration hands its splits out. A pure function
//! of the seed and the number of splits, so nothing but the seed and the number of
//! consumers is persisted, and a new leader, a replay of the log and a restored
//! iteration all compute the same order.
//!
//! Why blocks and not one permutation of every split: the consumed records'
//! watermark advances over whole units in unit order, and positions are small
//! because of it. A permutation of the whole epoch would spread consumption over
//! the epoch and keep the watermark at the first unit until the end. So splits are
//! permuted within blocks of [`BLOCK`] consecutive splits, block after block: place
//! `k` is a split of block `k / BLOCK`. The watermark then trails the order by at
//! most a block or two, and the dispatcher hands out no split more than
//! [`WINDOW_BLOCKS`] blocks past the watermark's block (what bounds what readers
//! buffer, and why the lowest unfinished split always makes progress).

use serde::{Deserialize, Serialize};

/// The most consumers a deterministic order may have: each worker task keeps a
/// queue per consumer (`worker/src/ordered.rs` refuses more too).
pub const MAX_CONSUMERS: u32 = 4096;
/// Splits per permuted block.
pub const BLOCK: u64 = 64;
/// How many blocks, from the watermark's, may be handed out.
pub const WINDOW_BLOCKS: u64 = 2;

/// A job's deterministic order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub seed: u64,
    /// Split `k` goes to consumer `k % consumers`.
    pub consumers: u32,
}

/// A grant's place and its split's whole unit range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub index: u64,
    pub begin: u64,
    pub end: u64,
    /// Every place below this is whole (consumed), when the grant was made: a
    /// consumer moves its next place up to it (a restored iteration starts
    /// here, and hands out no place below it).
    pub floor: u64,
}

/// splitmix64: a small, well-mixed generator (the seed's stream for one block).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The splits of block `block` (of `splits` in all) in their order: a
/// Fisher-Yates shuffle drawn from the seed and the block's number.
fn block_order(seed: u64, splits: u64, block: u64) -> Vec<u64> {
    let first = block * BLOCK;
    let len = splits.saturating_sub(first).min(BLOCK);
    let mut out: Vec<u64> = (first..first + len).collect();
    let mut state = seed ^ block.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    for i in (1..out.len()).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

/// The split handed out `k`-th (`k < splits`).
pub fn split_at(seed: u64, splits: u64, k: u64) -> u64 {
    block_order(seed, splits, k / BLOCK)[(k % BLOCK) as usize]
}

/// The place of split `s` in the order (the inverse of [`split_at`]).
pub fn place_of(seed: u64, splits: u64, s: u64) -> u64 {
    let block = s / BLOCK;
    let at = block_order(seed, splits, block).iter().position(|&x| x == s).unwrap_or(0);
    block * BLOCK + at as u64
}

/// The first place of the block holding the watermark's split: every place
/// below it is of a split below the watermark, hence whole.
pub fn floor(watermark: u64, units_per_split: u64) -> u64 {
    watermark / units_per_split.max(1) / BLOCK * BLOCK
}

/// The first place not yet handed out may be at most this (exclusive bound):
/// [`WINDOW_BLOCKS`] blocks from the block holding the watermark's split.
pub fn window_end(watermark: u64, units_per_split: u64) -> u64 {
    floor(watermark, units_per_split) + WINDOW_BLOCKS * BLOCK
}

/// The unit range of split `s` of a source of `cardinality` units.
pub fn split_range(s: u64, units_per_split: u64, cardinality: u64) -> (u64, u64) {
    let eps = units_per_split.max(1);
    let begin = s.saturating_mul(eps).min(cardinality);
    (begin, begin.saturating_add(eps).min(cardinality))
}

/// How many splits a source of `cardinality` units has.
pub fn split_count(units_per_split: u64, cardinality: u64) -> u64 {
    cardinality.div_ceil(units_per_split.max(1))
}

/// The place of the grant starting at unit `unit`, the consumed watermark
/// being `watermark`.
pub fn place_of_unit(
    order: Order,
    units_per_split: u64,
    cardinality: u64,
    unit: u64,
    watermark: u64,
) -> Place {
    let splits = split_count(units_per_split, cardinality);
    let s = unit / units_per_split.max(1);
    let (begin, end) = split_range(s, units_per_split, cardinality);
    let floor = floor(watermark, units_per_split);
    Place { index: place_of(order.seed, splits, s), begin, end, floor }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_order_is_a_bijection_and_place_of_inverts_it() {
        for splits in [1u64, 7, 64, 65, 200] {
            let order: Vec<u64> = (0..splits).map(|k| split_at(42, splits, k)).collect();
            let distinct: BTreeSet<u64> = order.iter().copied().collect();
            assert_eq!(distinct, (0..splits).collect(), "{splits} splits: a permutation");
            for (k, s) in order.iter().enumerate() {
                assert_eq!(place_of(42, splits, *s), k as u64);
                assert_eq!(k as u64 / BLOCK, s / BLOCK, "a place stays within its block");
            }
        }
    }

    #[test]
    fn the_order_is_a_function_of_the_seed() {
        let a: Vec<u64> = (0..200).map(|k| split_at(1, 200, k)).collect();
        let again: Vec<u64> = (0..200).map(|k| split_at(1, 200, k)).collect();
        let other: Vec<u64> = (0..200).map(|k| split_at(2, 200, k)).collect();
        assert_eq!(a, again);
        assert_ne!(a, other);
        assert_ne!(a, (0..200).collect::<Vec<_>>(), "a seeded order is not the identity");
    }

    #[test]
    fn the_window_covers_the_watermarks_block_and_the_next() {
        assert_eq!(window_end(0, 1), 2 * BLOCK);
        assert_eq!(window_end(BLOCK * 3 + 5, 1), 5 * BLOCK);
        assert_eq!(window_end(BLOCK * 10, 10), 3 * BLOCK);
        let p = place_of_unit(Order { seed: 9, consumers: 2 }, 10, 95, 93, 0);
        assert_eq!((p.begin, p.end, p.floor), (90, 95, 0));
        assert_eq!(floor(BLOCK * 10 * 3 + 7, 10), 3 * BLOCK);
        assert_eq!(split_at(9, 10, p.index), 9);
    }
}
