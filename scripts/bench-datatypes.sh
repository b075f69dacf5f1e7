#!/usr/bin/env bash
# Issue 18's performance clause for bitmaps, HyperLogLog and SORT in one run: one recached
# engine vs one redis-server (--save '' --appendonly no), side by side, interleaved rounds,
# pipelined (-P 16). Geo has its own script (scripts/bench-geo.sh).
#
#   scripts/bench-datatypes.sh
#   BENCH_ROUNDS=5 scripts/bench-datatypes.sh
#
# Workloads (redis-benchmark, BENCH_CLIENTS clients; threshold recached ÷ redis-server ≥ 1.0×):
#   SETBIT     `SETBIT bits:<random of 100,000> 1000 1` (redis-benchmark's random numbers are
#              zero-padded, which both servers refuse as offsets, so the key is random)
#   BITCOUNT   `BITCOUNT big` of a 1 MB string of random bytes (the same bytes on both)
#   PFADD      `PFADD hll <one random element of 1,000,000>`
#   PFCOUNT3   `PFCOUNT h1 h2 h3` of three HyperLogLogs of 100,000 elements each (a union)
#   SORT       `SORT l` of a list of 1,000 random integers
# Each round runs both servers (the order alternates) on the same data, loaded once per server
# before the rounds (SETBIT and PFADD grow their keys as they run, alike on both). The table
# shows the median requests/s over the rounds and the ratio, PASS or BELOW; a ratio below its
# threshold does not fail the script (a noisy shared machine); an error does.
#
# Writes one JSON file per redis-benchmark run (labels suite=datatypes, system, workload,
# round) and datatypes-RUN-medians.csv to bench/results. Environment: BENCH_ROUNDS (3),
# BENCH_N (200,000 requests for SETBIT and PFADD; the others fewer, see below), BENCH_CLIENTS
# (50), BENCH_SMOKE=1 (one round, tiny -n: the test script's check that it runs), PIN/
# SERVER_CPUS/BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN. Loopback only; servers stopped on
# exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-200000}
CLIENTS=${BENCH_CLIENTS:-50}
HLL_ELEMENTS=100000
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 N=2000 HLL_ELEMENTS=2000
fi
mapfile -t LABELS < <(common_labels)

# --- data: RESP request files for redis-cli --pipe -----------------------------------------
head -c 1048576 /dev/urandom >"$TMP/big.bin"
python3 - "$TMP/load.resp" "$TMP/big.bin" "$HLL_ELEMENTS" <<'PY'
import random, sys
path, big_path, hll = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(18)
def req(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
with open(path, "wb") as f:
    f.write(req("SET", "big", open(big_path, "rb").read()))
    for k in ("h1", "h2", "h3"):
        for i in range(0, hll, 100):
            f.write(req("PFADD", k, *("%s:%d" % (k, rnd.randrange(10**9)) for _ in range(100))))
    f.write(req("RPUSH", "l", *(rnd.randrange(10**6) for _ in range(1000))))
PY

# --- servers ---------------------------------------------------------------------------------
free_ports 1; EP=$PORT
start_engine "$EP"
free_ports 1; RP=$PORT
start_redis "$RP"
declare -A PORT_OF=([recached]=$EP [redis]=$RP)
SYSTEMS=(recached redis)
echo "datatypes: $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, $CPU_PLACEMENT" >&2
for s in "${SYSTEMS[@]}"; do
    out=$(redis-cli -p "${PORT_OF[$s]}" --pipe <"$TMP/load.resp" 2>&1)
    echo "$out" | grep -q 'errors: 0, replies:' || { echo "$0: $s: loading: $out" >&2; exit 1; }
    [ "$(redis-cli -p "${PORT_OF[$s]}" STRLEN big)" = 1048576 ] || { echo "$0: $s: big is not 1 MB" >&2; exit 1; }
done
# The same data answers the same on both.
for q in "BITCOUNT big" "PFCOUNT h1 h2 h3" "LLEN l"; do
    a=$(redis-cli -p "$EP" $q) b=$(redis-cli -p "$RP" $q)
    [ "$a" = "$b" ] || { echo "$0: $q: recached $a, redis $b" >&2; exit 1; }
done

: >"$TMP/rows.csv"

for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(recached redis); else order=(redis recached); fi
    for s in "${order[@]}"; do
        echo "round $round/$ROUNDS: $s" >&2
        rb_run datatypes "$s" SETBIT "$round" SETBIT 16 "$N" -r 100000 SETBIT bits:__rand_int__ 1000 1
        rb_run datatypes "$s" BITCOUNT "$round" BITCOUNT 16 $((N / 20)) BITCOUNT big
        rb_run datatypes "$s" PFADD "$round" PFADD 16 "$N" -r 1000000 PFADD hll __rand_int__
        rb_run datatypes "$s" PFCOUNT3 "$round" PFCOUNT3 16 $((N / 20)) PFCOUNT h1 h2 h3
        rb_run datatypes "$s" SORT "$round" SORT 16 $((N / 40)) SORT l
    done
done

MEDIANS="$RESULTS/datatypes-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, 'NR > 1 { med[$1 "," $2] = $4 }
    END {
        printf "%-9s %12s %12s %8s  %s\n", "workload", "recached", "redis", "ratio", "threshold"
        split("SETBIT BITCOUNT PFADD PFCOUNT3 SORT", W, " ")
        for (i = 1; i <= 5; i++) {
            a = med["recached," W[i]]; b = med["redis," W[i]]
            r = (b > 0) ? a / b : 0
            printf "%-9s %12s %12s %7.2fx  %s\n", W[i], a, b, r, (r >= 1.0) ? "PASS (>= 1.00x)" : "BELOW (>= 1.00x)"
        }
    }' "$MEDIANS"
echo "(median requests/s over $ROUNDS interleaved rounds; $CLIENTS clients, -P 16)"
echo "results: $MEDIANS and datatypes-$RUN_ID-*.json"
