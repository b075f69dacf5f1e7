#!/usr/bin/env bash
# A fixed redis-benchmark workload against any RESP server (recached engine or proxy,
# redis-server, nutcracker, …):
#
#   scripts/benchmark.sh HOST PORT
#
# Workloads, in this order (each on the same 100k random keys, -r 100000, 64-byte values, -d 64,
# 50 clients):
#   pipelined    -P 16: SET, GET, INCR, MSET (10 keys), then MGET of 10 keys, then the
#                       single-key collection tests LPUSH, SADD, HSET, ZADD (one key each, as
#                       redis-benchmark defines them: members/fields from -r)
#   unpipelined  -P 1 : the same
# MGET-10 is `redis-benchmark … mget key:__rand_int__ ×10` (redis-benchmark has no MGET test).
#
# Output: CSV on stdout, one header line, then one line per test:
#   workload,test,rps,avg_latency_ms,min_latency_ms,p50_latency_ms,p95_latency_ms,p99_latency_ms,max_latency_ms
#   pipelined,SET,350000.00,…
# Tests are named SET, GET, INCR, MSET, MGET10, LPUSH, SADD, HSET, ZADD.
#
# Environment: BENCH_N_PIPELINED (default 1000000 requests per test), BENCH_N_UNPIPELINED
# (default 200000), BENCH_CLIENTS (default 50). redis-benchmark 7 exits non-zero on an error reply,
# and so does this script.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 HOST PORT" >&2
    exit 2
fi
HOST=$1
PORT=$2
N_PIPELINED=${BENCH_N_PIPELINED:-1000000}
N_UNPIPELINED=${BENCH_N_UNPIPELINED:-200000}
CLIENTS=${BENCH_CLIENTS:-50}

common=(-h "$HOST" -p "$PORT" -c "$CLIENTS" -r 100000 -d 64 --csv)
mget=(mget)
for _ in 1 2 3 4 5 6 7 8 9 10; do mget+=("key:__rand_int__"); done

# Runs redis-benchmark, fails on error replies, prints its CSV rows prefixed with the workload.
bench() {
    local workload=$1
    shift
    local out
    out=$(redis-benchmark "${common[@]}" "$@")
    if grep -q 'Error' <<<"$out"; then
        echo "$0: $workload: error replies from $HOST:$PORT:" >&2
        grep 'Error' <<<"$out" | head -5 >&2
        exit 1
    fi
    grep -v '^"test"' <<<"$out" | tr -d '"' \
        | sed -e 's/^mget key:__rand_int__[^,]*/MGET10/' -e 's/^MSET (10 keys)/MSET/' \
        | sed -e "s/^/$workload,/"
}

echo "workload,test,rps,avg_latency_ms,min_latency_ms,p50_latency_ms,p95_latency_ms,p99_latency_ms,max_latency_ms"
bench pipelined -n "$N_PIPELINED" -P 16 -t set,get,incr,mset
bench pipelined -n "$N_PIPELINED" -P 16 "${mget[@]}"
bench pipelined -n "$N_PIPELINED" -P 16 -t lpush,sadd,hset,zadd
bench unpipelined -n "$N_UNPIPELINED" -P 1 -t set,get,incr,mset
bench unpipelined -n "$N_UNPIPELINED" -P 1 "${mget[@]}"
bench unpipelined -n "$N_UNPIPELINED" -P 1 -t lpush,sadd,hset,zadd
