#!/usr/bin/env bash
# The whole benchmark suite of issue 9 in one command, then the generated report:
#
#   scripts/bench-all.sh                 # about 25 minutes on 2 cores with the defaults
#   BENCH_PRUNE=1 scripts/bench-all.sh   # also delete older runs' files from bench/results/
#
# Runs, under one run id (BENCH_RUN_ID, default the UTC time) and one release build of `recached`
# and `recached-bench` (RECACHED_BIN, RECACHED_BENCH_BIN override them):
#   scripts/bench-scaling.sh, scripts/bench-systems.sh, scripts/bench-scenarios.sh,
#   scripts/soak.sh, scripts/bench-memory-shapes.sh
# then scripts/bench-report.sh, which rewrites docs/BENCHMARKS.md and docs/bench/*.svg from
# bench/results/*.json (the newest run of each suite). A suite that fails stops the run (its
# log says why) and the report is not regenerated. Each suite's progress goes to
# $BENCH_LOGS/SUITE.log (default: a fresh folder under /tmp, printed at the start), which also
# holds the copies of the binaries the run used.
#
# Every setting of the individual scripts passes through (ENGINES, BENCH_ROUNDS, SYSTEMS_N,
# PIN/SERVER_CPUS/BENCH_CPUS, BENCH_RESULTS, …); BENCH_SUITES picks a subset, e.g.
# BENCH_SUITES="bench-scaling soak".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
# The server binary and the benchmark tools' binary (`recached-bench`), built in one cargo run
# unless given.
BUILD_PKGS=()
[ -n "${RECACHED_BIN:-}" ] || BUILD_PKGS+=(-p recached)
[ -n "${RECACHED_BENCH_BIN:-}" ] || BUILD_PKGS+=(-p recached-bench)
if [ "${#BUILD_PKGS[@]}" -gt 0 ]; then
    cargo build --release "${BUILD_PKGS[@]}" >&2
fi
RECACHED_BIN=${RECACHED_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/recached}
RECACHED_BENCH_BIN=${RECACHED_BENCH_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/recached-bench}
LOGS=${BENCH_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/recached-bench-all.XXXXXX")}
mkdir -p "$LOGS"
# Private copies: the shared target/ may be rebuilt while the suites run, and one run must
# measure one binary (and record it with one set of tools).
cp "$RECACHED_BIN" "$LOGS/recached"
cp "$RECACHED_BENCH_BIN" "$LOGS/recached-bench"
export RECACHED_BIN=$LOGS/recached
export RECACHED_BENCH_BIN=$LOGS/recached-bench
export BENCH_RUN_ID=${BENCH_RUN_ID:-$(date -u +%Y%m%dT%H%M%S)}
RESULTS=${BENCH_RESULTS:-$ROOT/bench/results}
case "$RESULTS" in /*) ;; *) RESULTS="$ROOT/$RESULTS" ;; esac
export BENCH_RESULTS=$RESULTS
SUITES=${BENCH_SUITES:-"bench-scaling bench-systems bench-scenarios soak bench-memory-shapes"}
echo "bench-all: run $BENCH_RUN_ID, results in $RESULTS, logs in $LOGS" >&2

start=$SECONDS
for s in $SUITES; do
    t=$SECONDS
    echo "== $s (log: $LOGS/$s.log)" >&2
    if ! "scripts/$s.sh" >"$LOGS/$s.out" 2>"$LOGS/$s.log"; then
        tail -n 30 "$LOGS/$s.log" >&2
        echo "bench-all: $s failed after $((SECONDS - t)) s; docs/BENCHMARKS.md not regenerated" >&2
        exit 1
    fi
    cat "$LOGS/$s.out"
    echo "== $s: $((SECONDS - t)) s" >&2
done

if [ "${BENCH_PRUNE:-0}" = 1 ]; then
    # Only files of the suites that just ran, so a partial run keeps the other suites' figures.
    for s in $SUITES; do
        case $s in
        bench-scaling) prefix=scaling ;; bench-systems) prefix=systems ;;
        bench-scenarios) prefix=scenarios ;; soak) prefix=soak ;; bench-memory-shapes) prefix=memory ;;
        *) continue ;;
        esac
        find "$RESULTS" -maxdepth 1 -name "$prefix-*.json" ! -name "$prefix-$BENCH_RUN_ID-*" -delete
    done
fi

scripts/bench-report.sh "$RESULTS"
echo "bench-all: done in $((SECONDS - start)) s" >&2
