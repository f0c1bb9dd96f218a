#!/usr/bin/env bash
# Installs chromium (a Debian package), which tests/status_page.rs uses to load the
# dispatcher's status page in a real headless browser. Idempotent: does nothing when
# chromium is on PATH. Needs root (as in .ci/run) and Debian's package registry;
# otherwise says what to run.
set -euo pipefail

if command -v chromium >/dev/null; then
    echo "chromium already installed ($(chromium --version 2>/dev/null | head -1))"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "chromium is missing and this is not root: run \`sudo apt-get install chromium\`" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y --no-install-recommends chromium >/dev/null; }
echo "chromium installed ($(chromium --version 2>/dev/null | head -1))"
