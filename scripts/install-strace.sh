#!/usr/bin/env bash
# Installs strace (a Debian package), which tests/fsync_strace.rs uses to observe the
# dispatcher's fsync calls. Idempotent: does nothing when strace is on PATH
# (scripts/install-debian.sh).
set -euo pipefail
exec bash "$(dirname "$0")/install-debian.sh" strace strace
