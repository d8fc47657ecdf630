#!/usr/bin/env bash
# Runs every go test -fuzz target of the module for FUZZTIME each (default
# 3s), one at a time (go test -fuzz takes one target per run). What a
# fuzzer finds is written to the package's testdata/fuzz/<Target>/, where
# go test picks it up as a regression seed from then on: commit it with
# the fix.
#
# Go before 1.27 may fail a target with a bare "context deadline exceeded"
# as its -fuzztime ends (go.dev/issue/75804: the coordinator's deadline
# races a worker still running an input; more likely on a loaded machine).
# Such a failure wrote no input: the target is run once more, and fails
# the run only if it fails again. A failure that wrote an input always
# fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
total=0
inputs() { ls "$1" 2>/dev/null | sort || true; }
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  grep -l '^func Fuzz' "$dir"/*_test.go >/dev/null 2>&1 || continue
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
    corpus="$dir/testdata/fuzz/$target"
    for try in 1 2; do
      echo "== $pkg $target ($fuzztime)"
      before=$(inputs "$corpus")
      if out=$(go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel "${FUZZ_PARALLEL:-2}" 2>&1); then
        echo "$out" | grep -E '^fuzz: elapsed' | tail -1
        break
      fi
      if [[ $try == 1 && "$(inputs "$corpus")" == "$before" ]] &&
        grep -q '^    context deadline exceeded$' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
        echo "$out" | tail -4
        echo "-- $target: a deadline failure with no input written (go.dev/issue/75804): once more"
        continue
      fi
      echo "$out"
      exit 1
    done
    total=$((total + 1))
  done
done
echo "== $total fuzz targets ran for $fuzztime each"
