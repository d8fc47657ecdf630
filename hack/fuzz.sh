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
# Such a failure wrote no input: the target is run again, up to three
# times in all, and fails the run only if every try fails so (a slow
# target — FuzzWALRecovery, ~90 inputs a second — met it twice running on
# a loaded machine). A failure that wrote an input always fails the run.
#
# A slow target runs for a count of inputs instead: FuzzWALRecovery does
# ~90 a second, so a worker is most often mid-input when a -fuzztime
# deadline ends, and it failed so one run in three on a quiet machine; a
# count has no deadline to race (300 inputs: about 3 s here).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
declare -A bycount=([FuzzWALRecovery]=300x)
total=0
inputs() { ls "$1" 2>/dev/null | sort || true; }
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  grep -l '^func Fuzz' "$dir"/*_test.go >/dev/null 2>&1 || continue
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
    corpus="$dir/testdata/fuzz/$target"
    ft=${bycount[$target]:-$fuzztime}
    for try in 1 2 3; do
      echo "== $pkg $target ($ft)"
      before=$(inputs "$corpus")
      if out=$(go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$ft" -parallel "${FUZZ_PARALLEL:-2}" 2>&1); then
        echo "$out" | grep -E '^fuzz: elapsed' | tail -1
        break
      fi
      if [[ $try -lt 3 && "$(inputs "$corpus")" == "$before" ]] &&
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
echo "== $total fuzz targets ran for $fuzztime each (${!bycount[*]}: by count)"
