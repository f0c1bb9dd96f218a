//! Fuzz target `example`: calls `sluice_dataset::fuzzing::example` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_dataset::fuzzing::example(data));
