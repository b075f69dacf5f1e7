#!/usr/bin/env bash
# Smart-client benchmark (issue 4), side by side in one run, interleaved:
#
#   recached-direct   redis-benchmark --cluster against a 2-engine recached fleet (cluster = true)
#   redis-cluster     redis-benchmark --cluster against a real 2-node Redis Cluster
#                     (cluster-enabled yes, CLUSTER ADDSLOTSRANGE 0-8191 / 8192-16383, CLUSTER MEET)
#   recached-proxy    plain redis-benchmark against the same fleet's proxy
#
#   scripts/bench-cluster.sh
#
# Workload: -t set,get, 64-byte values, random keys over 100k (-r), 50 clients, unpipelined
# (-n BENCH_N, default 200000) and pipelined -P 16 (-n BENCH_N_PIPELINED, default 1000000).
# Each round runs every target once, in alternating order, from an empty keyspace; the table
# gives the median requests/s per test over the rounds and the ratios against redis-cluster
# (the issue's target: recached-direct >= 1.0x on SET and GET).
#
# Environment: BENCH_ROUNDS (default 3), BENCH_N, BENCH_N_PIPELINED, BENCH_CLIENTS (50),
# RECACHED_BIN (default: builds target/release/recached), BENCH_KEEP=DIR (keep the raw CSVs).
# Servers listen on free ports of 127.0.0.1 and are stopped by PID on exit (also on Ctrl-C).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-200000}
NP=${BENCH_N_PIPELINED:-1000000}
CLIENTS=${BENCH_CLIENTS:-50}
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done
if [ -z "${RECACHED_BIN:-}" ]; then
    cargo build --release -p recached >&2
    RECACHED_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/recached"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-bench-cluster.XXXXXX")
