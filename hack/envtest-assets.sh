#!/usr/bin/env bash
# Puts kube-apiserver and etcd for envtest in a per-machine cache folder and
# prints that folder (for KUBEBUILDER_ASSETS). Tries, in order:
#   1. the cache: ${PICOMQ_CACHE:-~/.cache/picomq}/k8s/<version>-<os>-<arch>/
#   2. setup-envtest's download (works on machines that reach the internet)
#   3. building both from Go modules (hack/controlplane/*), ~10 min on 2 cores
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.3}
SETUP_ENVTEST_VERSION=${SETUP_ENVTEST_VERSION:-v0.25.1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
os=$(go env GOOS)
arch=$(go env GOARCH)
cache=${PICOMQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/picomq}
dir="$cache/k8s/$K8S_VERSION-$os-$arch"

log() { echo "envtest-assets: $*" >&2; }

complete() { [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ]; }

if complete "$dir"; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"

# 2. setup-envtest download, bounded so that a closed network fails fast.
if [ -z "${PICOMQ_SKIP_DOWNLOAD:-}" ]; then
  log "trying setup-envtest download of $K8S_VERSION"
  tmp=$(mktemp -d)
  if timeout 120 go run "sigs.k8s.io/controller-runtime/tools/setup-envtest@$SETUP_ENVTEST_VERSION" \
      use "$K8S_VERSION" --bin-dir "$tmp" -p path >"$tmp/path" 2>"$tmp/err"; then
    src=$(cat "$tmp/path")
    if complete "$src"; then
      cp "$src/kube-apiserver" "$src/etcd" "$dir/"
      [ -x "$src/kubectl" ] && cp "$src/kubectl" "$dir/"
      rm -rf "$tmp"
      echo "$dir"
      exit 0
    fi
  fi
  log "download unavailable ($(tail -n 1 "$tmp/err" 2>/dev/null)); building from Go modules"
  rm -rf "$tmp"
fi

# 3. Build from Go modules. CGO off and -trimpath, as the release binaries.
export CGO_ENABLED=0
if [ ! -x "$dir/etcd" ]; then
  log "building etcd v$ETCD_VERSION (about 1.5 min)"
  (cd "$here/controlplane/etcd" && go build -trimpath -o "$dir/etcd.tmp" . && mv "$dir/etcd.tmp" "$dir/etcd")
fi
if [ ! -x "$dir/kube-apiserver" ]; then
  log "building kube-apiserver v$K8S_VERSION (about 9 min on 2 cores)"
  major=${K8S_VERSION%%.*}
  minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  ldflags="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
  (cd "$here/controlplane/kube-apiserver" && go build -trimpath -ldflags "$ldflags" -o "$dir/kube-apiserver.tmp" . \
     && mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver")
fi
complete "$dir" || { log "build did not produce both binaries in $dir"; exit 1; }
echo "$dir"
