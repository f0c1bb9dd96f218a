#!/usr/bin/env bash
# The project's test command (README and .ci/run): installs the S3-compatible test
# server (moto, from PyPI, into .venv-s3) if it is missing, then runs every test.
# Extra arguments go to `cargo test`, e.g. `scripts/test.sh --test quorum`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-s3-test-server.sh
exec cargo test --workspace "$@"
