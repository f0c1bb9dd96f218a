//! Fuzz target `png`: calls `sluice_dataset::fuzzing::png` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_dataset::fuzzing::png(data));
