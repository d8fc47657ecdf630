#!/usr/bin/env bash
# Chromium for the browser test (test/browser): Debian's package, installed
# with apt-get when no Chromium is on PATH and this runs as root. Without
# it the browser test skips — unless CI=true or PICOMQ_REQUIRE_BROWSER=1,
# where it fails.
#
#   hack/chromium.sh install
set -euo pipefail

have() {
	for b in chromium chromium-browser google-chrome google-chrome-stable; do
		command -v "$b" >/dev/null 2>&1 && return 0
	done
	[[ -n "${PICOMQ_CHROMIUM:-}" && -x "${PICOMQ_CHROMIUM}" ]]
}

case "${1:-}" in
install)
	if have; then
		exit 0
	fi
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		echo "chromium.sh: installing Debian's chromium for the browser test" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	else
		echo "chromium.sh: no Chromium, and no root or apt-get to install it: the browser test will skip" >&2
	fi
	;;
*)
	echo "usage: hack/chromium.sh install" >&2
	exit 2
	;;
esac
