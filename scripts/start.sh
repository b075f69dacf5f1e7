#!/usr/bin/env bash
# The README's start command: builds what the fleet serves and starts it with the default config
# (configs/recached.toml's defaults; flags are passed through, e.g. `scripts/start.sh --engines 2`).
#
# 1. scripts/build-wasm.sh: the browser replica's WebAssembly module, which the fan-out serves
#    from target/www/recached.wasm (adds the wasm32-unknown-unknown target if missing);
# 2. `cargo run --release -- start`: the supervisor in the foreground (Ctrl-C stops the fleet).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build-wasm.sh >/dev/null
exec cargo run --release -p recached -- start "$@"
