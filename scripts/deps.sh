#!/bin/sh
# deps.sh installs what building and testing compactd needs on Debian 12
# (bookworm): the single list of system and npm packages. `make deps` runs
# it; .ci/run runs it with FORCE=1 so every CI run executes the install.
#
#   scripts/deps.sh           install only what is missing
#   FORCE=1 scripts/deps.sh   run the install commands even when all is present
#
# As root it calls apt-get directly; as another user it uses sudo.
set -eu

cd "$(dirname "$0")/.."

# Debian packages, one line per reason.
DEB_PKGS="
clang lld wasi-libc libclang-rt-14-dev-wasm32
wabt binaryen
chromium
python3 python3-pytest python3-setuptools python3-pip
"
# The status page's browser test: chromium (above).
# The Python client's tests (pytest) and its offline install (setuptools, pip).
# The TypeScript client's tests: node ≥ 18 and npm. A machine that has a node
# (e.g. from NodeSource, with its own npm) keeps it; Debian's otherwise.
command -v node >/dev/null 2>&1 || DEB_PKGS="$DEB_PKGS nodejs npm"

# Commands and files whose presence means the packages above are installed.
have_all() {
	for c in clang wasm-ld wat2wasm wasm-opt; do
		command -v "$c" >/dev/null 2>&1 || return 1
	done
	[ -e /usr/lib/wasm32-wasi/libc.a ] || [ -e /usr/lib/wasm32-wasip1/libc.a ] || return 1
	command -v chromium >/dev/null 2>&1 || return 1
	/usr/bin/python3 -c 'import pytest, setuptools, pip' >/dev/null 2>&1 || return 1
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
	return 0
}

# npm_deps installs the TypeScript client's pinned dev dependencies
# (typescript, @types/node: clients/ts/package-lock.json) without running
# package scripts.
npm_deps() {
	echo "deps: npm ci in clients/ts"
	(cd clients/ts && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
}

if [ "${FORCE:-}" != 1 ] && have_all; then
	[ -e clients/ts/node_modules/typescript/package.json ] || npm_deps
	exit 0
fi

if [ "$(id -u)" = 0 ]; then
	as_root() { env DEBIAN_FRONTEND=noninteractive "$@"; }
elif command -v sudo >/dev/null 2>&1; then
	as_root() { sudo env DEBIAN_FRONTEND=noninteractive "$@"; }
else
	echo "deps: not root and no sudo; install these Debian packages by hand:" $DEB_PKGS >&2
	exit 1
fi

echo "deps: installing Debian packages:" $DEB_PKGS
as_root apt-get update -qq
# shellcheck disable=SC2086 # the list is split on purpose
as_root apt-get install -y -qq --no-install-recommends $DEB_PKGS >/dev/null
have_all || { echo "deps: packages installed but a tool is still missing" >&2; exit 1; }
npm_deps
