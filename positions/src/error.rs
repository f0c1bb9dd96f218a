use thiserror::Error;

/// Why positions could not be decoded or combined. Messages say what to do.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PositionError {
    #[error("malformed position data: {0}")]
    Malformed(String),
    #[error(
        "the position is {bytes} bytes, above the limit of {limit}; it is not a Sluice \
         position, or it was corrupted"
    )]
    TooLarge { bytes: usize, limit: usize },
    #[error(
        "the position has format {found}, newer than this build reads ({supported}); restore \
         it with the Sluice release that wrote it or a newer one"
    )]
    NewerFormat { found: u32, supported: u32 },
    #[error("positions of different {what} cannot be merged: {a:?} and {b:?}; merge the positions of one checkpoint of one job")]
    Mismatch { what: &'static str, a: String, b: String },
    #[error("no positions to merge")]
    Empty,
}
