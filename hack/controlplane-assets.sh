#!/usr/bin/env bash
# Puts the whole control plane for the local stack (issue 20: `picomq dev`)
# in the per-machine cache folder of hack/envtest-assets.sh and prints that
# folder: etcd and kube-apiserver (through envtest-assets.sh), then
# kube-controller-manager, kube-scheduler and kubectl (unless a download
# brought one), built from Go modules (hack/controlplane/*) once per
# machine — about 4.5 min on 2 cores with kube-apiserver's build cache warm.
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$("$here/envtest-assets.sh")

log() { echo "controlplane-assets: $*" >&2; }

export CGO_ENABLED=0
major=${K8S_VERSION%%.*}
minor=${K8S_VERSION#*.}; minor=${minor%%.*}
ldflags="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION"
ldflags+=" -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
for bin in kube-controller-manager kube-scheduler kubectl; do
  [ -x "$dir/$bin" ] && continue
  log "building $bin v$K8S_VERSION"
  (cd "$here/controlplane/$bin" && go build -trimpath -ldflags "$ldflags" -o "$dir/$bin.tmp" . && mv "$dir/$bin.tmp" "$dir/$bin")
done
for bin in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [ -x "$dir/$bin" ] || { log "no $bin in $dir"; exit 1; }
done
echo "$dir"
