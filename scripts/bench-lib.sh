# Shared helpers of scripts/bench-{scaling,systems,scenarios}.sh and scripts/soak.sh (sourced,
# not run). Loopback only: every server gets free ports on 127.0.0.1 and is stopped by PID (or
# `recached stop` for a fleet) on exit, also on Ctrl-C.
#
# Provides: ROOT, BIN (the release `recached`; RECACHED_BIN overrides), BENCH_BIN (the release
# `recached-bench`, the load generator and result tools; RECACHED_BENCH_BIN overrides), RESULTS
# (BENCH_RESULTS, default bench/results),
# RUN_ID, TMP, SMOKE (BENCH_SMOKE=1: tiny sizes for the test script), the versions
# (RECACHED_VERSION, REDIS_VERSION, NUTCRACKER_VERSION), CPU placement (PIN=1 with SERVER_CPUS and
# BENCH_CPUS, e.g. "0" and "1": servers and generators are started under `taskset -c`), and
# functions: free_ports N, wait_port P, start_redis P [args…], start_engine P [args…], start_fleet N DIR PROXY BASE,
# stop_fleet DIR, fleet_engines DIR, fleet_affinity DIR, flush P…, srv CMD… (server placement), gen CMD… (generator
# placement), median_rows FILE (per-test medians of per-round rows), common_labels (prints
# --label args shared by every result of the run), rb_run (one redis-benchmark run of a
# side-by-side script: see there).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
SMOKE=${BENCH_SMOKE:-0}
RESULTS=${BENCH_RESULTS:-$ROOT/bench/results}
case "$RESULTS" in /*) ;; *) RESULTS="$ROOT/$RESULTS" ;; esac
RUN_ID=${BENCH_RUN_ID:-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$RESULTS"

for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done
# The benchmark tools are their own binary (kept out of the production `recached`); one cargo
# run builds whichever of the two is not given.
BUILD_PKGS=()
[ -n "${RECACHED_BIN:-}" ] || BUILD_PKGS+=(-p recached)
[ -n "${RECACHED_BENCH_BIN:-}" ] || BUILD_PKGS+=(-p recached-bench)
if [ "${#BUILD_PKGS[@]}" -gt 0 ]; then
    cargo build --release "${BUILD_PKGS[@]}" >&2
fi
BIN=${RECACHED_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/recached}
BENCH_BIN=${RECACHED_BENCH_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/recached-bench}
RECACHED_VERSION=$("$BIN" --version | awk '{print $2}')
REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
NUTCRACKER_VERSION=$( (nutcracker --version 2>&1 || true) | head -1 | awk '{print $NF}')

if [ "${PIN:-0}" = 1 ]; then
    : "${SERVER_CPUS:?PIN=1 needs SERVER_CPUS (e.g. 0) and BENCH_CPUS (e.g. 1)}"
    : "${BENCH_CPUS:?PIN=1 needs BENCH_CPUS}"
    CPU_PLACEMENT="servers on CPUs $SERVER_CPUS, generators on CPUs $BENCH_CPUS (taskset)"
    SRV=(taskset -c "$SERVER_CPUS")
    GEN=(taskset -c "$BENCH_CPUS")
else
    CPU_PLACEMENT="unpinned ($(nproc) CPUs shared by servers and generators)"
    SRV=()
    GEN=()
fi
srv() { "${SRV[@]}" "$@"; }
gen() { "${GEN[@]}" "$@"; }
SAVE_INTERVAL=$(sed -n 's/^ *save_interval *= *\([0-9]*\).*/\1/p' configs/recached.toml | head -1)
PERSISTENCE="redis: --save '' --appendonly no; recached: save_interval=${SAVE_INTERVAL:-0} s (configs/recached.toml), snapshot on clean stop"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-bench.XXXXXX")
PIDS=()
FLEETS=()
bench_cleanup() {
    local rc=$?
    set +e
    for d in "${FLEETS[@]}"; do "$BIN" stop --dir "$d" >/dev/null 2>&1; done
    # A function run with `&` is a subshell whose PID is not its command's: its children too.
    for pid in "${PIDS[@]}"; do pkill -TERM -P "$pid" 2>/dev/null; kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    rm -rf "$TMP"
    exit "$rc"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

USED=" "
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The first of $1 consecutive free ports (also free at +10000, for Redis Cluster buses), below
# Linux's ephemeral range (32768-60999, where outgoing connections take local ports at any
# time); recorded in USED so later calls do not hand them out again. $2 (default 32000) caps
# the base: Redis Cluster nodes pass 22000 so that their bus port (+10000) stays below the
# ephemeral range too. Call it as `free_ports N; X=$PORT` (not in a subshell, so USED is kept).
free_ports() {
    local n=$1 top=${2:-32000} base i ok
    for _ in $(seq 500); do
        base=$((15000 + RANDOM % (top - 15000 - n)))
        ok=1
        for ((i = 0; i < n; i++)); do
            if [[ $USED == *" $((base + i)) "* ]] || ! port_free $((base + i)) || ! port_free $((base + i + 10000)); then ok=0; break; fi
        done
        if [ $ok = 1 ]; then
            for ((i = 0; i < n; i++)); do USED+="$((base + i)) $((base + i + 10000)) "; done
            PORT=$base
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
    echo "$0: nothing listens on $1 after 20 s" >&2
    tail -n 20 "$TMP"/*.log >&2 || true
    exit 1
}
start_redis() {
    local p=$1
    shift
    mkdir -p "$TMP/redis-$p"
    (cd "$TMP/redis-$p" && exec "${SRV[@]}" redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no "$@") >"$TMP/redis-$p.log" 2>&1 &
    PIDS+=($!)
    wait_port "$p"
}
# start_engine P [args…]: one recached engine (`recached server`) on 127.0.0.1:P, its working
# directory and log under $TMP, its PID in PIDS; waits until it listens.
start_engine() {
    local p=$1
    shift
    mkdir -p "$TMP/engine-$p"
    (cd "$TMP/engine-$p" && exec "${SRV[@]}" "$BIN" server --port "$p" --bind 127.0.0.1 "$@") \
        >"$TMP/engine-$p.log" 2>&1 &
    PIDS+=($!)
    wait_port "$p"
}
# Number of engines a fleet reports as up (recached status --json).
fleet_engines() {
    "$BIN" status --dir "$1" --json 2>/dev/null | grep -o '"role":"engine-[0-9]*","port":[0-9]*,"pid":[0-9]*,"state":"up"' | wc -l
}
# "engine-0:0-1 engine-1:0-1 proxy:0-1 …": each fleet process's CPU affinity (taskset -pc).
fleet_affinity() {
    local role pid out=""
    while read -r role pid; do
        out+="$role:$(taskset -pc "$pid" 2>/dev/null | sed 's/.*: //') "
    done < <("$BIN" status --dir "$1" --json 2>/dev/null \
        | grep -o '"role":"[^"]*","port":[^,]*,"pid":[0-9]*' | sed 's/"role":"\([^"]*\)".*"pid":\([0-9]*\)/\1 \2/')
    echo "${out% }"
}
# start_fleet N DIR PROXY_PORT ENGINE_BASE: starts and waits until `recached status` reports
# N engines up; fails otherwise.
start_fleet() {
    local n=$1 dir=$2 proxy=$3 base=$4
    srv "$BIN" start --engines "$n" --bind 127.0.0.1 --proxy-port "$proxy" \
        --engine-port-base "$base" --dir "$dir" --daemonize >"$TMP/fleet-$proxy.log" 2>&1
    FLEETS+=("$dir")
    for _ in $(seq 100); do
        if [ "$(fleet_engines "$dir")" = "$n" ] && ! port_free "$proxy"; then return 0; fi
        sleep 0.2
    done
    echo "$0: fleet in $dir did not report $n engines up" >&2
    "$BIN" status --dir "$dir" >&2 || true
    exit 1
}
stop_fleet() {
    "$BIN" stop --dir "$1" >/dev/null
    local keep=()
    for d in "${FLEETS[@]}"; do [ "$d" = "$1" ] || keep+=("$d"); done
    FLEETS=("${keep[@]}")
}
flush() {
    local p
    for p in "$@"; do redis-cli -p "$p" FLUSHALL >/dev/null; done
}
# median_rows FILE: FILE has rows "a,b,c,value" (one per round); prints "a,b,c,median,count"
# for each (a,b,c), sorted (the median of an even count is the mean of the middle two).
median_rows() {
    sort -t, -k1,1 -k2,2 -k3,3 -k4,4g "$1" | awk -F, '
        function emit() { m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; printf "%s,%.0f,%d\n", prev, m, n; n = 0 }
        { key = $1 "," $2 "," $3; if (key != prev && prev != "") emit(); v[++n] = $4; prev = key }
        END { if (prev != "") emit() }'
}
common_labels() {
    printf '%s\n' --label "run_id=$RUN_ID" --label "recached_version=$RECACHED_VERSION" \
        --label "redis_version=$REDIS_VERSION" --label "nutcracker_version=$NUTCRACKER_VERSION" \
        --label "cpu_placement=$CPU_PLACEMENT" --label "persistence=$PERSISTENCE" --label "smoke=$SMOKE"
}
# rb_run SUITE SYSTEM WORKLOAD ROUND TEST-NAME PIPELINE REQUESTS COMMAND… : one redis-benchmark
# run of COMMAND against ${PORT_OF[SYSTEM]} with $CLIENTS clients, recorded by `recached-bench
# redis-benchmark` as $RESULTS/SUITE-RUN-SYSTEM-WORKLOAD-TEST-NAME-rROUND.json (labels from
# $LABELS, suite, system, workload, round, rounds=$ROUNDS, pipeline), and its requests/s
# appended to $TMP/rows.csv as "SYSTEM,WORKLOAD,TEST-NAME,rps" (for median_rows). A failed run
# or an error reply stops the script.
rb_run() {
    local suite=$1 s=$2 workload=$3 round=$4 name=$5 pipe=$6 n=$7 out log
    shift 7
    out="$RESULTS/$suite-$RUN_ID-$s-$workload-$name-r$round.json"
    log="$TMP/rb-$s-$workload-$name-r$round.log"
    if ! gen "$BENCH_BIN" redis-benchmark --out "$out" "${LABELS[@]}" --label "suite=$suite" \
        --label "system=$s" --label "workload=$workload" --label "round=$round" \
        --label "rounds=$ROUNDS" --label "pipeline=$pipe" --test-name "$name" -- \
        -h 127.0.0.1 -p "${PORT_OF[$s]}" -c "$CLIENTS" -n "$n" -P "$pipe" "$@" >"$log" 2>&1; then
        echo "$0: $s $workload $name: redis-benchmark failed:" >&2
        tail -n 5 "$log" >&2
        exit 1
    fi
    if grep -qi '^error\|ERR ' "$log"; then
        echo "$0: $s $workload $name: error replies:" >&2
        grep -i -m3 'error' "$log" >&2
        exit 1
    fi
    sed -n 's/^"\([^"]*\)": \([0-9.]*\) rps$/\1 \2/p' "$log" \
        | while read -r _ rps; do echo "$s,$workload,$name,$rps"; done >>"$TMP/rows.csv"
}
