//! Fuzz target `journal_sled_record`: calls `sluice_journal::fuzzing::sled_record` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_journal::fuzzing::sled_record(data));
