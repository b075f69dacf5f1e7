#!/usr/bin/env bash
# Scripting's performance clause (issue 15) in one run, interleaved rounds: one recached engine
# vs one redis-server (--save '' --appendonly no), side by side.
#
#   scripts/bench-scripting.sh
#   BENCH_ROUNDS=5 scripts/bench-scripting.sh
#
# Tests, each with redis-benchmark (BENCH_CLIENTS clients, 100,000 random keys):
#   EVALSHA  `EVALSHA <sha> 1 key:__rand_int__` of a loaded script doing INCR + EXPIRE on its
#            key, pipelined (-P 16) and unpipelined (-P 1): threshold ≥ 1.0× redis-server;
#   EVAL-NEW `EVAL "return __rand_int__" 0` with 100,000,000 possible bodies: nearly every
#            request compiles a new script (the first EVAL of a script), unpipelined; reported
#            without a threshold (both servers cache every script they compile).
# Each round runs both servers (the order alternates), each from an empty keyspace and an
# empty script cache (FLUSHALL, SCRIPT FLUSH). The table shows the median requests/s over the
# rounds and recached ÷ redis-server. A ratio below its threshold does not fail the script (a
# noisy shared machine); an error does.
#
# Writes one JSON file per redis-benchmark run (`recached-bench redis-benchmark`, labels
# suite=scripting, system, workload, round) and scripting-RUN-medians.csv to bench/results.
# Environment: BENCH_ROUNDS (3), BENCH_N (200000 requests per pipelined test; a quarter for the
# unpipelined ones), BENCH_CLIENTS (50), BENCH_SMOKE=1 (one round, tiny -n), PIN/SERVER_CPUS/
# BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN. Loopback only; servers stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-200000}
CLIENTS=${BENCH_CLIENTS:-50}
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 N=2000
fi
mapfile -t LABELS < <(common_labels)

free_ports 1; EP=$PORT
start_engine "$EP"
free_ports 1; RP=$PORT
start_redis "$RP"

BODY="redis.call('incr', KEYS[1]); redis.call('expire', KEYS[1], 100); return 1"
declare -A PORT_OF=([recached]=$EP [redis]=$RP)
SYSTEMS=(recached redis)
echo "scripting: $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, $CPU_PLACEMENT" >&2

: >"$TMP/rows.csv"

for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(recached redis); else order=(redis recached); fi
    for s in "${order[@]}"; do
        echo "round $round/$ROUNDS: $s" >&2
        p=${PORT_OF[$s]}
        redis-cli -p "$p" FLUSHALL >/dev/null
        redis-cli -p "$p" SCRIPT FLUSH >/dev/null
        sha=$(redis-cli -p "$p" SCRIPT LOAD "$BODY")
        [ "${#sha}" = 40 ] || { echo "$0: $s: SCRIPT LOAD answered: $sha" >&2; exit 1; }
        rb_run scripting "$s" pipelined "$round" EVALSHA 16 "$N" -r 100000 EVALSHA "$sha" 1 'key:__rand_int__'
        rb_run scripting "$s" unpipelined "$round" EVALSHA 1 $((N / 4)) -r 100000 EVALSHA "$sha" 1 'key:__rand_int__'
        rb_run scripting "$s" unpipelined "$round" EVAL-NEW 1 $((N / 4)) -r 100000000 EVAL 'return __rand_int__' 0
        redis-cli -p "$p" SCRIPT FLUSH >/dev/null
    done
done

MEDIANS="$RESULTS/scripting-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median_rps,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, 'NR > 1 { med[$1 "," $2 "," $3] = $4 }
    END {
        printf "%-12s %-9s %10s %10s %8s  %s\n", "workload", "test", "recached", "redis", "ratio", "threshold"
        split("pipelined,EVALSHA unpipelined,EVALSHA unpipelined,EVAL-NEW", R, " ")
        for (i = 1; i <= 3; i++) {
            split(R[i], wt, ",")
            a = med["recached," R[i]]; b = med["redis," R[i]]
            th = (wt[2] == "EVALSHA") ? 1.0 : 0
            r = (b > 0) ? a / b : 0
            verdict = (th == 0) ? "reported" : ((r >= th) ? "PASS (>= 1.00x)" : "BELOW (>= 1.00x)")
            printf "%-12s %-9s %10s %10s %7.2fx  %s\n", wt[1], wt[2], a, b, r, verdict
        }
    }' "$MEDIANS"
echo "(median requests/s over $ROUNDS interleaved rounds; $CLIENTS clients; EVALSHA: INCR + EXPIRE on one of 100,000 keys)"
echo "results: $MEDIANS and scripting-$RUN_ID-*.json"
