#!/usr/bin/env bash
# Client-side caching's performance clause (issue 19) in one run, interleaved rounds: one
# recached engine vs one redis-server (--save '' --appendonly no), side by side.
#
#   scripts/bench-tracking.sh
#   BENCH_ROUNDS=5 scripts/bench-tracking.sh
#
# Test: pipelined GETs (-P 16, BENCH_CLIENTS connections) with `recached-bench get-loop`
# (redis-benchmark has no tracking flag), each connection in RESP3 (HELLO 3), once without
# tracking and once with `CLIENT TRACKING ON` on every connection, so every GET also remembers
# its key for its client in the tracking table. Two workloads:
#   cold  uniform over 100,000 keys for BENCH_SECONDS: the table fills during the whole run
#         (100,000 keys × the clients), so this is mostly the cost of inserting;
#   warm  uniform over 10,000 keys, BENCH_SECONDS counted after as many uncounted: the table
#         is (nearly) full, so this is the steady cost of a tracked GET (a lookup).
# The clause: tracking costs recached ≤ 10 % of its pipelined GET throughput; redis-server's
# own cost in the same run is printed beside it. Each round runs both servers (the order
# alternates), each from the same loaded keyspace with an empty tracking table (the tracking
# connections close, and FLUSHALL empties the table, before each run).
#
# Writes one JSON file per get-loop run (`recached-bench get-loop`, labels suite=tracking,
# system, workload, round) and tracking-RUN-medians.csv to bench/results. A cost above 10 %
# does not fail the script (a noisy shared machine); an error does.
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5 per run), BENCH_CLIENTS (50), BENCH_SMOKE=1
# (one round, short runs), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN.
# Loopback only; servers stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
CLIENTS=${BENCH_CLIENTS:-50}
KEYS=100000
WARM_KEYS=10000
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 SECONDS_PER_RUN=0.5 CLIENTS=4 KEYS=1000 WARM_KEYS=100
fi
mapfile -t LABELS < <(common_labels)

free_ports 1; EP=$PORT
start_engine "$EP"
EPID=${PIDS[-1]}
free_ports 1; RP=$PORT
start_redis "$RP"
RPID=${PIDS[-1]}

declare -A PORT_OF=([recached]=$EP [redis]=$RP)
declare -A PID_OF=([recached]=$EPID [redis]=$RPID)
# The server's CPU time (user + system, clock ticks) so far.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
SYSTEMS=(recached redis)
echo "tracking: $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, $CPU_PLACEMENT" >&2

# load PORT: key:0 … key:KEYS-1, 3-byte values (redis-benchmark's SET with -r writes random
# keys; a sequential fill through redis-cli --pipe loads every one).
load() {
    redis-cli -p "$1" FLUSHALL >/dev/null
    awk -v n="$KEYS" 'BEGIN { for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$%d\r\nkey:%d\r\n$3\r\nxxx\r\n", length("key:" i), i }' \
        | redis-cli -p "$1" --pipe >/dev/null
}

: >"$TMP/rows.csv"
: >"$TMP/cpu.csv"
# run SYSTEM WORKLOAD ROUND [get-loop args…]
run() {
    local s=$1 workload=$2 round=$3 out log t0
    shift 3
    t0=$(ticks "${PID_OF[$s]}")
    out="$RESULTS/tracking-$RUN_ID-$s-$workload-r$round.json"
    log="$TMP/gl-$s-$workload-r$round.log"
    if ! gen "$BENCH_BIN" get-loop --out "$out" "${LABELS[@]}" --label suite=tracking \
        --label "system=$s" --label "workload=$workload" --label "round=$round" \
        --label "rounds=$ROUNDS" --target "127.0.0.1:${PORT_OF[$s]}" --clients "$CLIENTS" \
        --pipeline 16 --seconds "$SECONDS_PER_RUN" "$@" >"$log" 2>&1; then
        echo "$0: $s $workload: get-loop failed:" >&2
        tail -n 5 "$log" >&2
        exit 1
    fi
    sed -n 's/^requests .* rps \([0-9.]*\)$/\1/p' "$log" \
        | while read -r rps; do echo "$s,$workload,GET,$rps"; done >>"$TMP/rows.csv"
    # The server's CPU ns per counted GET: runs without a warm-up only (the cold ones), where
    # every request the server served was counted.
    if [[ $workload == cold-* ]]; then
        sed -n 's/^requests \([0-9]*\) .*$/\1/p' "$log" | while read -r n; do
            awk -v t="$(($(ticks "${PID_OF[$s]}") - t0))" -v hz="$HZ" -v n="$n" \
                -v k="$s,$workload,CPU" 'BEGIN { if (n > 0) printf "%s,%.0f\n", k, t * 1e9 / hz / n }'
        done >>"$TMP/cpu.csv"
    fi
}

