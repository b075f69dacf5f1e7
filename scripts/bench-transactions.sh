#!/usr/bin/env bash
# Transactions' performance clause (issue 20) in one run, interleaved rounds:
#
#   (a) single   MULTI DECRBY a INCRBY b EXEC through the proxy of a 2-engine fleet, both keys
#                with one hash tag (one engine: the fast path, no coordination)
#   (b) cross    the same transaction with a on engine 0 and b on engine 1 (the proxy locks
#                both engines' keys with TXLOCK, then EXEC + TXUNLOCK on both: proxy/src/coord.rs)
#   (c) redis    the same transaction on one redis-server (--save '' --appendonly no)
#   (d) GET/SET  unrelated single-key traffic through the same proxy (redis-benchmark -t set,get,
#                -P 16 and -P 1), alone and while cross-engine transactions run in the background
#                at BENCH_BG_RATE (1,000) per second
#   (e) RENAME of a key between engines through the proxy (gathered on one engine:
#       docs/transactions.md), on one engine through the proxy, and on one redis-server:
#       `recached-bench tx-loop --op rename`, each connection renaming its own key back and forth
#   (f) EVALSHA of a transfer script (DECRBY KEYS[1], INCRBY KEYS[2]) with its keys on two
#       engines through the proxy, on one engine through the proxy, and on one redis-server:
#       redis-benchmark, unpipelined (BENCH_CLIENTS clients)
#
#   scripts/bench-transactions.sh
#   BENCH_ROUNDS=5 scripts/bench-transactions.sh
#
# redis-benchmark repeats one command and cannot send MULTI…EXEC as a unit, so the
# transactions come from recached-bench: the peak from `recached-bench tx-loop` (closed loop:
# BENCH_CLIENTS connections, each writing the four commands in one go, as a client library's
# transactional pipeline does, and waiting for the EXEC before the next; 10,000 random keys per
# side; ops/s = transactions/s); then (b) and (c) at 50 % of this round's peak from the
# open-loop generator (`recached-bench run --mix tx:1`: Poisson arrivals over BENCH_CLIENTS
# connections, latency from each transaction's intended start, so no coordinated omission;
# its `lag` p99 says when the generator itself fell behind). Every EXEC must answer an array;
# any other answer fails the script. The hash tags are found by asking engine 0 which tags it
# owns (-MOVED for the others).
#
# Each round runs every part from an empty keyspace (FLUSHALL), the order of (a)(b)(c) (and of
# (e), (f)) reversed every other round, and (d) alone/with-background alternating. Prints the medians of
# the rounds, the ratio (b)/(c) (target >= 0.3) and (a)/(c), and the reduction of (d)'s
# throughput with the background transactions (target <= 10 %). A figure off its target does
# not fail the script (a noisy shared machine); an error does.
#
# Writes one JSON per run (`recached-bench tx-loop` / `redis-benchmark`, labels
# suite=transactions, system, workload, round) and transactions-RUN-medians.csv to
# bench/results (BENCH_RESULTS).
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5 s counted per transaction run, after 1 s of
# warm-up), BENCH_CLIENTS (50), BENCH_N (500000 GET/SET requests pipelined; a fifth
# unpipelined), BENCH_BG_RATE (1000), BENCH_PARTS (all; `d`: only GET/SET alone and with the
# background transactions, for many rounds of that noisy clause), BENCH_SMOKE=1 (one round,
# tiny sizes), PIN/SERVER_CPUS/
# BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN. Loopback only; servers stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ROUNDS=${BENCH_ROUNDS:-3}
PARTS=${BENCH_PARTS:-all}
case "$PARTS" in all | d) ;; *) echo "$0: BENCH_PARTS is all or d" >&2; exit 2 ;; esac
SECS=${BENCH_SECONDS:-5}
WARM=1
CLIENTS=${BENCH_CLIENTS:-50}
N=${BENCH_N:-500000}
BG_RATE=${BENCH_BG_RATE:-1000}
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 SECS=1 WARM=0.2 N=5000
fi
mapfile -t LABELS < <(common_labels)

# --- servers -------------------------------------------------------------------------------
free_ports 2; FE=$PORT
free_ports 1; FP=$PORT
start_fleet 2 "$TMP/fleet" "$FP" "$FE"
free_ports 1; RP=$PORT
start_redis "$RP"

