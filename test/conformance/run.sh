#!/usr/bin/env bash
# Runs the Durable Streams conformance suite against the real broker:
# builds cmd/broker, starts it on a free loopback port with a temporary data
# directory and a 500 ms long-poll timeout, runs the suite (vitest), stops
# the broker. Extra arguments go to vitest, e.g. a filter:
#
#   test/conformance/run.sh -t "Fork - Creation"
#
# Through a cluster: `--cluster N` (or CONFORMANCE_BROKERS=N, N >= 2)
# starts N brokers as one cluster on loopback instead (test/conformance/
# cluster: envtest's kube-apiserver for the slot Leases, R=2), drains the
# last broker of its slots so that it owns none of the streams, and runs
# the suite against that broker: every request is proxied to an owner.
#
#   test/conformance/run.sh --cluster 3 -t "Long-poll"
#
# CONFORMANCE_KEEP=1 keeps the temporary folder (data, broker logs) and
# says where it is.
#
# Needs Go, Node 20 and the packages of package-lock.json (npm ci here, or
# `make conformance`, which runs both); the cluster mode also needs
# envtest's binaries (KUBEBUILDER_ASSETS, found with hack/envtest-assets.sh
# when unset).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
long_poll_ms="${CONFORMANCE_LONG_POLL_MS:-500}"
brokers="${CONFORMANCE_BROKERS:-1}"
if [ "${1:-}" = "--cluster" ]; then
	brokers="${2:?--cluster needs a broker count}"
	shift 2
fi
case "$brokers" in
'' | *[!0-9]*)
	echo "conformance: broker count '$brokers' is not a number" >&2
	exit 64
	;;
esac
label="conformance"
if [ "$brokers" -gt 1 ]; then
	label="conformance-cluster"
fi

if [ ! -d "$here/node_modules/@durable-streams/server-conformance-tests" ]; then
	echo "$label: node_modules missing: run 'npm ci' in $here (or 'make conformance')" >&2
	exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/picomq-conformance.XXXXXX")"
broker_pid=""
cluster_pid=""
stop_pid() {
	local pid="$1" wait_s="$2"
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq "$((wait_s * 10))"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
	if [ -n "$broker_pid" ]; then
		stop_pid "$broker_pid" 5
	fi
	if [ -n "$cluster_pid" ]; then
		# The end of its standard input stops the cluster (brokers and
		# apiserver); SIGTERM if it has not stopped after 30 s.
		exec 3>&- || true
		for _ in $(seq 300); do kill -0 "$cluster_pid" 2>/dev/null || break; sleep 0.1; done
		stop_pid "$cluster_pid" 10
	fi
	[ -n "${CONFORMANCE_KEEP:-}" ] && { echo "kept $tmp" >&2; return; }
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "$label: building cmd/broker"
(cd "$root" && go build -o "$tmp/broker" ./cmd/broker)

if [ "$brokers" -gt 1 ]; then
	if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
		KUBEBUILDER_ASSETS="$("$root/hack/envtest-assets.sh")"
		export KUBEBUILDER_ASSETS
	fi
	echo "$label: building test/conformance/cluster"
	(cd "$root" && go build -o "$tmp/conformance-cluster" ./test/conformance/cluster)
	mkdir -m 0700 "$tmp/cluster"
	mkfifo "$tmp/ctl"
	PICOMQ_BROKER_BIN="$tmp/broker" "$tmp/conformance-cluster" -brokers "$brokers" -work "$tmp/cluster" \
		-url-file "$tmp/url" -long-poll-timeout "${long_poll_ms}ms" \
		<"$tmp/ctl" >"$tmp/cluster.out" 2>"$tmp/cluster.log" &
	cluster_pid=$!
	exec 3>"$tmp/ctl" # held open: closing it stops the cluster
	url=""
	for _ in $(seq 1800); do
		if [ -s "$tmp/url" ]; then
			url="$(head -n1 "$tmp/url")"
			break
		fi
		if ! kill -0 "$cluster_pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	if [ -z "$url" ]; then
		echo "$label: the cluster did not start:" >&2
		tail -n 100 "$tmp/cluster.log" >&2 || true
		exit 1
	fi
	tail -n 1 "$tmp/cluster.log"
	echo "$label: $brokers brokers, requests sent to the drained $url (long-poll timeout ${long_poll_ms}ms)"
else
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
			echo "$label: the broker exited:" >&2
			cat "$tmp/broker.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	if [ -z "$addr" ]; then
		echo "$label: the broker did not log its address:" >&2
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
	echo "$label: broker at $url (data $tmp/data, long-poll timeout ${long_poll_ms}ms)"
fi

status=0
(cd "$here" && CONFORMANCE_TEST_URL="$url" CONFORMANCE_LONG_POLL_MS="$long_poll_ms" \
	npx --no-install vitest run --reporter=default --reporter=json --outputFile="$tmp/results.json" "$@") || status=$?

if [ -f "$tmp/results.json" ]; then
	node -e '
		const r = require(process.argv[1]);
		const skipped = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
		console.log(`${process.argv[2]}: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
	' "$tmp/results.json" "$label"
fi
if [ "$status" -ne 0 ]; then
	echo "$label: broker logs (warnings and errors):" >&2
	if [ -n "$cluster_pid" ]; then
		for log in "$tmp"/cluster/harness-*/broker-*/broker.log; do
			[ -f "$log" ] || continue
			echo "== $(basename "$(dirname "$log")")" >&2
			grep -v '"level":"INFO"' "$log" | tail -n 30 >&2 || true
		done
	else
		tail -n 50 "$tmp/broker.log" >&2 || true
	fi
fi
exit "$status"
