//! The GetElements route's request reader under the inputs of its fuzz target
//! (`fuzz/`), replayed on every committed seed and regression input: what the
//! fuzzer found stays fixed, and CI runs each entry point without libFuzzer (the
//! allocator records the largest allocation, as libFuzzer's `-malloc_limit_mb` would).

#[global_allocator]
static ALLOCATOR: sluice_testkit::fuzz_corpus::LargestAllocation =
    sluice_testkit::fuzz_corpus::LargestAllocation;

#[test]
fn fuzz_target_worker_request_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay(
        "worker_request",
        sluice_worker::fuzzing::get_elements_request,
    );
}