# Hash tags on engine 0 and on engine 1: engine 0 answers -MOVED for a key it does not own.
TAG0="" TAG1=""
for i in $(seq 0 200); do
    if redis-cli -p "$FE" EXISTS "{t$i}" 2>&1 | grep -q MOVED; then
        [ -n "$TAG1" ] || TAG1="t$i"
    else
        [ -n "$TAG0" ] || TAG0="t$i"
    fi
    [ -z "$TAG0" ] || [ -z "$TAG1" ] || break
done
[ -n "$TAG0" ] && [ -n "$TAG1" ] || { echo "$0: no hash tags on both engines" >&2; exit 1; }
redis-cli -p $((FE + 1)) EXISTS "{$TAG1}" | grep -qx 0 \
    || { echo "$0: {$TAG1} is not on engine 1" >&2; exit 1; }

declare -A PORT_OF=([proxy]=$FP [redis]=$RP)
declare -A KEY_A=([single]="{$TAG0}:a:__rand_int__" [cross]="{$TAG0}:a:__rand_int__" [redis]="a:__rand_int__")
declare -A KEY_B=([single]="{$TAG0}:b:__rand_int__" [cross]="{$TAG1}:b:__rand_int__" [redis]="b:__rand_int__")
# The open-loop generator's key prefixes (the key number is appended).
declare -A PREFIX_A=([cross]="{$TAG0}:a:" [redis]="a:")
declare -A PREFIX_B=([cross]="{$TAG1}:b:" [redis]="b:")
# (e) RENAME and (f) EVALSHA keys.
declare -A RKEY_A=([rename-single]="{$TAG0}:ra:__rand_int__" [rename-cross]="{$TAG0}:ra:__rand_int__" [rename-redis]="ra:__rand_int__")
declare -A RKEY_B=([rename-single]="{$TAG0}:rb:__rand_int__" [rename-cross]="{$TAG1}:rb:__rand_int__" [rename-redis]="rb:__rand_int__")
declare -A SKEY_A=([script-single]="{$TAG0}:sa:__rand_int__" [script-cross]="{$TAG0}:sa:__rand_int__" [script-redis]="sa:__rand_int__")
declare -A SKEY_B=([script-single]="{$TAG0}:sb:__rand_int__" [script-cross]="{$TAG1}:sb:__rand_int__" [script-redis]="sb:__rand_int__")
TRANSFER="redis.call('DECRBY', KEYS[1], ARGV[1]) return redis.call('INCRBY', KEYS[2], ARGV[1])"
echo "transactions: $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, tags {$TAG0} (engine 0) {$TAG1} (engine 1), $CPU_PLACEMENT" >&2

: >"$TMP/rows.csv"
# tx_run SYSTEM WORKLOAD ROUND PORT KEY_A KEY_B [tx-loop args…]: one tx-loop run, its JSON in
# $RESULTS, rows "SYSTEM,WORKLOAD,tps|p50_us|p99_us,value" in rows.csv; TPS is set to its
# transactions/s. Any failed EXEC or run stops the script.
tx_run() {
    local s=$1 w=$2 round=$3 port=$4 ka=$5 kb=$6 out log line errors
    shift 6
    out="$RESULTS/transactions-$RUN_ID-$s-$w-r$round.json"
    log="$TMP/tx-$s-$w-r$round.log"
    if ! gen "$BENCH_BIN" tx-loop --target "127.0.0.1:$port" --clients "$CLIENTS" \
        --key-a "$ka" --key-b "$kb" --seconds "$SECS" --warmup "$WARM" "$@" --out "$out" \
        "${LABELS[@]}" --label suite=transactions --label "system=$s" --label "workload=$w" \
        --label "round=$round" --label "rounds=$ROUNDS" >"$log" 2>&1; then
        echo "$0: $s $w: tx-loop failed:" >&2
        tail -n 5 "$log" >&2
        exit 1
    fi
    line=$(grep '^transactions ' "$log")
    errors=$(awk '{print $NF}' <<<"$line")
    if [ "$errors" != 0 ]; then
        echo "$0: $s $w: failed transactions: $(cat "$log")" >&2
        exit 1
    fi
    TPS=$(awk '{print $6}' <<<"$line")
    awk -v s="$s" -v w="$w" '{ printf "%s,%s,tps,%s\n%s,%s,p50_us,%s\n%s,%s,p99_us,%s\n", s, w, $6, s, w, $8, s, w, $10 }' \
        <<<"$line" >>"$TMP/rows.csv"
    echo "  $s $w: $line" >&2
}

