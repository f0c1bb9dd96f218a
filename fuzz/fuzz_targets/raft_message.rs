//! Fuzz target `raft_message`: calls `sluice_dispatcher::fuzzing::raft_message` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_dispatcher::fuzzing::raft_message(data));
