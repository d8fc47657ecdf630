#!/usr/bin/env bash
# failures.sh COMMAND... runs a test command and, when it fails, prints its
# failed tests' reports once more at the very end of the output.
#
# Why: a failing suite prints its report first and then the logs it dumps
# (the e2e suite's brokers and stack: thousands of lines), and a CI log is
# often read from its tail — which then shows the logs but not which test
# failed, nor why.
set -uo pipefail

log=$(mktemp)
trap 'rm -f "$log"' EXIT

"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo
  echo "=== failures of: $* (exit $status; repeated from the output above)"
  # A failed test's line and the indented lines under it (its t.Error and
  # t.Log output), each package's FAIL line, and any panic or timeout.
  awk '
    /^[[:space:]]*--- FAIL/ { inside = 1; n = 0; print; next }
    inside && /^[[:space:]]+/ && n < 30 { print; n++; next }
    { inside = 0 }
    /^(FAIL|panic:|--- FAIL)/ { print }
  ' "$log" | tail -n 200
fi
exit "$status"
