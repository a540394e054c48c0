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

# Debian packages, one line per reason.
DEB_PKGS="
clang lld wasi-libc libclang-rt-14-dev-wasm32
wabt binaryen
"

# Commands and files whose presence means the packages above are installed.
have_all() {
	for c in clang wasm-ld wat2wasm wasm-opt; do
		command -v "$c" >/dev/null 2>&1 || return 1
	done
	[ -e /usr/lib/wasm32-wasi/libc.a ] || [ -e /usr/lib/wasm32-wasip1/libc.a ] || return 1
	return 0
}

if [ "${FORCE:-}" != 1 ] && have_all; then
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
