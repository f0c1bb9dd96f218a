//! Encoding of everything the dispatcher stores or sends between nodes: log
//! entries, votes, purge markers, snapshots and Raft RPCs. One codec (bincode 1,
//! fixed-int little-endian) behind two functions, so a format change happens here.

use serde::de::DeserializeOwned;
use serde::Serialize;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    bincode::serialize(value)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    bincode::deserialize(bytes)
}
