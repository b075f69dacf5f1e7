#!/usr/bin/env bash
# Memory and eviction benchmark (issue 7; docs/memory.md has the latest figures).
#
#   scripts/bench-memory.sh            # all datasets, 3 runs each, plus SET throughput
#   RUNS=1 SKIP_THROUGHPUT=1 scripts/bench-memory.sh
#   SKIP_MEMORY=1 scripts/bench-memory.sh   # throughput only (also: ONLY=limit)
#   ONLY=limit ROUNDS=3 scripts/bench-memory.sh   # throughput only, 3 rounds side by side
#
# 1. RSS and used_memory of ONE fresh engine holding each dataset, against redis-server holding
#    the same data in the same run (median of $RUNS fresh processes each):
#      strings: 1,000,000 keys with 64-byte values
#      hashes:  100 hashes × 10,000 fields (8-byte values)
#      zsets:   100 sorted sets × 10,000 members
#    Runs scripts/bench-memory-shapes.sh for these three shapes (its JSON goes to $WORK/results).
# 2. SET throughput (redis-benchmark, 64-byte values, random keys from a 10M space, pipeline
#    16) without a limit and under allkeys-lru at a 64mb limit after pre-filling past it, for
#    recached and redis-server, $ROUNDS rounds (default 1) alternating the servers. Besides
#    rps (noisy: the client shares the machine's cores) it reports the server's CPU time per
#    SET (utime + stime from /proc/PID/stat over the measured run), which is steadier.
# Everything listens on 127.0.0.1, on free ports; every server is killed by PID.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
RUNS="${RUNS:-3}"
ROUNDS="${ROUNDS:-1}"
if [ "${ONLY:-}" = limit ]; then SKIP_MEMORY=1; fi
WORK="${WORK:-/tmp/recached-bench-memory}"
mkdir -p "$WORK"
BIN="${RECACHED_BIN:-$ROOT/target/release/recached}"
if [ -z "${RECACHED_BIN:-}" ]; then cargo build --release -q -p recached; fi

PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "port $1 not up" >&2; return 1; }

# start_server recached|redis PORT → pid on stdout
start_server() {
    local kind=$1 port=$2
    if [ "$kind" = recached ]; then
        "$BIN" server --port "$port" --bind 127.0.0.1 >"$WORK/$kind-$port.log" 2>&1 &
    else
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --databases 1 \
            >"$WORK/$kind-$port.log" 2>&1 &
    fi
    echo $!
}


if [ -z "${SKIP_MEMORY:-}" ]; then
    # Part 1 is the per-shape benchmark of the report (one implementation): its table, here for
    # the three datasets of issue 7, results in a scratch folder.
    MEM_SHAPES="strings hashes zsets" MEM_RUNS="$RUNS" BENCH_RESULTS="$WORK/results" \
        RECACHED_BIN="$BIN" "$ROOT/scripts/bench-memory-shapes.sh"
fi

[ -n "${SKIP_THROUGHPUT:-}" ] && exit 0
echo
printf '| round | server | SET rps, no limit | SET rps, allkeys-lru at 64mb | rps ratio | CPU µs/SET, no limit | CPU µs/SET at limit | CPU ratio (no limit / limit) |\n|---|---|---|---|---|---|---|---|\n'
N="${N:-1000000}"
set_rps() {
    redis-benchmark -p "$1" -t set -n "$N" -r 10000000 -d 64 -P 16 -c 50 -q 2>/dev/null \
        | tr '\r' '\n' | awk '/^SET:/ {print $2}' | tail -1
}
# CPU ticks (utime + stime) of a process.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
stat_field() { redis-cli -p "$1" INFO stats | tr -d '\r' | awk -F: -v f="$2" '$1==f{print $2}'; }
# measure PORT PID → "rps cpu_us_per_set commands"
measure() {
    local port=$1 pid=$2 c0 c1 n0 n1 rps
    c0=$(cpu_ticks "$pid"); n0=$(stat_field "$port" total_commands_processed)
    rps=$(set_rps "$port")
    c1=$(cpu_ticks "$pid"); n1=$(stat_field "$port" total_commands_processed)
    awk -v r="$rps" -v c=$(((c1 - c0) * TICK_US)) -v n=$((n1 - n0)) 'BEGIN {printf "%s %.3f\n", r, c / n}'
}
for round in $(seq 1 "$ROUNDS"); do
for kind in redis recached; do
    port=$(free_port)
    pid=$(start_server "$kind" "$port"); PIDS+=("$pid")
    wait_port "$port"
    read -r free_rps free_cpu < <(measure "$port" "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    port=$(free_port)
    pid=$(start_server "$kind" "$port"); PIDS+=("$pid")
    wait_port "$port"
    redis-cli -p "$port" CONFIG SET maxmemory 64mb >/dev/null
    redis-cli -p "$port" CONFIG SET maxmemory-policy allkeys-lru >/dev/null
    # Pre-fill past the limit so every measured SET runs at the limit (evicting).
    redis-benchmark -p "$port" -t set -n 1000000 -r 10000000 -d 64 -P 16 -q >/dev/null 2>&1
    evicted_before=$(stat_field "$port" evicted_keys)
    read -r lru_rps lru_cpu < <(measure "$port" "$pid")
    evicted_after=$(stat_field "$port" evicted_keys)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    ratio=$(awk -v a="$lru_rps" -v b="$free_rps" 'BEGIN {printf "%.2f", a / b}')
    cratio=$(awk -v a="$free_cpu" -v b="$lru_cpu" 'BEGIN {printf "%.2f", a / b}')
    printf '| %s | %s | %s | %s (evicted %s) | %s× | %s | %s | %s× |\n' "$round" "$kind" "$free_rps" \
        "$lru_rps" "$((evicted_after - evicted_before))" "$ratio" "$free_cpu" "$lru_cpu" "$cratio"
done
done
