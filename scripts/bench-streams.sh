#!/usr/bin/env bash
# The streams' performance clause (issue 17) in one run: one recached engine vs one
# redis-server (--save '' --appendonly no), side by side, interleaved rounds.
#
#   scripts/bench-streams.sh
#   BENCH_ROUNDS=5 scripts/bench-streams.sh
#
# Workloads (each threshold is recached ÷ redis-server):
#   XADD      `XADD s * f v` pipelined (-P 16), redis-benchmark                    ≥ 1.0×
#   XRANGE    `XRANGE big <middle> + COUNT 100` pipelined (-P 16) on a stream of
#             BIG entries (1,000,000), redis-benchmark                             ≥ 1.0×
#   CONSUME   the consumer-group loop `XREADGROUP GROUP g c<i> COUNT 10 STREAMS q >` +
#             `XACK q g <the ids>` by BENCH_CONSUMERS connections until a queue of
#             QUEUE entries is drained (`recached-bench stream-consume`); entries/s     ≥ 1.0×
#   RSS       each server's RSS (/proc/PID/status VmRSS) holding the stream `big` alone
#             (BIG entries of 3 small fields, IDs 1-0 … BIG-0, loaded with
#             `redis-cli --pipe`), measured once, before the other workloads       ≤ 1.1×
#             (also shown: RSS over the empty server's, and INFO used_memory)
# Each round runs both servers (the order alternates), each from the same state (the stream
# `s` deleted, the queue `q` loaded again and its group created at 0). The table shows the
# median over the rounds, the ratio and PASS or BELOW its threshold. A ratio below its
# threshold does not fail the script (a noisy shared machine); an error does.
#
# Writes one JSON file per run (`recached-bench redis-benchmark` / `stream-consume`, labels
# suite=streams, system, workload, round) and streams-RUN-medians.csv to bench/results.
# Environment: BENCH_ROUNDS (3), BENCH_N (200000 XADDs; XRANGE runs a tenth), BENCH_BIG
# (1000000), BENCH_QUEUE (200000), BENCH_CLIENTS (50, redis-benchmark), BENCH_CONSUMERS (8),
# BENCH_SMOKE=1 (one round, tiny sizes: the test script's check that it runs), PIN/SERVER_CPUS/
# BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN. Loopback only; servers stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-200000}
BIG=${BENCH_BIG:-1000000}
QUEUE=${BENCH_QUEUE:-200000}
CLIENTS=${BENCH_CLIENTS:-50}
CONSUMERS=${BENCH_CONSUMERS:-8}
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 N=2000 BIG=2000 QUEUE=2000
fi
MIDDLE=$((BIG / 2))
mapfile -t LABELS < <(common_labels)