# half_run SYSTEM WORKLOAD ROUND PORT RATE: the open-loop generator at RATE transactions/s
# for BENCH_SECONDS, rows "SYSTEM,WORKLOAD-half,tps|p50_us|p99_us|lag_p99_us,value".
half_run() {
    local s=$1 w=$2 round=$3 port=$4 rate=$5 out log line
    out="$RESULTS/transactions-$RUN_ID-$s-$w-half-r$round.json"
    log="$TMP/half-$s-$w-r$round.log"
    if ! gen "$BENCH_BIN" run --target "127.0.0.1:$port" --mix tx:1 --rate "$rate" \
        --connections "$CLIENTS" --threads 2 --duration "$SECS" --warmup "$WARM" --keys 10000 \
        --key-prefix "${PREFIX_A[$w]}" --tx-key-b-prefix "${PREFIX_B[$w]}" --out "$out" \
        "${LABELS[@]}" --label suite=transactions --label "system=$s" --label "workload=$w-half" \
        --label "round=$round" --label "rounds=$ROUNDS" >"$log" 2>&1; then
        echo "$0: $s $w at $rate/s: the generator failed:" >&2
        tail -n 5 "$log" >&2
        exit 1
    fi
    line=$(grep '^target ' "$log")
    # target … rate R/s: achieved X/s, ok N, errors E, latency µs p50 P p90 … p99 Q … lag p99 L)
    sed -E 's/.*achieved ([0-9.]+)\/s, ok [0-9]+, errors ([0-9]+), latency µs p50 ([0-9]+) p90 [0-9]+ p99 ([0-9]+) .*lag p99 ([0-9]+)\).*/\1 \2 \3 \4 \5/' \
        <<<"$line" | {
        read -r tps errors p50 p99 lag
        if [ "$errors" != 0 ]; then
            echo "$0: $s $w at $rate/s: failed transactions: $line" >&2
            exit 1
        fi
        printf '%s,%s-half,tps,%s\n%s,%s-half,p50_us,%s\n%s,%s-half,p99_us,%s\n%s,%s-half,lag_p99_us,%s\n' \
            "$s" "$w" "$tps" "$s" "$w" "$p50" "$s" "$w" "$p99" "$s" "$w" "$lag" >>"$TMP/rows.csv"
    } || exit 1
    echo "  $s $w at $rate/s: $line" >&2
}

# getset ROUND MODE: redis-benchmark SET then GET through the proxy, -P 16 then -P 1, rows
# "proxy,MODE-P16|MODE-P1,SET|GET,rps".
getset() {
    local round=$1 mode=$2 t
    for t in SET GET; do
        rb_run transactions proxy "$mode-P16" "$round" "$t" 16 "$N" -t "${t,,}" -r 100000 -d 64
    done
    for t in SET GET; do
        rb_run transactions proxy "$mode-P1" "$round" "$t" 1 $((N / 5)) -t "${t,,}" -r 100000 -d 64
    done
}

