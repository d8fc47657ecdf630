#!/usr/bin/env bash
# Puts SeaweedFS's weed in a per-machine cache folder and prints that
# folder: ${PICOMQ_CACHE:-~/.cache/picomq}/seaweedfs/<version>-<os>-<arch>/.
# weed is built once from the SeaweedFS Go module (its ./weed, built in the
# module's own folder so that its go.mod and go.sum pin every dependency).
# The tiered-storage tests (test/s3server and its users) run it as a real
# S3-compatible server on loopback. About 8.5 min on 2 cores the first
# time (modules downloaded, cold build cache); instant after. Progress goes
# to stderr; stdout carries only the path.
set -euo pipefail

# SeaweedFS tags releases as 3.x/4.x without a Go-module major version, so
# the module is pinned by its pseudo-version (a commit).
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
os=$(go env GOOS)
arch=$(go env GOARCH)
cache=${PICOMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/picomq}
dir="$cache/seaweedfs/$SEAWEEDFS_VERSION-$os-$arch"

log() { echo "seaweedfs: $*" >&2; }

complete() { [ -x "$1/weed" ]; }

if complete "$dir"; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"

src=$(go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { log "no source for github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION"; exit 1; }

export CGO_ENABLED=0
# A go.work of the caller's (or the module's) must not replace its pins.
export GOWORK=off
log "building weed $SEAWEEDFS_VERSION (once per machine)"
# Built under a temporary name and moved: an interrupted build leaves no
# weed that complete() would take for a good one.
(cd "$src" && go build -trimpath -o "$dir/weed.tmp.$$" ./weed) && mv "$dir/weed.tmp.$$" "$dir/weed"
complete "$dir" || { log "no weed in $dir"; exit 1; }
echo "$dir"
