#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, cargo-fuzz + libFuzzer) for SECONDS each (default 600),
# one after another, and prints each run's final figures. The long command; CI only
# replays the committed inputs (`tests/fuzz_corpus.rs` in each crate). See
# docs/security.md, "Fuzzing".
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (installed here with `cargo install cargo-fuzz --locked` if missing).
# libFuzzer builds need `-Zsanitizer`, a nightly flag: on a stable toolchain the script
# sets RUSTC_BOOTSTRAP=1 for this build only. Each run starts from a copy of the
# committed seed corpus and regressions (the copy grows, the committed corpus does not),
# in $CARGO_TARGET_DIR (default target/) under fuzz-run/<target>; a crash, timeout or
# over-limit allocation is saved under fuzz-run/<target>/artifacts and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="$target_dir/fuzz"
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
cd fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
# -a: debug assertions and overflow checks on, so an unchecked overflow is a finding.
cargo fuzz build -a
failed=()
for t in "${targets[@]}"; do
    run="$target_dir/fuzz-run/$t"
    mkdir -p "$run/corpus" "$run/artifacts"
    cp -n corpus/"$t"/* "$run/corpus/" 2>/dev/null || true
    cp -n regressions/"$t"/* "$run/corpus/" 2>/dev/null || true
    echo "== $t: ${seconds}s"
    # Limits: 2 GiB of RSS, 512 MiB in one allocation, 10 s per input: beyond any is a finding.
    # No leak check: pipeline threads (prefetch, parallel map) end on their own after the
    # iterator is dropped, and LeakSanitizer reports their thread-locals as leaked.
    if cargo fuzz run -a "$t" "$run/corpus" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
        -detect_leaks=0 \
        -print_final_stats=1 -artifact_prefix="$run/artifacts/" >"$run/log" 2>&1; then
        # The last status line (cov, ft, corpus) and the totals.
        grep -E "^#[0-9]+" "$run/log" | tail -n 1 || true
        grep -E "stat::number_of_executed_units|stat::average_exec_per_sec" "$run/log" || true
    else
        failed+=("$t")
        tail -n 40 "$run/log"
        echo "!! $t found a problem: inputs in $run/artifacts, log in $run/log"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz targets with findings: ${failed[*]}"
    exit 1
fi
