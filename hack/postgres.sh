#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: a fresh cluster in a temporary
# directory, on a free loopback port, run by a non-root account (initdb
# refuses root), with fsync off. Nothing outside its directory is touched,
# except installing the server when it is missing.
#
#   hack/postgres.sh install          install Debian's postgresql when no server binary is found
#   hack/postgres.sh start            start a cluster; prints `export PICOMQ_TEST_POSTGRES_URL=...`
#                                     and the stop command (eval "$(hack/postgres.sh start)")
#   hack/postgres.sh stop DIR         stop the cluster in DIR and remove DIR
#   hack/postgres.sh run -- CMD ...   start, run CMD with PICOMQ_TEST_POSTGRES_URL set, stop;
#                                     exits with CMD's status
#
# `run` uses PICOMQ_TEST_POSTGRES_URL as it is when it is already set. When no
# server can be had (no binaries and no root to install them), `run` runs CMD
# anyway and the PostgreSQL tests skip — unless CI=true or
# PICOMQ_REQUIRE_POSTGRES=1, where it fails (and so would the tests).
#
# Environment: PICOMQ_PG_USER (the account when run as root; default nobody),
# PICOMQ_PG_BINDIR (the server's bin directory), PICOMQ_PG_DURABLE=1 (keep
# fsync and synchronous_commit on, for benchmarks), TMPDIR.
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

bindir() {
	if [[ -n "${PICOMQ_PG_BINDIR:-}" ]]; then
		[[ -x "$PICOMQ_PG_BINDIR/initdb" ]] || { log "no initdb in PICOMQ_PG_BINDIR=$PICOMQ_PG_BINDIR"; return 1; }
		echo "$PICOMQ_PG_BINDIR"
		return
	fi
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [[ -n "$d" && -x "$d/initdb" ]]; then
		echo "$d"
		return
	fi
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
		return
	fi
	return 1
}

install() {
	if bindir >/dev/null; then
		log "server binaries in $(bindir)"
		return
	fi
	local sudo=()
	if [[ $EUID -ne 0 ]]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			log "PostgreSQL is not installed and installing it needs root"
			return 1
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "PostgreSQL is not installed and there is no apt-get to install it"
		return 1
	fi
	log "installing postgresql with apt-get"
	local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
	"${sudo[@]}" apt-get update -qq || return 1
	# postgresql-common first, then no cluster of the package's own (the
	# tests make theirs), as the official postgres image does, then the
	# server.
	"${apt[@]}" postgresql-common >/dev/null || return 1
	"${sudo[@]}" sed -ri 's/^#? *(create_main_cluster) .*$/\1 = false/' /etc/postgresql-common/createcluster.conf || return 1
	"${apt[@]}" postgresql >/dev/null || return 1
	bindir >/dev/null || { log "postgresql installed, but no initdb found"; return 1; }
	log "server binaries in $(bindir)"
}

# as runs a command as the cluster's account.
as() {
	if [[ $EUID -ne 0 ]]; then
		"$@"
	elif command -v runuser >/dev/null 2>&1; then
		runuser -u "$PG_USER" -- "$@"
	else
		su -s /bin/sh "$PG_USER" -c "$(printf '%q ' "$@")"
	fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start's callers test its status (`if ! out=$(start)`), which suspends
# set -e inside it: every step checks its own.
start() {
	install || return 1
	local bin dir port tries
	bin=$(bindir) || return 1
	PG_USER=${PICOMQ_PG_USER:-nobody}
	# /tmp rather than a TMPDIR the account may not be able to enter.
	dir=$(mktemp -d "${TMPDIR:-/tmp}/picomq-pg.XXXXXX") || return 1
	if [[ $EUID -eq 0 ]]; then
		if ! as test -x "$(dirname "$dir")"; then
			rmdir "$dir"
			dir=$(mktemp -d /tmp/picomq-pg.XXXXXX) || return 1
		fi
		chown "$PG_USER" "$dir" || { rm -rf "$dir"; return 1; }
	fi
	chmod 700 "$dir" || return 1
	as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; rm -rf "$dir"; return 1; }
	local opts="-c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c max_connections=200"
	if [[ "${PICOMQ_PG_DURABLE:-}" != 1 ]]; then
		opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	fi
	for tries in $(seq 1 20); do
		port=$(( (RANDOM * 32768 + RANDOM) % 30000 + 20000 ))
		port_in_use "$port" && continue
		if as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "-p $port $opts" start >/dev/null 2>&1; then
			echo "$port" >"$dir/port"
			log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port as $PG_USER, data in $dir"
			echo "export PICOMQ_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
			echo "# stop with: $0 stop $dir"
			return
		fi
		grep -qi "could not bind\|address already in use" "$dir/server.log" 2>/dev/null || { cat "$dir/server.log" >&2; break; }
	done
	log "could not start PostgreSQL (see above)"
	rm -rf "$dir"
	return 1
}

stop() {
	local dir=${1:?usage: postgres.sh stop DIR}
	[[ -f "$dir/data/PG_VERSION" ]] || { log "$dir holds no cluster"; return 1; }
	PG_USER=$(stat -c %U "$dir")
	as "$(bindir)/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || log "pg_ctl stop failed; removing $dir anyway"
	rm -rf "$dir"
}

run() {
	[[ "${1:-}" == "--" ]] && shift
	[[ $# -gt 0 ]] || { log "usage: postgres.sh run -- CMD ..."; return 64; }
	if [[ -n "${PICOMQ_TEST_POSTGRES_URL:-}" ]]; then
		exec "$@"
	fi
	local out
	if ! out=$(start); then
		if [[ "${CI:-}" == true || "${PICOMQ_REQUIRE_POSTGRES:-}" == 1 ]]; then
			log "CI=true or PICOMQ_REQUIRE_POSTGRES=1: the PostgreSQL tests need a server"
			return 1
		fi
		log "no PostgreSQL server: its tests will skip"
		exec "$@"
	fi
	eval "$(grep '^export ' <<<"$out")"
	RUN_DIR=$(sed -n 's/^# stop with: .* stop //p' <<<"$out")
	trap 'stop "$RUN_DIR"' EXIT
	trap 'exit 130' INT TERM
	local status=0
	"$@" || status=$?
	return "$status"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) shift; stop "$@" ;;
run) shift; run "$@" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 64
	;;
esac