for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=(single cross redis); else order=(redis cross single); fi
    echo "round $round/$ROUNDS" >&2
    declare -A PEAK=()
    [ "$PARTS" = all ] && for w in "${order[@]}"; do
        flush "$FP" "$RP"
        if [ "$w" = redis ]; then s=redis; else s=proxy; fi
        tx_run "$s" "$w" "$round" "${PORT_OF[$s]}" "${KEY_A[$w]}" "${KEY_B[$w]}"
        PEAK[$w]=$TPS
    done
    # (e) RENAME and (f) EVALSHA: one engine, two engines, redis-server.
    if [ $((round % 2)) = 1 ]; then ef=(single cross redis); else ef=(redis cross single); fi
    [ "$PARTS" = all ] && for v in "${ef[@]}"; do
        flush "$FP" "$RP"
        if [ "$v" = redis ]; then s=redis; else s=proxy; fi
        tx_run "$s" "rename-$v" "$round" "${PORT_OF[$s]}" "${RKEY_A[rename-$v]}" "${RKEY_B[rename-$v]}" --op rename
    done
    [ "$PARTS" = all ] && for v in "${ef[@]}"; do
        flush "$FP" "$RP"
        if [ "$v" = redis ]; then s=redis; else s=proxy; fi
        sha=$(redis-cli -p "${PORT_OF[$s]}" SCRIPT LOAD "$TRANSFER")
        [ "${#sha}" = 40 ] || { echo "$0: $s: SCRIPT LOAD answered: $sha" >&2; exit 1; }
        rb_run transactions "$s" "script-$v" "$round" EVALSHA 1 $((N / 5)) -r 10000 \
            EVALSHA "$sha" 2 "${SKEY_A[script-$v]}" "${SKEY_B[script-$v]}" 1
    done
    # (b) and (c) at half of this round's peak, open loop.
    [ "$PARTS" = all ] && for w in cross redis; do
        flush "$FP" "$RP"
        if [ "$w" = redis ]; then s=redis; else s=proxy; fi
        half_run "$s" "$w" "$round" "${PORT_OF[$s]}" "$(awk -v p="${PEAK[$w]}" 'BEGIN { printf "%.0f", p / 2 }')"
    done
    # (d) GET/SET alone, with cross-engine transactions in the background, and (the control)
    # with the same background transactions sent to the redis-server instead: what the
    # background's generator alone costs the foreground on this host.
    if [ $((round % 2)) = 1 ]; then modes=(alone with-tx with-tx-elsewhere); else modes=(with-tx-elsewhere with-tx alone); fi
    for mode in "${modes[@]}"; do
        flush "$FP" "$RP"
        if [ "$mode" = alone ]; then
            getset "$round" alone
            continue
        fi
        if [ "$mode" = with-tx ]; then
            bgport=$FP bgsys=proxy ka="{$TAG0}:bga:__rand_int__" kb="{$TAG1}:bgb:__rand_int__"
        else
            bgport=$RP bgsys=redis ka="bga:__rand_int__" kb="bgb:__rand_int__"
        fi
        stop="$TMP/stop-bg-$mode-$round"
        rm -f "$stop"
        bglog="$TMP/bg-$mode-$round.log"
        gen "$BENCH_BIN" tx-loop --target "127.0.0.1:$bgport" --clients 4 --rate "$BG_RATE" \
            --key-a "$ka" --key-b "$kb" \
            --seconds 3600 --stop-file "$stop" \
            --out "$RESULTS/transactions-$RUN_ID-$bgsys-background-r$round.json" "${LABELS[@]}" \
            --label suite=transactions --label system=$bgsys --label workload=background \
            --label "round=$round" --label "rounds=$ROUNDS" >"$bglog" 2>&1 &
        bg=$!
        PIDS+=("$bg")
        sleep 1
        getset "$round" "$mode"
        touch "$stop"
        wait "$bg" || { echo "$0: background tx-loop failed: $(cat "$bglog")" >&2; exit 1; }
        line=$(grep '^transactions ' "$bglog")
        [ "$(awk '{print $NF}' <<<"$line")" = 0 ] || { echo "$0: background: $(cat "$bglog")" >&2; exit 1; }
        echo "  background ($bgsys): $line" >&2
        awk -v s="$bgsys" '{ printf "%s,background,tps,%s\n", s, $6 }' <<<"$line" >>"$TMP/rows.csv"
    done
done

# --- medians and the clause ----------------------------------------------------------------
MEDIANS="$RESULTS/transactions-$RUN_ID-medians.csv"
{
    echo "system,workload,test,median,rounds"
    median_rows "$TMP/rows.csv"
} >"$MEDIANS"

