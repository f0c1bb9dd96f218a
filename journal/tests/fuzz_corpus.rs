//! The journal's decoders under the inputs of their fuzz targets
//! (`fuzz/`), replayed on every committed seed and regression input: what the
//! fuzzer found stays fixed, and CI runs each entry point without libFuzzer (the
//! allocator records the largest allocation, as libFuzzer's `-malloc_limit_mb` would).

#[global_allocator]
static ALLOCATOR: sluice_testkit::fuzz_corpus::LargestAllocation =
    sluice_testkit::fuzz_corpus::LargestAllocation;

#[test]
fn fuzz_target_journal_segment_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("journal_segment", sluice_journal::fuzzing::segment);
}

#[test]
fn fuzz_target_journal_sled_record_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay(
        "journal_sled_record",
        sluice_journal::fuzzing::sled_record,
    );
}
