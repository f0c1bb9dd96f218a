#!/usr/bin/env bash
# Installs the S3-compatible test server (moto) that the journal's conformance suite and the
# dispatcher's tests start on a free loopback port. Idempotent: does nothing when
# `.venv-s3/bin/moto_server` already runs at the pinned version. Needs only python3 (with venv)
# and PyPI. Version pin: 5.2.5 is the first to answer 412 (not 500) on a failed conditional
# create, which the fencing tests depend on (see shared DEPS.md).
set -euo pipefail
cd "$(dirname "$0")/.."

MOTO_VERSION="5.2.5"
VENV=".venv-s3"

installed_version() {
    "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null || true
}

if [ -x "$VENV/bin/moto_server" ] && [ "$(installed_version)" = "$MOTO_VERSION" ]; then
    echo "moto $MOTO_VERSION already installed in $VENV"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV"
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
"$VENV/bin/moto_server" --help >/dev/null
echo "moto $(installed_version) installed in $VENV ($VENV/bin/moto_server)"
