#!/usr/bin/env bash
# Side-by-side benchmark of recached against Redis, in one run, interleaved:
#
#   (a) one recached engine          vs  one redis-server (--save '' --appendonly no)
#   (b) the recached fleet's proxy   vs  nutcracker (twemproxy) in front of two redis-servers
#       with 2 engines                   (redis: true, hash fnv1a_64, ketama)
#
#   scripts/bench-compare.sh
#
# Every target runs the fixed workload of scripts/benchmark.sh (SET GET INCR MSET MGET10,
# pipelined -P 16 and unpipelined, 64-byte values, 100k random keys) once per round; the order
# of the targets alternates between rounds, and each run starts from an empty keyspace. The
# table shows the median ops/s of each test over the rounds and the ratios recached/reference.
#
# Environment: BENCH_ROUNDS (default 3), RECACHED_BIN (default: builds target/release/recached),
# BENCH_KEEP=DIR (copy the raw per-round CSVs and the table there), and benchmark.sh's
# BENCH_N_PIPELINED, BENCH_N_UNPIPELINED, BENCH_CLIENTS.
# Servers listen on free ports of 127.0.0.1 and are stopped by PID on exit (also on Ctrl-C).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
ROUNDS=${BENCH_ROUNDS:-3}
for tool in redis-server redis-cli redis-benchmark nutcracker; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install redis-server redis-tools nutcracker)" >&2; exit 1; }
done
if [ -z "${RECACHED_BIN:-}" ]; then
    cargo build --release -p recached >&2
    RECACHED_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/recached"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-bench.XXXXXX")
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
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

USED=" "
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Prints the first of $1 consecutive free ports (none of them in USED), chosen at random below
# Linux's ephemeral range (32768-60999), where outgoing connections take local ports at any time.
free_ports() {
    local n=$1 base i ok
    for _ in $(seq 500); do
        base=$((15000 + RANDOM % 17000))
        ok=1
        for ((i = 0; i < n; i++)); do
            if [[ $USED == *" $((base + i)) "* ]] || ! port_free $((base + i)); then ok=0; break; fi
        done
        if [ $ok = 1 ]; then
            echo "$base"
            return
        fi
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
start_redis() {
    redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
        >"$TMP/redis-$1.log" 2>&1 &
    PIDS+=($!)
}

# $(free_ports …) runs in a subshell, so the caller records the ports it got in USED.
pick() { free_ports "$1"; }
REDIS1=$(pick 1); USED+="$REDIS1 "
ENGINE1=$(pick 1); USED+="$ENGINE1 "
BACK=$(pick 2); USED+="$BACK $((BACK + 1)) "
NUT=$(pick 1); USED+="$NUT "
NUT_STATS=$(pick 1); USED+="$NUT_STATS "
FLEET_ENGINES=$(pick 2); USED+="$FLEET_ENGINES $((FLEET_ENGINES + 1)) "
FLEET_PROXY=$(pick 1); USED+="$FLEET_PROXY "

start_redis "$REDIS1"
start_redis "$BACK"
start_redis "$((BACK + 1))"
"$RECACHED_BIN" server --port "$ENGINE1" --bind 127.0.0.1 >"$TMP/engine-$ENGINE1.log" 2>&1 &
PIDS+=($!)
"$RECACHED_BIN" start --engines 2 --bind 127.0.0.1 --proxy-port "$FLEET_PROXY" \
    --engine-port-base "$FLEET_ENGINES" --dir "$TMP/fleet" >"$TMP/fleet.log" 2>&1 &
FLEET_PID=$!
cat >"$TMP/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:$NUT
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  timeout: 5000
  servers:
   - 127.0.0.1:$BACK:1
   - 127.0.0.1:$((BACK + 1)):1
YML
nutcracker -c "$TMP/nutcracker.yml" -s "$NUT_STATS" -a 127.0.0.1 -o "$TMP/nutcracker.log" \
    -p "$TMP/nutcracker.pid" &
PIDS+=($!)
for p in "$REDIS1" "$BACK" "$((BACK + 1))" "$ENGINE1" "$FLEET_PROXY" "$FLEET_ENGINES" "$((FLEET_ENGINES + 1))" "$NUT"; do
    wait_port "$p"
done

# target name -> port to benchmark, and the ports to FLUSHALL before each run (backends
# directly: nutcracker does not forward FLUSHALL).
declare -A PORT=([recached]=$ENGINE1 [redis]=$REDIS1 [recached-proxy]=$FLEET_PROXY [nutcracker]=$NUT)
declare -A FLUSH=([recached]=$ENGINE1 [redis]=$REDIS1
    [recached-proxy]="$FLEET_ENGINES $((FLEET_ENGINES + 1))" [nutcracker]="$BACK $((BACK + 1))")

echo "recached $("$RECACHED_BIN" --version | cut -d' ' -f2) vs $(redis-server --version | cut -d' ' -f3) and $(nutcracker --version 2>&1 | head -1 | awk '{print $NF}'); $ROUNDS rounds; $(nproc) cores" >&2
mkdir -p "$TMP/results"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
        order=(recached redis recached-proxy nutcracker)
    else
        order=(redis recached nutcracker recached-proxy)
    fi
    for t in "${order[@]}"; do
        for p in ${FLUSH[$t]}; do redis-cli -p "$p" FLUSHALL >/dev/null; done
        echo "round $round/$ROUNDS: $t (port ${PORT[$t]})" >&2
        scripts/benchmark.sh 127.0.0.1 "${PORT[$t]}" >"$TMP/results/$t.$round.csv"
    done
done

# Medians: rows "target,workload,test,rps" sorted by key then rps; the middle value per key.
for f in "$TMP"/results/*.csv; do
    t=$(basename "$f" | cut -d. -f1)
    tail -n +2 "$f" | awk -F, -v t="$t" '{ print t "," $1 "," $2 "," $3 }'
done | sort -t, -k1,1 -k2,2 -k3,3 -k4,4g | awk -F, '
    function emit() { m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; print prev "," m; n = 0 }
    { key = $1 "," $2 "," $3; if (key != prev && prev != "") emit(); v[++n] = $4; prev = key }
    END { if (prev != "") emit() }' >"$TMP/medians.csv"

awk -F, '
    { med[$1 "," $2 "," $3] = $4; if (!seen[$2 "," $3]++) rows[++n] = $2 "," $3 }
    function r(a, b) { return (b > 0) ? sprintf("%.2fx", a / b) : "-" }
    END {
        printf "%-12s %-7s | %12s %12s %7s | %14s %12s %7s\n", "workload", "test", "recached", "redis", "ratio", "recached-proxy", "nutcracker", "ratio"
        for (i = 1; i <= n; i++) {
            split(rows[i], k, ",")
            a = med["recached," rows[i]]; b = med["redis," rows[i]]
            c = med["recached-proxy," rows[i]]; d = med["nutcracker," rows[i]]
            printf "%-12s %-7s | %12.0f %12.0f %7s | %14.0f %12.0f %7s\n", k[1], k[2], a, b, r(a, b), c, d, r(c, d)
        }
    }' "$TMP/medians.csv" | tee "$TMP/table.txt"
echo "(median ops/s over $ROUNDS interleaved rounds; ratio = recached / reference; 1 engine vs 1 redis-server, proxy+2 engines vs nutcracker+2 redis-servers)"
if [ -n "${BENCH_KEEP:-}" ]; then
    mkdir -p "$BENCH_KEEP"
    cp "$TMP"/results/*.csv "$TMP/medians.csv" "$TMP/table.txt" "$BENCH_KEEP"/
    echo "raw results in $BENCH_KEEP" >&2
fi
