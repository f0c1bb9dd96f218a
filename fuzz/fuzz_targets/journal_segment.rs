//! Fuzz target `journal_segment`: calls `sluice_journal::fuzzing::segment` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_journal::fuzzing::segment(data));
