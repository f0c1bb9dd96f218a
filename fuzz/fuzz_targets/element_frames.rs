//! Fuzz target `element_frames`: calls `sluice_client::fuzzing::element_frames` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_client::fuzzing::element_frames(data));
