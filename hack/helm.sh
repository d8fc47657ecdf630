#!/usr/bin/env bash
# Puts helm in a per-machine cache folder and prints the binary's path:
#   ${PICOMQ_CACHE:-~/.cache/picomq}/helm/<version>-<os>-<arch>/helm
# built once from its Go module (pinned in hack/helm/go.mod, so a fresh
# machine needs only the Go module proxy; about 2-3 min on 2 cores), then
# reused. The chart's tests (charts/picomq) and `make chart` run it.
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(awk '$1 == "helm.sh/helm/v4" { print $2 }' "$here/helm/go.mod")
[ -n "$version" ] || { echo "helm: no helm.sh/helm/v4 in $here/helm/go.mod" >&2; exit 1; }
os=$(go env GOOS)
arch=$(go env GOARCH)
cache=${PICOMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/picomq}
dir="$cache/helm/$version-$os-$arch"

if [ -x "$dir/helm" ]; then
  echo "$dir/helm"
  exit 0
fi
mkdir -p "$dir"
echo "helm: building helm $version from its Go module (once per machine)" >&2
start=$(date +%s)
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version"
(cd "$here/helm" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/helm.tmp" helm.sh/helm/v4/cmd/helm)
mv "$dir/helm.tmp" "$dir/helm"
echo "helm: built in $(( $(date +%s) - start ))s" >&2
echo "$dir/helm"
