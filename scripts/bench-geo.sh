#!/usr/bin/env bash
# Geo's performance clause (issue 18) in one run, interleaved rounds: one recached engine vs one
# redis-server (--save '' --appendonly no), side by side.
#
#   scripts/bench-geo.sh
#   BENCH_ROUNDS=5 scripts/bench-geo.sh
#
# Tests, each with redis-benchmark (BENCH_CLIENTS clients):
#   GEOADD        `GEOADD geo:add 13.__rand_int__ 38.__rand_int__ m:__rand_int__` (points in a
#                 1°×1° square, 100,000 possible members), pipelined (-P 16): threshold ≥ 1.0×;
#   GEOSEARCH     `GEOSEARCH geo:100k FROMLONLAT 13 41 BYRADIUS 100 km` in a 100,000-member set
#                 (uniform over 8–18°E × 36–46°N: about 3,500 members answer, out of some
#                 40,000 candidates in the 9 geohash cells), pipelined (-P 4): threshold ≥ 1.0×;
#   GEOSEARCH-N10 the same search `ASC COUNT 10 WITHDIST` (the "10 nearest" query), pipelined
#                 (-P 16): reported.
# The 100,000 members are generated once (awk, fixed seed) and loaded with `redis-cli --pipe`
# into each server at the start of each of its rounds (after FLUSHALL). The table shows the
# median requests/s over the rounds and recached ÷ redis-server. A ratio below its threshold
# does not fail the script (a noisy shared machine); an error does.
#
# Writes one JSON file per redis-benchmark run (`recached-bench redis-benchmark`, labels
# suite=geo, system, workload, round) and geo-RUN-medians.csv to bench/results.
# Environment: BENCH_ROUNDS (3), BENCH_N (200000 GEOADD requests; GEOSEARCH runs N/100,
# GEOSEARCH-N10 N/40), BENCH_CLIENTS (50), BENCH_SMOKE=1 (one round, tiny -n), PIN/SERVER_CPUS/
# BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN. Loopback only; servers stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-200000}
CLIENTS=${BENCH_CLIENTS:-50}
MEMBERS=100000
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 N=2000 MEMBERS=5000
fi
mapfile -t LABELS < <(common_labels)

free_ports 1; EP=$PORT
start_engine "$EP"
free_ports 1; RP=$PORT
start_redis "$RP"

# The 100k-member set as RESP: GEOADD geo:100k lon lat m<i> … in batches of 1,000 members.
awk -v n="$MEMBERS" 'BEGIN {
    srand(18)
    for (i = 0; i < n; i += 1000) {
        k = (n - i < 1000) ? n - i : 1000
        printf "*%d\r\n$6\r\nGEOADD\r\n$8\r\ngeo:100k\r\n", 2 + 3 * k
        for (j = i; j < i + k; j++) {
            lon = sprintf("%.6f", 8 + 10 * rand()); lat = sprintf("%.6f", 36 + 10 * rand())
            m = "m" j
            printf "$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(lon), lon, length(lat), lat, length(m), m
        }
    }
}' >"$TMP/geo100k.resp"

declare -A PORT_OF=([recached]=$EP [redis]=$RP)
SYSTEMS=(recached redis)
echo "geo: $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, $CPU_PLACEMENT" >&2

: >"$TMP/rows.csv"

for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(recached redis); else order=(redis recached); fi
    for s in "${order[@]}"; do
        echo "round $round/$ROUNDS: $s" >&2
        p=${PORT_OF[$s]}
        redis-cli -p "$p" FLUSHALL >/dev/null
        loaded=$(redis-cli -p "$p" --pipe <"$TMP/geo100k.resp" 2>&1 | tail -1)
        case "$loaded" in "errors: 0,"*) ;; *) echo "$0: $s: loading: $loaded" >&2; exit 1 ;; esac
        card=$(redis-cli -p "$p" ZCARD geo:100k)
        [ "$card" = "$MEMBERS" ] || { echo "$0: $s: ZCARD geo:100k = $card" >&2; exit 1; }
        rb_run geo "$s" pipelined "$round" GEOADD 16 "$N" -r 100000 GEOADD geo:add 13.__rand_int__ 38.__rand_int__ 'm:__rand_int__'
        rb_run geo "$s" pipelined "$round" GEOSEARCH 4 $((N / 100)) GEOSEARCH geo:100k FROMLONLAT 13 41 BYRADIUS 100 km
        rb_run geo "$s" pipelined "$round" GEOSEARCH-N10 16 $((N / 40)) GEOSEARCH geo:100k FROMLONLAT 13 41 BYRADIUS 100 km ASC COUNT 10 WITHDIST
    done
done

MEDIANS="$RESULTS/geo-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median_rps,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, 'NR > 1 { med[$1 "," $2 "," $3] = $4 }
    END {
        printf "%-10s %-13s %10s %10s %8s  %s\n", "workload", "test", "recached", "redis", "ratio", "threshold"
        split("pipelined,GEOADD pipelined,GEOSEARCH pipelined,GEOSEARCH-N10", R, " ")
        for (i = 1; i <= 3; i++) {
            split(R[i], wt, ",")
            a = med["recached," R[i]]; b = med["redis," R[i]]
            th = (wt[2] == "GEOSEARCH-N10") ? 0 : 1.0
            r = (b > 0) ? a / b : 0
            verdict = (th == 0) ? "reported" : ((r >= th) ? "PASS (>= 1.00x)" : "BELOW (>= 1.00x)")
            printf "%-10s %-13s %10s %10s %7.2fx  %s\n", wt[1], wt[2], a, b, r, verdict
        }
    }' "$MEDIANS"
echo "(median requests/s over $ROUNDS interleaved rounds; $CLIENTS clients; GEOSEARCH: 100 km around 13°E 41°N in $MEMBERS members)"
echo "results: $MEDIANS and geo-$RUN_ID-*.json"
