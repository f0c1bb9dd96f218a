//! Positions of source records, for exactly-once delivery and checkpoints
//! (docs/exactly-once.md).
//!
//! A DYNAMIC source is divided into *units* (the split units: an element of
//! `range` / `from_tensor_slices`, a file of a file source) and each unit into
//! *records* (a file's records, or the elements a `flat_map` / `interleave` makes
//! of one unit; a unit that is one element has the single record 0). Every
//! element a worker produces names the records it was made of ([`Origin`]; in
//! the worker's pipeline a [`Tag`], which holds the common one-run case inline,
//! packed into a message by [`PositionColumns`]);
//! consumers report what they consumed, the dispatcher keeps the consumed
//! records of an iteration as a [`RecordSet`] and re-reads only the others, and
//! a consumer's checkpoint is a [`Position`].
//!
//! Why records and not output offsets: the source reads a unit the same way
//! every time (files do not change under a job), so a re-read unit that skips
//! its consumed records yields exactly the rest, whatever the stages after the
//! source do (non-deterministic maps, shuffles across units, batches). Only the
//! unit → records expansion must be repeatable.
//!
//! This crate is pure data: no I/O, no clocks. Everything decoded from the wire
//! or a user's bytes is checked against [`limits`] before it allocates.

mod error;
mod log;
mod origin;
mod position;
mod records;
mod tag;
pub mod wire;

pub use error::PositionError;
pub use log::ConsumedLog;
pub use origin::{Origin, Run};
pub use position::{Position, POSITION_FORMAT};
pub use records::{RecordSet, UnitRecords};
pub use tag::{PositionColumns, Tag};

/// Bounds on what is decoded from the wire or from a user's checkpoint bytes.
pub mod limits {
    /// The most bytes an encoded [`crate::Position`] may have (16 MiB).
    pub const MAX_POSITION_BYTES: usize = 16 << 20;
    /// The most runs one decoded set or origin may hold.
    pub const MAX_RUNS: usize = 1 << 20;
}
