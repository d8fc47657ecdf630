#!/usr/bin/env bash
# Puts prometheus and promtool in a per-machine cache folder and prints that
# folder: ${PICOMQ_CACHE:-~/.cache/picomq}/prometheus/<version>-<os>-<arch>/.
# Both are built once from the Prometheus Go module (its ./cmd/prometheus
# and ./cmd/promtool, built in the module's own folder so that its go.mod
# and go.sum pin every dependency), without the builtinassets tag: the web
# UI is not needed, the HTTP API is. The alert rules' tests
# (config/prometheus, test/monitoring) and the e2e alert test use them.
# About 9 min on 2 cores the first time (modules downloaded, cold build
# cache); seconds after. Progress goes to stderr; stdout
# carries only the path.
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
os=$(go env GOOS)
arch=$(go env GOARCH)
cache=${PICOMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/picomq}
dir="$cache/prometheus/$PROMETHEUS_VERSION-$os-$arch"

log() { echo "prometheus: $*" >&2; }

complete() { [ -x "$1/prometheus" ] && [ -x "$1/promtool" ]; }

if complete "$dir"; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"

src=$(go mod download -json "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { log "no source for github.com/prometheus/prometheus@$PROMETHEUS_VERSION"; exit 1; }

export CGO_ENABLED=0
# The module's go.work names folders its module zip does not hold.
export GOWORK=off
ldflags="-X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}"
for bin in promtool prometheus; do
  [ -x "$dir/$bin" ] && continue
  log "building $bin $PROMETHEUS_VERSION (once per machine)"
  (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$dir/$bin.tmp.$$" "./cmd/$bin") && mv "$dir/$bin.tmp.$$" "$dir/$bin"
done
complete "$dir" || { log "no prometheus or promtool in $dir"; exit 1; }
echo "$dir"