PIDS=()
FLEET_PID=
cleanup() {
    local rc=$?
    set +e
    if [ -n "$FLEET_PID" ]; then
        kill -TERM "$FLEET_PID" 2>/dev/null
        for _ in $(seq 150); do kill -0 "$FLEET_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$FLEET_PID" 2>/dev/null
    fi
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    wait 2>/dev/null
    if [ -n "${BENCH_KEEP:-}" ] && [ -d "$TMP/results" ]; then
        mkdir -p "$BENCH_KEEP" && cp -r "$TMP/results" "$BENCH_KEEP/"
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

USED=" "
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The first of $1 consecutive free ports (none in USED), below Linux's ephemeral range.
# Redis Cluster nodes also use port+10000 for their bus: keep base+10000 free too.
free_ports() {
    local n=$1 base i ok
    for _ in $(seq 500); do
        base=$((15000 + RANDOM % 17000))
        ok=1
        for ((i = 0; i < n; i++)); do
            if [[ $USED == *" $((base + i)) "* ]] || ! port_free $((base + i)) || ! port_free $((base + i + 10000)); then ok=0; break; fi
        done
        if [ $ok = 1 ]; then echo "$base"; return; fi
    done
    echo "$0: no free ports" >&2
    exit 1
}
wait_port() {
    for _ in $(seq 200); do
        port_free "$1" || return 0
        sleep 0.1
    done
    echo "$0: nothing listens on $1 after 20 s; logs in $TMP" >&2
    tail -n 20 "$TMP"/*.log >&2
    exit 1
}

RC=$(free_ports 2); USED+="$RC $((RC + 1)) $((RC + 10000)) $((RC + 10001)) "
FE=$(free_ports 2); USED+="$FE $((FE + 1)) "
FP=$(free_ports 1); USED+="$FP "

# The real Redis Cluster: two masters, half the slots each.
for p in "$RC" "$((RC + 1))"; do
    mkdir -p "$TMP/redis-$p"
    (cd "$TMP/redis-$p" && exec redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file nodes.conf --save '' --appendonly no --daemonize no) \
        >"$TMP/redis-$p.log" 2>&1 &
    PIDS+=($!)
done
"$RECACHED_BIN" start --engines 2 --bind 127.0.0.1 --proxy-port "$FP" \
    --engine-port-base "$FE" --dir "$TMP/fleet" >"$TMP/fleet.log" 2>&1 &
FLEET_PID=$!
for p in "$RC" "$((RC + 1))" "$FE" "$((FE + 1))" "$FP"; do wait_port "$p"; done
redis-cli -p "$RC" CLUSTER ADDSLOTSRANGE 0 8191 >/dev/null
redis-cli -p "$((RC + 1))" CLUSTER ADDSLOTSRANGE 8192 16383 >/dev/null
redis-cli -p "$RC" CLUSTER MEET 127.0.0.1 "$((RC + 1))" >/dev/null
for _ in $(seq 100); do
    if redis-cli -p "$RC" CLUSTER INFO | grep -q 'cluster_state:ok' \
        && redis-cli -p "$((RC + 1))" CLUSTER INFO | grep -q 'cluster_state:ok' \
        && [ "$(redis-cli -p "$RC" CLUSTER NODES | wc -l)" = 2 ]; then
        break
    fi
    sleep 0.2
done
redis-cli -p "$RC" CLUSTER INFO | grep -q 'cluster_state:ok' || { echo "$0: redis cluster did not form" >&2; exit 1; }

declare -A PORT=([recached-direct]=$FE [redis-cluster]=$RC [recached-proxy]=$FP)
declare -A MODE=([recached-direct]=--cluster [redis-cluster]=--cluster [recached-proxy]=)
declare -A FLUSH=([recached-direct]="$FE $((FE + 1))" [redis-cluster]="$RC $((RC + 1))"
    [recached-proxy]="$FE $((FE + 1))")

echo "recached $("$RECACHED_BIN" --version | cut -d' ' -f2) vs redis $(redis-server --version | cut -d' ' -f3) cluster; $ROUNDS rounds; $(nproc) cores; -c $CLIENTS -r 100000 -d 64" >&2
mkdir -p "$TMP/results"
for round in $(seq "$ROUNDS"); do
    case $((round % 3)) in
        1) order=(recached-direct redis-cluster recached-proxy) ;;
        2) order=(redis-cluster recached-proxy recached-direct) ;;
        0) order=(recached-proxy recached-direct redis-cluster) ;;
    esac
    for t in "${order[@]}"; do
        for pipe in 1 16; do
            n=$N; [ "$pipe" = 16 ] && n=$NP
            for p in ${FLUSH[$t]}; do redis-cli -p "$p" FLUSHALL >/dev/null; done
            echo "round $round/$ROUNDS: $t -P $pipe (port ${PORT[$t]})" >&2
            # shellcheck disable=SC2086 # MODE is empty or one flag
            if ! redis-benchmark -h 127.0.0.1 -p "${PORT[$t]}" ${MODE[$t]} -t set,get -n "$n" \
                -c "$CLIENTS" -r 100000 -d 64 -P "$pipe" --csv >"$TMP/out" 2>"$TMP/err" \
                || grep -qiE 'error|moved|crossslot' "$TMP/out" "$TMP/err" \
                || [ "$(grep -cE '^"(SET|GET)"' "$TMP/out")" != 2 ]; then
                echo "$0: $t -P $pipe failed:" >&2; cat "$TMP/out" "$TMP/err" >&2; exit 1
            fi
            awk -F, -v t="$t" -v p="$pipe" '/^"(SET|GET)"/ { gsub(/"/, ""); print t ",P" p "," $1 "," $2 }' \
                "$TMP/out" >>"$TMP/results/round$round.csv"
        done
    done
done

# Medians per (target, pipeline, test), then the table with ratios.
sort -t, -k1,1 -k2,2 -k3,3 -k4,4g "$TMP"/results/round*.csv | awk -F, '
    function emit() { m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; med[prev] = m; n = 0 }
    { key = $1 "," $2 "," $3; if (key != prev && prev != "") emit(); v[++n] = $4; prev = key }
    END {
        emit()
        printf "%-10s %16s %16s %16s %10s %10s\n", "test", "recached-direct", "redis-cluster", "recached-proxy", "direct/rc", "proxy/rc"
        split("P1,SET P1,GET P16,SET P16,GET", rows, " ")
        for (i = 1; i <= 4; i++) {
            split(rows[i], a, ",")
            d = med["recached-direct," a[1] "," a[2]]; r = med["redis-cluster," a[1] "," a[2]]; p = med["recached-proxy," a[1] "," a[2]]
            printf "%-10s %16.0f %16.0f %16.0f %9.2fx %9.2fx\n", a[2] " -" a[1], d, r, p, (r ? d / r : 0), (r ? p / r : 0)
        }
    }'