for s in "${SYSTEMS[@]}"; do load "${PORT_OF[$s]}"; done
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(recached redis); else order=(redis recached); fi
    for s in "${order[@]}"; do
        echo "round $round/$ROUNDS: $s" >&2
        run "$s" cold-plain "$round" --keys "$KEYS"
        run "$s" cold-tracking "$round" --keys "$KEYS" --tracking
        load "${PORT_OF[$s]}" # empties the tracking table (FLUSHALL) and reloads the keys
        run "$s" warm-plain "$round" --keys "$WARM_KEYS" --warmup "$SECONDS_PER_RUN"
        run "$s" warm-tracking "$round" --keys "$WARM_KEYS" --warmup "$SECONDS_PER_RUN" --tracking
        load "${PORT_OF[$s]}"
    done
done

MEDIANS="$RESULTS/tracking-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median_rps,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, 'NR > 1 { med[$1 "," $2] = $4 }
    END {
        printf "%-9s %-5s %12s %12s %8s  %s\n", "system", "table", "GET plain", "GET tracking", "cost", "threshold"
        split("recached redis", S, " ")
        split("cold warm", W, " ")
        for (w = 1; w <= 2; w++) for (i = 1; i <= 2; i++) {
            a = med[S[i] "," W[w] "-plain"]; b = med[S[i] "," W[w] "-tracking"]
            c = (a > 0) ? 100 * (a - b) / a : 0
            verdict = (S[i] == "redis") ? "reported" : ((c <= 10) ? "PASS (<= 10 %)" : "ABOVE (<= 10 %)")
            printf "%-9s %-5s %12s %12s %7.1f%%  %s\n", S[i], W[w], a, b, c, verdict
        }
    }' "$MEDIANS"
echo
CPU="$RESULTS/tracking-$RUN_ID-cpu.csv"
{
    echo "system,workload,test,median_cpu_ns_per_get,rounds"
    median_rows "$TMP/cpu.csv"
} >"$CPU"
awk -F, 'NR > 1 { med[$1 "," $2] = $4 }
    END {
        printf "%-9s %-5s %12s %12s %8s\n", "system", "table", "ns plain", "ns tracking", "cost"
        split("recached redis", S, " ")
        for (i = 1; i <= 2; i++) {
            a = med[S[i] ",cold-plain"]; b = med[S[i] ",cold-tracking"]
            c = (a > 0) ? 100 * (b - a) / a : 0
            printf "%-9s %-5s %12s %12s %7.1f%%\n", S[i], "cold", a, b, c
        }
    }' "$CPU"
echo "(server CPU ns per GET, user + system from /proc, median over the rounds: the steadier view on a shared host)"
echo "(median GET requests/s over $ROUNDS interleaved rounds; $CLIENTS RESP3 clients, pipeline 16; cold: $KEYS keys, table filling; warm: $WARM_KEYS keys after ${SECONDS_PER_RUN} s uncounted; tracking = CLIENT TRACKING ON on every connection)"
echo "results: $MEDIANS, $CPU and tracking-$RUN_ID-*.json"
