//! Spec → executor, TFRecord, WebDataset, Example, PNG and JPEG under the inputs of their fuzz targets
//! (`fuzz/`), replayed on every committed seed and regression input: what the
//! fuzzer found stays fixed, and CI runs each entry point without libFuzzer (the
//! allocator records the largest allocation, as libFuzzer's `-malloc_limit_mb` would).

#[global_allocator]
static ALLOCATOR: sluice_testkit::fuzz_corpus::LargestAllocation =
    sluice_testkit::fuzz_corpus::LargestAllocation;

#[test]
fn fuzz_target_dataset_spec_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("dataset_spec", sluice_dataset::fuzzing::spec);
}

#[test]
fn fuzz_target_tfrecord_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("tfrecord", sluice_dataset::fuzzing::tfrecord);
}

#[test]
fn fuzz_target_webdataset_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("webdataset", sluice_dataset::fuzzing::webdataset);
}

#[test]
fn fuzz_target_example_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("example", sluice_dataset::fuzzing::example);
}

#[test]
fn fuzz_target_png_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("png", sluice_dataset::fuzzing::png);
}

#[test]
fn fuzz_target_jpeg_replays_its_corpus_and_regressions() {
    sluice_testkit::fuzz_corpus::replay("jpeg", sluice_dataset::fuzzing::jpeg);
}