echo
awk -F, -v bg="$BG_RATE" 'NR > 1 { med[$1 "," $2 "," $3] = $4 }
    function m(k) { return (k in med) ? med[k] : 0 }
    END {
        printf "%-44s %10s %10s %10s %14s\n", "transaction (MULTI DECRBY INCRBY EXEC)", "tx/s", "p50 ms", "p99 ms", "gen. lag p99"
        split("proxy,single proxy,cross redis,redis proxy,cross-half redis,redis-half", R, " ")
        split("(a) one engine, through the proxy|(b) two engines, through the proxy|(c) one redis-server|(b) at 50 % of its peak (open loop)|(c) at 50 % of its peak (open loop)", L, "|")
        for (i = 1; i <= 5; i++) {
            lag = (i > 3) ? sprintf("%.2f ms", m(R[i] ",lag_p99_us") / 1000) : "-"
            printf "%-44s %10s %10.2f %10.2f %14s\n", L[i], m(R[i] ",tps"), m(R[i] ",p50_us") / 1000, m(R[i] ",p99_us") / 1000, lag
        }
        c = m("redis,redis,tps")
        rb = (c > 0) ? m("proxy,cross,tps") / c : 0
        ra = (c > 0) ? m("proxy,single,tps") / c : 0
        printf "\n(b)/(c) = %.2fx  (target >= 0.30x: %s)\n", rb, (rb >= 0.3) ? "PASS" : "BELOW"
        printf "(a)/(c) = %.2fx  (reported)\n", ra
        printf "\n%-44s %10s %10s %10s\n", "(e) RENAME of a key, back and forth", "ops/s", "p50 ms", "p99 ms"
        split("one engine, through the proxy|two engines, through the proxy|one redis-server", E, "|")
        split("proxy,rename-single proxy,rename-cross redis,rename-redis", RE, " ")
        for (i = 1; i <= 3; i++)
            printf "%-44s %10s %10.2f %10.2f\n", E[i], m(RE[i] ",tps"), m(RE[i] ",p50_us") / 1000, m(RE[i] ",p99_us") / 1000
        rr = m("redis,rename-redis,tps")
        printf "RENAME two engines / redis-server = %.2fx (reported)\n", (rr > 0) ? m("proxy,rename-cross,tps") / rr : 0
        printf "\n%-44s %10s\n", "(f) EVALSHA transfer script (2 keys), -P 1", "ops/s"
        split("proxy,script-single proxy,script-cross redis,script-redis", SE, " ")
        for (i = 1; i <= 3; i++)
            printf "%-44s %10s\n", E[i], m(SE[i] ",EVALSHA")
        sr = m("redis,script-redis,EVALSHA")
        printf "EVALSHA two engines / redis-server = %.2fx, one engine / redis-server = %.2fx (reported)\n",
            (sr > 0) ? m("proxy,script-cross,EVALSHA") / sr : 0, (sr > 0) ? m("proxy,script-single,EVALSHA") / sr : 0
        printf "\n%-22s %10s %10s %10s %10s %12s\n", "GET/SET through the proxy", "alone", "with tx", "reduction", "control", "vs control"
        split("P16 P1", P, " "); split("SET GET", T, " ")
        worst = 0; worstc = 0
        for (i = 1; i <= 2; i++) for (j = 1; j <= 2; j++) {
            a = m("proxy,alone-" P[i] "," T[j]); w = m("proxy,with-tx-" P[i] "," T[j])
            e = m("proxy,with-tx-elsewhere-" P[i] "," T[j])
            red = (a > 0) ? (1 - w / a) * 100 : 0
            redc = (e > 0) ? (1 - w / e) * 100 : 0
            if (red > worst) worst = red
            if (redc > worstc) worstc = redc
            printf "%-22s %10s %10s %9.1f%% %10s %11.1f%%\n", T[j] " -" P[i], a, w, red, e, redc
        }
        printf "background: %s cross-engine tx/s (asked %s/s); worst reduction %.1f%% (target <= 10%%: %s)\n",
            m("proxy,background,tps"), bg, worst, (worst <= 10) ? "PASS" : "ABOVE"
        printf "control: the same background sent to the redis-server (%s tx/s); worst reduction against it %.1f%% (what the fleet itself costs)\n",
            m("redis,background,tps"), worstc
    }' "$MEDIANS"
echo "(medians over $ROUNDS interleaved rounds; $CLIENTS connections, one transaction in flight each; a fleet of 2 engines; $CPU_PLACEMENT)"
echo "results: $MEDIANS and transactions-$RUN_ID-*.json"
