//! Fuzz target `webdataset`: calls `sluice_dataset::fuzzing::webdataset` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_dataset::fuzzing::webdataset(data));
