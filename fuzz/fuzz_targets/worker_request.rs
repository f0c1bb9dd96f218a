//! Fuzz target `worker_request`: calls `sluice_worker::fuzzing::get_elements_request` (its doc says what the input means).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_worker::fuzzing::get_elements_request(data));
