#!/bin/sh
# test-busy.sh runs `make test` beside 2 x nproc busy loops, as on a
# machine other work keeps busy: the suite must pass there too (limits
# count work, tests wait for conditions rather than for time). Arguments
# go to make instead (scripts/test-busy.sh test-unit, say).
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- test
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
for _ in $(seq $((2 * $(nproc)))); do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
done
make "$@"
