#!/bin/sh
# deps.sh installs what building and testing compactd needs on Debian 12
# (bookworm): the single list of system and npm packages. `make deps` runs
# it (so do `make run` and `make test`); .ci/run runs it with FORCE=1 so
# every CI run executes the install.
#
#   scripts/deps.sh           install only what is missing
#   FORCE=1 scripts/deps.sh   run the install commands even when all is present
#
# As root it calls apt-get directly; as another user it uses sudo (which
# asks for a password if yours needs one). It waits for another apt or
# dpkg (unattended-upgrades, say) to finish rather than failing on its lock,
# and finishes an install an earlier run left halfway.
set -eu

cd "$(dirname "$0")/.."

# Debian packages, one line per reason.
DEB_PKGS="
clang lld wasi-libc libclang-rt-14-dev-wasm32
wabt binaryen
gcc libc6-dev
curl
chromium
python3 python3-pytest python3-pip python3-venv python3-httpx
rustc cargo libstd-rust-dev-wasm32 librust-serde-json-dev
redis-server
"
# clang lld wasi-libc libclang-rt-14-dev-wasm32: C plugins (plugins/lastn, the hostile test plugins)
# wabt binaryen: wat2wasm and wasm-opt for hand-written test modules
# gcc libc6-dev: cgo, which `go test -race` needs
# curl: the examples of README.md and docs/, which readme_test.go runs
# chromium: the status page's browser test
# python3-*: the Python client's tests (pytest), its install with pip, and the
#   test that installs it in a fresh venv (python3-venv: ensurepip); python3-httpx:
#   the Python quickstart's Unix-socket transport (docs/quickstarts.md, run by readme_test.go)
# rustc cargo libstd-rust-dev-wasm32 librust-serde-json-dev: the Rust kit (kits/rust), offline
# redis-server: the shared store's tests (internal/store/redisstore) start their
#   own servers, standalone and a 3-node cluster

# Node.js and npm run the TypeScript client's tests (node >= 18) and the
# proxy's tests with the official provider SDKs. A machine that already
# has a node (e.g. from NodeSource, with its own npm) keeps it; Debian's
# is installed otherwise.
NODE_PKGS="nodejs npm"

# npm projects, one line per reason: each has a committed package-lock.json
# and gets `npm ci` (exact pinned versions; node_modules is not tracked).
NPM_DIRS="
clients/ts
kits/assemblyscript
internal/proxy/sdktest/testdata
internal/proxy/clienttest/testdata
"
# clients/ts: the TypeScript client's dev dependencies (typescript, @types/node)
# kits/assemblyscript: the AssemblyScript compiler and JSON library; `npm ci`
#   fills npm's cache, so projects from `compactd new assemblyscript` install
#   them without a download
# internal/proxy/sdktest/testdata: the official openai and @anthropic-ai/sdk SDKs, run against the proxy
# internal/proxy/clienttest/testdata: the clients agents use (openai, @anthropic-ai/sdk, the Vercel AI
#   SDK, LangChain JS, @mistralai/mistralai), each driving a long session through the proxy; pinned
#   to the newest releases that support node 20 (ai 7, @langchain/openai >= 1.5.9 and openai 7 want node 22)

# Commands (or paths) whose presence means the Debian packages are installed.
TOOLS="clang wasm-ld wat2wasm wasm-opt gcc curl chromium node npm redis-server"

# How long to wait for another package manager's lock, in seconds.
LOCK_WAIT=${LOCK_WAIT:-600}

say() { printf 'deps: %s\n' "$*" >&2; }

debs_ok() {
	for c in $TOOLS; do
		command -v "$c" >/dev/null 2>&1 || return 1
	done
	[ -e /usr/lib/wasm32-wasi/libc.a ] || [ -e /usr/lib/wasm32-wasip1/libc.a ] || return 1
	[ -e /usr/include/stdio.h ] || return 1
	[ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/wasm32-wasi ] || return 1
	ls /usr/share/cargo/registry 2>/dev/null | grep -q '^serde_json-' || return 1
	/usr/bin/python3 -c 'import pytest, pip, ensurepip, httpx' >/dev/null 2>&1 || return 1
	return 0
}

