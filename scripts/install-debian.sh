#!/usr/bin/env bash
# Installs the Debian package PACKAGE unless COMMAND is already on PATH:
#   scripts/install-debian.sh COMMAND PACKAGE
# Used by scripts/test.sh (through install-strace.sh and install-chromium.sh) for the
# tools some tests drive. Needs root (as in .ci/run) and Debian's package registry;
# otherwise says what to run.
set -euo pipefail
command=$1
package=$2

version() { "$command" --version 2>/dev/null | head -1 || true; }
if command -v "$command" >/dev/null; then
    echo "$package already installed ($(version))"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "$package is missing and this is not root: run \`sudo apt-get install $package\`" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "$package" >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y --no-install-recommends "$package" >/dev/null; }
echo "$package installed ($(version))"
