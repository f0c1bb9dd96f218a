//! The reader's element-frame decoder under the inputs of its fuzz target
//! (`fuzz/`), replayed on every committed seed and regression input: what the
//! fuzzer found stays fixed, and CI runs each entry point without libFuzzer (the
//! allocator records the largest allocation, as libFuzzer's `-malloc_limit_mb` would).

#[global_allocator]
static ALLOCATOR: sluice_testkit::fuzz_corpus::LargestAllocation =
    sluice_testkit::fuzz_corpus::LargestAllocation;

#[test]
fn fuzz_target_element_frames_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("element_frames", sluice_client::fuzzing::element_frames);
}
