#!/usr/bin/env bash
# Runs the Durable Streams conformance suite against the real broker:
# builds cmd/broker, starts it on a free loopback port with a temporary data
# directory and a 500 ms long-poll timeout, runs the suite (vitest), stops
# the broker. Extra arguments go to vitest, e.g. a filter:
#
#   test/conformance/run.sh -t "Fork - Creation"
#
# Needs Go, Node 20 and the packages of package-lock.json (npm ci here, or
# `make conformance`, which runs both).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
long_poll_ms="${CONFORMANCE_LONG_POLL_MS:-500}"

if [ ! -d "$here/node_modules/@durable-streams/server-conformance-tests" ]; then
	echo "conformance: node_modules missing: run 'npm ci' in $here (or 'make conformance')" >&2
	exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/picomq-conformance.XXXXXX")"
broker_pid=""
cleanup() {
	if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
		kill -TERM "$broker_pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$broker_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "conformance: building cmd/broker"
(cd "$root" && go build -o "$tmp/broker" ./cmd/broker)

mkdir -m 0700 "$tmp/data"
"$tmp/broker" --listen 127.0.0.1:0 --data-dir "$tmp/data" --node-id conformance \
	--long-poll-timeout "${long_poll_ms}ms" --log-format json --log-level info \
	--shutdown-timeout 2s >"$tmp/broker.out" 2>"$tmp/broker.log" &
broker_pid=$!

# The broker logs the address it listens on (port 0: the kernel's choice).
addr=""
for _ in $(seq 300); do
	addr="$(grep -o '"msg":"listening"[^}]*"addr":"[^"]*"' "$tmp/broker.log" 2>/dev/null | sed 's/.*"addr":"\([^"]*\)"/\1/' | head -n1 || true)"
	[ -n "$addr" ] && break
	if ! kill -0 "$broker_pid" 2>/dev/null; then
		echo "conformance: the broker exited:" >&2
		cat "$tmp/broker.log" >&2
		exit 1
	fi
	sleep 0.1
done
if [ -z "$addr" ]; then
	echo "conformance: the broker did not log its address:" >&2
	cat "$tmp/broker.log" >&2
	exit 1
fi
url="http://$addr"
if command -v curl >/dev/null; then
	for _ in $(seq 100); do
		curl -fsS "$url/healthz" >/dev/null 2>&1 && break
		sleep 0.1
	done
fi
echo "conformance: broker at $url (data $tmp/data, long-poll timeout ${long_poll_ms}ms)"

status=0
(cd "$here" && CONFORMANCE_TEST_URL="$url" CONFORMANCE_LONG_POLL_MS="$long_poll_ms" \
	npx --no-install vitest run --reporter=default --reporter=json --outputFile="$tmp/results.json" "$@") || status=$?

if [ -f "$tmp/results.json" ]; then
	node -e '
		const r = require(process.argv[1]);
		const skipped = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
		console.log(`conformance: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
	' "$tmp/results.json"
fi
if [ "$status" -ne 0 ]; then
	echo "conformance: broker log (warnings and errors):" >&2
	tail -n 50 "$tmp/broker.log" >&2 || true
fi
exit "$status"