# npm ci writes node_modules/.package-lock.json; one older than the lock
# file means the pins changed.
npm_ok() {
	for d in $NPM_DIRS; do
		[ "$d/node_modules/.package-lock.json" -nt "$d/package-lock.json" ] || return 1
	done
	return 0
}

# apt_get runs apt-get as root, waiting up to LOCK_WAIT seconds for a lock
# another apt or dpkg holds. DPkg::Lock::Timeout covers dpkg's lock; the
# lists lock that `apt-get update` takes is retried here.
apt_get() {
	waited=0
	repaired=""
	while :; do
		out=$(as_root apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT" "$@" 2>&1) && { [ -z "$out" ] || printf '%s\n' "$out"; return 0; }
		rc=$?
		case "$out" in
		*"dpkg was interrupted"*)
			# An earlier install was killed halfway (Ctrl-C during make
			# deps, say); apt refuses to go on until dpkg finishes it.
			if [ -n "$repaired" ]; then
				printf '%s\n' "$out" >&2
				return "$rc"
			fi
			say "an earlier package install was interrupted; finishing it first (dpkg --configure -a)"
			as_root dpkg --configure -a >/dev/null
			repaired=1
			;;
		*"Could not get lock"* | *"Unable to lock"* | *"is another process using it"*)
			if [ "$waited" -ge "$LOCK_WAIT" ]; then
				printf '%s\n' "$out" >&2
				say "another apt or dpkg still holds its lock after ${LOCK_WAIT}s; wait for it to finish (ps aux | grep -E 'apt|dpkg') and run 'make deps' again"
				return "$rc"
			fi
			[ "$waited" -gt 0 ] || say "another apt or dpkg holds its lock (unattended-upgrades?); waiting up to ${LOCK_WAIT}s"
			sleep 5
			waited=$((waited + 5))
			;;
		*)
			printf '%s\n' "$out" >&2
			say "apt-get $* failed (exit $rc)"
			return "$rc"
			;;
		esac
	done
}

install_debs() {
	# shellcheck disable=SC2086 # the list is split on purpose
	pkgs=$(echo $DEB_PKGS)
	command -v node >/dev/null 2>&1 || pkgs="$pkgs $NODE_PKGS"
	if ! command -v apt-get >/dev/null 2>&1; then
		say "apt-get not found: this script installs Debian 12 packages."
		say "On another system install the equivalents of: $pkgs"
		exit 1
	fi
	if [ "$(id -u)" = 0 ]; then
		as_root() { env DEBIAN_FRONTEND=noninteractive "$@"; }
	elif command -v sudo >/dev/null 2>&1; then
		say "not root: installing with sudo (it may ask for your password)"
		as_root() { sudo env DEBIAN_FRONTEND=noninteractive "$@"; }
	else
		say "not root and sudo is not installed. As root, run:"
		say "  apt-get update && apt-get install -y --no-install-recommends $pkgs"
		say "or install sudo and give $(id -un) the right to use it, then run 'make deps' again."
		exit 1
	fi
	say "installing Debian packages: $pkgs"
	apt_get update -qq
	# shellcheck disable=SC2086
	apt_get install -y -qq --no-install-recommends $pkgs >/dev/null
	if ! debs_ok; then
		say "the packages installed, but a tool is still missing:"
		for c in $TOOLS; do
			command -v "$c" >/dev/null 2>&1 || say "  $c not on PATH ($PATH)"
		done
		exit 1
	fi
}

install_npm() {
	for d in $NPM_DIRS; do
		say "npm ci in $d"
		(cd "$d" && npm ci --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error) || { say "npm ci failed in $d"; exit 1; }
	done
	npm_ok || { say "npm ci ran but a project is still not installed"; exit 1; }
}

if [ "${FORCE:-}" = 1 ] || ! debs_ok; then
	install_debs
fi
if [ "${FORCE:-}" = 1 ] || ! npm_ok; then
	install_npm
fi
