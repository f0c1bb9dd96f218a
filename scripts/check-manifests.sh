#!/usr/bin/env bash
# Validates the Kubernetes manifests (deploy/k8s) against the API schemas of the
# oldest Kubernetes they support (1.28: the StatefulSet pod-index label) and of the
# newest the validator knows, strictly (an unknown field is an error). The validator,
# kubernetes-validate from PyPI, bundles the schemas, so no cluster is needed; it is
# installed into .venv-k8s on first use. Part of .ci/run. tests/deploy.rs runs the
# processes the manifests describe.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="1.37.0"
VENV=".venv-k8s"
installed() {
    "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null || true
}
if [ "$(installed)" != "$VERSION" ]; then
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$VERSION"
fi
# Every file of the base but the kustomization itself (not an API object).
files=()
for f in deploy/k8s/*.yaml; do
    [ "$(basename "$f")" = kustomization.yaml ] || files+=("$f")
done
for k8s in 1.28.0 1.37.0; do
    echo "kubernetes-validate --strict -k $k8s ${files[*]}"
    "$VENV/bin/kubernetes-validate" --strict --quiet -k "$k8s" "${files[@]}"
done
# The kustomization names every resource file, and only those.
listed=$(sed -n 's/^  - \(.*\.yaml\)$/\1/p' deploy/k8s/kustomization.yaml | sort)
present=$(for f in "${files[@]}"; do basename "$f"; done | sort)
if [ "$listed" != "$present" ]; then
    echo "deploy/k8s/kustomization.yaml lists: $listed"
    echo "but the directory holds: $present"
    exit 1
fi
echo "manifests valid: ${files[*]}"
