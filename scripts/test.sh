#!/usr/bin/env bash
# THE test command of recached (CI runs it through .ci/run). From any directory:
#
#   scripts/test.sh
#
# 1. Installs what the tests need, only if missing (idempotent; root or sudo for apt-get):
#    redis-server, redis-cli, redis-benchmark (differential and end-to-end tests) and
#    nutcracker (benchmarks), and the wasm32-unknown-unknown target.
# 2. Builds the release binary and exports RECACHED_BIN=<abs path> for the tests in tests/.
# 3. Runs every test of the workspace (`cargo test --workspace`).
# 4. Checks that the pure crates build for wasm32 (the browser replica runs that code).
#
# Environment: CARGO_TEST_ARGS (extra args after `cargo test --workspace`, e.g. "-- --nocapture").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
start=$(date +%s)
step() { printf '\n==> [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

step "tools"
missing=()
command -v redis-server    >/dev/null || missing+=(redis-server)
command -v redis-cli       >/dev/null || missing+=(redis-tools)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v nutcracker      >/dev/null || missing+=(nutcracker)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        $(printf '%s\n' "${missing[@]}" | sort -u)
    # The Debian package starts a redis-server on 6379 as a service; the tests use their own
    # servers on free ports and never touch it.
fi
redis-server --version
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    echo "installing the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi
cargo --version

step "cargo build --release -p recached"
cargo build --release -p recached
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
export RECACHED_BIN="$TARGET_DIR/release/recached"
test -x "$RECACHED_BIN"
echo "RECACHED_BIN=$RECACHED_BIN"

step "cargo test --workspace"
# shellcheck disable=SC2086 # CARGO_TEST_ARGS is split on purpose
cargo test --workspace ${CARGO_TEST_ARGS:-}

step "wasm32 build of the pure crates"
cargo build -p engine-core -p resp -p recached-wasm --target wasm32-unknown-unknown

step "all tests passed"
