#!/usr/bin/env bash
# Runs the whole test suite (the README's `scripts/test.sh`) several times in a row
# while a CPU hog keeps every core busy, and lists what failed in which pass.
#
# Why: a test that passes on an idle machine and fails on a busy one (a CI runner, a
# laptop building something else) is a defect. This makes "busy" reproducible.
#
#   scripts/flaky.sh            # 10 loaded passes
#   scripts/flaky.sh 3          # 3 passes
#   HOG=0 scripts/flaky.sh 2    # no hog (for comparison)
#   HOG=4 scripts/flaky.sh      # 4 busy loops instead of one per core
#
# Logs: target/flaky/pass-N.log; a summary at the end; exit status 1 if any pass failed.
# The hog is a set of busy shell loops, killed when the script exits (also on Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

passes="${1:-10}"
hogs="${HOG:-$(nproc)}"
out=target/flaky
mkdir -p "$out"

echo "--- building once, unloaded (the build is not what is being tested)"
bash scripts/install-s3-test-server.sh
cargo test --workspace --no-run -q

hog_pids=()
stop_hogs() {
    for pid in "${hog_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap stop_hogs EXIT INT TERM

for _ in $(seq 1 "$hogs"); do
    ( while :; do :; done ) &
    hog_pids+=("$!")
done
echo "--- $hogs busy loops started (load: $(cut -d' ' -f1-3 /proc/loadavg))"

failed_passes=0
summary=()
for pass in $(seq 1 "$passes"); do
    log="$out/pass-$pass.log"
    start=$(date +%s)
    if bash scripts/test.sh --no-fail-fast >"$log" 2>&1; then
        result="ok"
    else
        result="FAILED"
        failed_passes=$((failed_passes + 1))
    fi
    secs=$(( $(date +%s) - start ))
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    line="pass $pass/$passes: $result in ${secs}s (load $load)"
    echo "$line"
    summary+=("$line")
    if [ "$result" = "FAILED" ]; then
        # The failing tests and the first lines of their panics.
        grep -E '^test .* FAILED$|^---- .* stdout ----$|panicked at' "$log" | head -n 20 | sed 's/^/    /'
        summary+=("$(grep -E '^test .* FAILED$' "$log" | sed 's/^/    /' || true)")
    fi
done

echo
echo "=== $passes passes with $hogs busy loops: $failed_passes failed"
printf '%s\n' "${summary[@]}"
[ "$failed_passes" -eq 0 ]