# --- the data: RESP request files for redis-cli --pipe -----------------------------------
# req ARG… : one request in RESP.
python3 - "$BIG" "$QUEUE" "$TMP/big.resp" "$TMP/queue.resp" <<'PY'
import sys
big, queue, big_path, queue_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def req(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
with open(big_path, "wb") as f:
    for i in range(1, big + 1):
        f.write(req("XADD", "big", "%d-0" % i, "user", i % 10007, "kind", "k%d" % (i % 7), "n", i))
with open(queue_path, "wb") as f:
    f.write(req("DEL", "q"))
    for i in range(1, queue + 1):
        f.write(req("XADD", "q", "%d-0" % i, "job", i, "queue", "default", "try", 0))
    f.write(req("XGROUP", "CREATE", "q", "g", "0"))
PY

# --- servers ---------------------------------------------------------------------------------
free_ports 1; EP=$PORT
mkdir -p "$TMP/engine"
(cd "$TMP/engine" && exec "${SRV[@]}" "$BIN" server --port "$EP" --bind 127.0.0.1) >"$TMP/engine.log" 2>&1 &
PIDS+=($!)
EPID=$!
wait_port "$EP"
free_ports 1; RP=$PORT
start_redis "$RP"
RPID=${PIDS[-1]}
declare -A PORT_OF=([recached]=$EP [redis]=$RP)
declare -A PID_OF=([recached]=$EPID [redis]=$RPID)
SYSTEMS=(recached redis)
echo "streams: $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, $CPU_PLACEMENT" >&2

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
used_memory() { redis-cli -p "$1" INFO memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)$/\1/p'; }
pipe_in() { # PORT FILE
    local out
    out=$(redis-cli -p "$1" --pipe <"$2" 2>&1)
    echo "$out" | grep -q 'errors: 0, replies:' || { echo "$0: redis-cli --pipe into $1: $out" >&2; exit 1; }
}

# --- RSS of the big stream, once per server ----------------------------------------------------
: >"$TMP/memory.csv"
for s in "${SYSTEMS[@]}"; do
    p=${PORT_OF[$s]}
    before=$(rss_kb "${PID_OF[$s]}")
    pipe_in "$p" "$TMP/big.resp"
    len=$(redis-cli -p "$p" XLEN big)
    [ "$len" = "$BIG" ] || { echo "$0: $s: XLEN big is $len, not $BIG" >&2; exit 1; }
    sleep 1
    after=$(rss_kb "${PID_OF[$s]}")
    echo "$s,$before,$after,$(used_memory "$p")" >>"$TMP/memory.csv"
done

: >"$TMP/rows.csv"
consume() { # SYSTEM ROUND
    local s=$1 round=$2 line
    pipe_in "${PORT_OF[$s]}" "$TMP/queue.resp"
    line=$(gen "$BENCH_BIN" stream-consume --target "127.0.0.1:${PORT_OF[$s]}" --clients "$CONSUMERS" \
        --count 10 --out "$RESULTS/streams-$RUN_ID-$s-consume-r$round.json" "${LABELS[@]}" \
        --label suite=streams --label "system=$s" --label workload=CONSUME --label "round=$round")
    entries=$(echo "$line" | awk '{print $4}')
    [ "$entries" = "$QUEUE" ] || { echo "$0: $s: the consumers got $entries entries, not $QUEUE ($line)" >&2; exit 1; }
    pending=$(redis-cli -p "${PORT_OF[$s]}" XPENDING q g | head -1)
    [ "$pending" = 0 ] || { echo "$0: $s: $pending entries still pending after the loop" >&2; exit 1; }
    echo "$s,CONSUME,entries_per_s,$(echo "$line" | awk '{print $10}')" >>"$TMP/rows.csv"
}

for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(recached redis); else order=(redis recached); fi
    for s in "${order[@]}"; do
        echo "round $round/$ROUNDS: $s" >&2
        redis-cli -p "${PORT_OF[$s]}" DEL s >/dev/null
        rb_run streams "$s" XADD "$round" XADD 16 "$N" XADD s '*' f v
        rb_run streams "$s" XRANGE "$round" XRANGE 16 $((N / 10)) XRANGE big "$MIDDLE" + COUNT 100
        consume "$s" "$round"
    done
done

MEDIANS="$RESULTS/streams-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, 'NR > 1 { med[$1 "," $2] = $4 }
    END {
        printf "%-9s %12s %12s %8s  %s\n", "workload", "recached", "redis", "ratio", "threshold"
        split("XADD XRANGE CONSUME", W, " ")
        for (i = 1; i <= 3; i++) {
            a = med["recached," W[i]]; b = med["redis," W[i]]
            r = (b > 0) ? a / b : 0
            printf "%-9s %12s %12s %7.2fx  %s\n", W[i], a, b, r, (r >= 1.0) ? "PASS (>= 1.00x)" : "BELOW (>= 1.00x)"
        }
    }' "$MEDIANS"
awk -F, '{ before[$1] = $2; after[$1] = $3; used[$1] = $4 }
    END {
        r = after["recached"] / after["redis"]
        printf "%-9s %9.1f MiB %9.1f MiB %7.2fx  %s\n", "RSS", after["recached"] / 1024, after["redis"] / 1024, r, (r <= 1.1) ? "PASS (<= 1.10x)" : "ABOVE (<= 1.10x)"
        a = after["recached"] - before["recached"]; b = after["redis"] - before["redis"]
        printf "%-9s %9.1f MiB %9.1f MiB %7.2fx  (RSS over the empty server)\n", "RSS-net", a / 1024, b / 1024, (b > 0) ? a / b : 0
        printf "%-9s %9.1f MiB %9.1f MiB %7.2fx  (INFO used_memory)\n", "used", used["recached"] / 1048576, used["redis"] / 1048576, used["recached"] / used["redis"]
    }' "$TMP/memory.csv"
echo "(medians over $ROUNDS interleaved rounds; XADD/XRANGE: requests/s, $CLIENTS clients, -P 16;"
echo " CONSUME: entries/s, $CONSUMERS consumers, COUNT 10; RSS: one stream of $BIG entries of 3 fields)"
cp "$TMP/memory.csv" "$RESULTS/streams-$RUN_ID-memory.csv"
echo "results: $MEDIANS, streams-$RUN_ID-memory.csv and streams-$RUN_ID-*.json"
