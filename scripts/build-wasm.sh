#!/usr/bin/env bash
# Builds the browser replica (crate recached-wasm) for wasm32-unknown-unknown and copies it to
# <target>/www/recached.wasm, where `recached fanout` serves it by default (override with
# `recached fanout --wasm PATH` or RECACHED_WASM). Prints the path. Idempotent and incremental.
#
# No wasm-bindgen: the module exports a small C ABI (wasm/src/abi.rs) that wasm/www/recached.js
# drives directly, so nothing beyond rustup's wasm32 target is needed (see docs/browser-protocol.md).
# Size: opt-level "s", LTO and no debug info for this build only (the workspace release profile
# keeps its settings for the native binaries).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    rustup target add wasm32-unknown-unknown >&2
fi
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_DEBUG=0 \
CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
    cargo build --release -p recached-wasm --target wasm32-unknown-unknown >&2
mkdir -p "$TARGET_DIR/www"
OUT="$TARGET_DIR/www/recached.wasm"
cp "$TARGET_DIR/wasm32-unknown-unknown/release/recached_wasm.wasm" "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
