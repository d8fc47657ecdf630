#!/usr/bin/env bash
# Runs every go test -fuzz target of the module for FUZZTIME each (default
# 3s), one at a time (go test -fuzz takes one target per run). What a
# fuzzer finds is written to the package's testdata/fuzz/<Target>/, where
# go test picks it up as a regression seed from then on: commit it with
# the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
total=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  grep -l '^func Fuzz' "$dir"/*_test.go >/dev/null 2>&1 || continue
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
    echo "== $pkg $target ($fuzztime)"
    out=$(go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel "${FUZZ_PARALLEL:-2}" 2>&1) || { echo "$out"; exit 1; }
    echo "$out" | grep -E '^fuzz: elapsed' | tail -1
    total=$((total + 1))
  done
done
echo "== $total fuzz targets ran for $fuzztime each"
