#!/usr/bin/env bash
# Proxy instructions per single-engine transaction (issue 20's "the fast path stays fast"):
# for each BIN, one `BIN server` (not counted) behind `BIN proxy` run under
# `valgrind --tool=callgrind`, driven by `recached-bench tx-loop --clients 1` with hash-tagged
# keys (MULTI DECRBY INCRBY EXEC, all keys on the one engine). Prints
# `<bin> transactions=<n> instructions/transaction=<i>`; compare two builds side by side:
#
#   scripts/bench-instructions-tx.sh /tmp/old-recached target/release/recached
#
# Environment: SECONDS_COUNTED (4), RECACHED_BENCH_BIN (target/release/recached-bench), KEEP
# (a directory: each build's callgrind file is kept there as cg-<n>.out, for callgrind_annotate).
# Loopback only; every process is stopped by PID.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH=${RECACHED_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/recached-bench}
COUNTED=${SECONDS_COUNTED:-4}
[ $# -gt 0 ] || set -- "${CARGO_TARGET_DIR:-target}/release/recached"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-txinstr.XXXXXX")
PIDS=()
cleanup() { [ "${#PIDS[@]}" = 0 ] || kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
loop() { # loop PORT SECONDS OUT
    "$BENCH" tx-loop --target "127.0.0.1:$1" --clients 1 --seconds "$2" \
        --key-a '{t}a:__rand_int__' --key-b '{t}b:__rand_int__' --out "$3" >/dev/null
}
for bin in "$@"; do
    ep=$(free_port); pp=$(free_port)
    "$bin" server --port "$ep" --bind 127.0.0.1 >"$TMP/engine.log" 2>&1 &
    PIDS=($!)
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$TMP/cg.out" \
        "$bin" proxy --port "$pp" --bind 127.0.0.1 --backends "127.0.0.1:$ep" >"$TMP/proxy.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 200); do redis-cli -p "$pp" ping >/dev/null 2>&1 && break; sleep 0.1; done
    loop "$pp" 2 "$TMP/warm.json"
    callgrind_control -i on "${PIDS[1]}" >/dev/null
    loop "$pp" "$COUNTED" "$TMP/counted.json"
    callgrind_control -d "${PIDS[1]}" >/dev/null
    kill "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=()
    total=$(awk '/^summary:/ {print $2}' "$TMP/cg.out.1")
    n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['results']['transactions'])" "$TMP/counted.json")
    echo "$bin transactions=$n instructions/transaction=$((total / n))"
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        kept=$(find "$KEEP" -name 'cg-*.out' | wc -l)
        cp "$TMP/cg.out.1" "$KEEP/cg-$kept.out"
        echo "  kept: $KEEP/cg-$kept.out"
    fi
    rm -f "$TMP"/cg.out*
done
