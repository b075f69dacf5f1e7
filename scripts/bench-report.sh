#!/usr/bin/env bash
# Regenerates docs/BENCHMARKS.md and docs/bench/*.svg from bench/results/*.json (issue 9).
# Nothing in BENCHMARKS.md is typed by hand: change the scripts or re-run them, then this.
#
#   scripts/bench-report.sh [RESULTS_DIR]
#
# Environment: RECACHED_BENCH_BIN (default: builds target/release/recached-bench, the benchmark
# tools' binary).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
if [ -z "${RECACHED_BENCH_BIN:-}" ]; then
    cargo build --release -p recached-bench >&2
    RECACHED_BENCH_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/recached-bench"
fi
rm -f docs/bench/*.svg
"$RECACHED_BENCH_BIN" report --results "${1:-bench/results}" --out docs/BENCHMARKS.md --svg-dir docs/bench
