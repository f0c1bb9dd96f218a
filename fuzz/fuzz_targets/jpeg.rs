//! Fuzz target `jpeg`: calls `sluice_dataset::fuzzing::jpeg` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_dataset::fuzzing::jpeg(data));
