#!/usr/bin/env bash
# Installs chromium (a Debian package), which tests/status_page.rs uses to load the
# dispatcher's status page in a real headless browser. Idempotent: does nothing when
# chromium is on PATH (scripts/install-debian.sh).
set -euo pipefail
exec bash "$(dirname "$0")/install-debian.sh" chromium chromium
