#!/usr/bin/env bash
# Installs strace (a Debian package), which tests/fsync_strace.rs uses to observe the
# dispatcher's fsync calls. Idempotent: does nothing when strace is on PATH. Needs root
# (as in .ci/run) and Debian's package registry; otherwise says what to run.
set -euo pipefail

if command -v strace >/dev/null; then
    echo "strace already installed ($(strace -V | head -1))"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "strace is missing and this is not root: run \`sudo apt-get install strace\`" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends strace >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y --no-install-recommends strace >/dev/null; }
echo "strace installed ($(strace -V | head -1))"
