#!/usr/bin/env bash
# The README's start command: builds what the fleet serves and starts it with the default config
# (configs/recached.toml's defaults; flags are passed through, e.g. `scripts/start.sh --engines 2`).
#
# 1. scripts/build-wasm.sh: adds the wasm32-unknown-unknown target if missing, which the
#    binary's build needs to compile the browser replica's module in (wasm/www/build.rs), and
#    leaves the module in target/www/recached.wasm too (served if the binary has none);
# 2. `cargo run --release -- start`: the supervisor in the foreground (Ctrl-C stops the fleet).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build-wasm.sh >/dev/null
exec cargo run --release -p recached -- start "$@"
