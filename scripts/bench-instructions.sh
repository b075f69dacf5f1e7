#!/usr/bin/env bash
# User-space instructions per unpipelined request, counted by callgrind (repeatable whatever the
# machine is doing, unlike timings). For each server given, and for GET, SET and INCR:
# start it under `valgrind --tool=callgrind` with instrumentation off, warm up with redis-benchmark,
# then count WARM..WARM+N requests of one client (-c 1 -P 1) and divide by N.
#
#   scripts/bench-instructions.sh [BIN…]        # default: target/release/recached and redis-server
#   N=20000 scripts/bench-instructions.sh /path/to/old/recached target/release/recached
#
# A BIN whose name ends in redis-server is run as redis-server; anything else as
# `BIN server`, or with ROLE=proxy as `BIN proxy` in front of one `BIN server` (not counted), to
# count the proxy's instructions. Prints one line per server and command:
# `<label> <cmd> <instructions/request>`.
# Loopback only; each server is stopped by PID.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${N:-20000}
WARM=${WARM:-2000}
[ $# -gt 0 ] || set -- "${CARGO_TARGET_DIR:-target}/release/recached" "$(command -v redis-server)"
for tool in valgrind callgrind_control redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install valgrind redis-tools)" >&2; exit 1; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-instr.XXXXXX")
PID=
BACKEND=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null
    [ -n "$BACKEND" ] && kill "$BACKEND" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for bin in "$@"; do
    for cmd in get set incr; do
        port=$(free_port)
        out="$TMP/cg.out"
        case "$bin" in
            *redis-server) args=("$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no) ;;
            *) if [ "${ROLE:-server}" = proxy ]; then
                   eport=$(free_port)
                   "$bin" server --port "$eport" --bind 127.0.0.1 >"$TMP/engine.log" 2>&1 &
                   BACKEND=$!
                   args=("$bin" proxy --port "$port" --bind 127.0.0.1 --backends "127.0.0.1:$eport")
               else
                   args=("$bin" server --port "$port" --bind 127.0.0.1)
               fi ;;
        esac
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
            "${args[@]}" >"$TMP/server.log" 2>&1 &
        PID=$!
        for _ in $(seq 1 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        redis-benchmark -p "$port" -c 1 -P 1 -n "$WARM" -t "$cmd" -q >/dev/null
        callgrind_control -i on "$PID" >/dev/null
        redis-benchmark -p "$port" -c 1 -P 1 -n "$N" -t "$cmd" -q >/dev/null
        # The dump holds what ran since instrumentation went on (turning it off first would
        # drop the counts); what runs after it (shutdown) goes to the final file, not read.
        callgrind_control -d "$PID" >/dev/null
        kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
        if [ -n "$BACKEND" ]; then kill "$BACKEND"; wait "$BACKEND" 2>/dev/null || true; BACKEND=; fi
        total=$(awk '/^summary:/ {print $2}' "$out.1")
        rm -f "$out"*
        echo "$bin ${ROLE:-server} $cmd $(( total / N ))"
    done
done
