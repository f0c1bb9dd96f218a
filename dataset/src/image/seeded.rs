//! The random stream of one element of a seeded op (`random_resized_crop`,
//! `random_flip`).
//!
//! Why not an RNG kept by the stage: a stage's RNG advances with every element it
//! sees, so an element computed again elsewhere (a worker died and its split was
//! replayed on another, which saw other elements before it) would draw other
//! numbers. Here each element's stream is a pure function of the op, its seed and
//! the element's [`ElementKey`]: the same element draws the same numbers on any
//! worker, in any order, at any parallelism.
//!
//! The stream is SplitMix64 (Steele, Lea and Flood 2014), written out here so that
//! it is the same in every version of Sluice and can be reproduced outside it
//! (docs/dataset-spec.md, "Seeded randomness", gives the exact recipe):
//! the state starts at 0 and absorbs the words `op`, `seed`, then the key — `1`
//! and each run's `unit, first, count` of an origin, or `2` and the index — each as
//! `state = mix(state + GAMMA ^ word)`; each draw is `state += GAMMA; mix(state)`.

use crate::registry::ElementKey;

/// SplitMix64's increment (the golden ratio).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Which op draws: two seeded ops given the same seed still draw independently.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    RandomResizedCrop = 1,
    RandomFlip = 2,
}

/// One element's random numbers for one op.
pub(super) struct ElementRng {
    state: u64,
}

impl ElementRng {
    pub(super) fn new(op: Op, seed: u64, key: ElementKey<'_>) -> Self {
        let mut rng = ElementRng { state: 0 };
        rng.absorb(op as u64);
        rng.absorb(seed);
        match key {
            ElementKey::Origin(tag) => {
                rng.absorb(1);
                for run in tag.runs() {
                    rng.absorb(run.unit);
                    rng.absorb(run.first);
                    rng.absorb(run.count);
                }
            }
            ElementKey::Index(index) => {
                rng.absorb(2);
                rng.absorb(index);
            }
        }
        rng
    }

    fn absorb(&mut self, word: u64) {
        self.state = mix(self.state.wrapping_add(GAMMA) ^ word);
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// Uniform in `[lo, hi)`: the top 53 bits of a draw as a fraction.
    pub(super) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        lo + (hi - lo) * unit
    }

    /// Uniform integer in `[0, n)` for `n > 0` (the high word of draw × n; its bias,
    /// under n / 2^64, is far below what an image size can show).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// SplitMix64's output function (a bijection of u64).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
