#!/usr/bin/env bash
# Cross-system comparison in one run (issue 9), interleaved rounds, same workloads and settings:
#
#   recached-proxy   a recached fleet of N engines, through its proxy
#   recached-direct  the same fleet, direct to the engines (cluster protocol)
#   redis            one redis-server
#   redis-xN         N independent redis-servers, sharded by the client
#   nutcracker       nutcracker (twemproxy) in front of the same N redis-servers
#   redis-cluster    a real N-node Redis Cluster (cluster-enabled, ADDSLOTSRANGE, MEET)
#
#   scripts/bench-systems.sh
#   SYSTEMS_N=2 BENCH_ROUNDS=3 SYS_RATE=10000 scripts/bench-systems.sh
#
# Per round (the system order rotates every round), against each system from an empty keyspace:
#   1. throughput: redis-benchmark SET, GET, INCR, 100,000 random keys, 64-byte values,
#      BENCH_CLIENTS clients, pipeline BENCH_PIPELINE (for redis-xN: one redis-benchmark per
#      server at the same time with 1/N of the clients and requests; the report sums them);
#   2. latency: `recached-bench run` open loop at SYS_RATE requests/s, GET 90% / SET 10%, uniform
#      over 100,000 keys, 64-byte values, SYS_CONNS connections in all, SYS_SECONDS measured.
# Every measurement is one JSON file in bench/results/ (BENCH_RESULTS) labelled suite=systems.
#
# Environment: SYSTEMS_N (2), BENCH_ROUNDS (3), BENCH_N (100000 requests per test),
# BENCH_CLIENTS (50), BENCH_PIPELINE (1), SYS_RATE (10000), SYS_CONNS (8), SYS_SECONDS (10),
# BENCH_SMOKE=1 (~30 s version), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN, RECACHED_BENCH_BIN.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
command -v nutcracker >/dev/null || { echo "$0: nutcracker not found (apt-get install nutcracker)" >&2; exit 1; }

NN=${SYSTEMS_N:-2}
ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-100000}
CLIENTS=${BENCH_CLIENTS:-50}
PIPE=${BENCH_PIPELINE:-1}
RATE=${SYS_RATE:-10000}
CONNS=${SYS_CONNS:-8}
SECONDS_=${SYS_SECONDS:-10}
WARMUP=1
if [ "$SMOKE" = 1 ]; then
    ROUNDS=1 N=3000 RATE=2000 SECONDS_=1 WARMUP=0.5
fi
[ "$NN" -ge 2 ] || { echo "$0: SYSTEMS_N must be ≥ 2 (redis-benchmark --cluster needs 2 nodes)" >&2; exit 2; }
mapfile -t LABELS < <(common_labels)

# --- servers ---------------------------------------------------------------------------
free_ports "$NN"; FE=$PORT
free_ports 1; FP=$PORT
start_fleet "$NN" "$TMP/fleet" "$FP" "$FE"
free_ports 1; R1=$PORT
start_redis "$R1"
free_ports "$NN"; RN=$PORT
for ((i = 0; i < NN; i++)); do start_redis $((RN + i)); done
free_ports 1; NUT=$PORT
free_ports 1; NUT_STATS=$PORT
{
    echo "bench:"
    echo "  listen: 127.0.0.1:$NUT"
    echo "  hash: fnv1a_64"
    echo "  distribution: ketama"
    echo "  redis: true"
    echo "  auto_eject_hosts: false"
    echo "  timeout: 5000"
    echo "  servers:"
    for ((i = 0; i < NN; i++)); do echo "   - 127.0.0.1:$((RN + i)):1"; done
} >"$TMP/nutcracker.yml"
"${SRV[@]}" nutcracker -c "$TMP/nutcracker.yml" -s "$NUT_STATS" -a 127.0.0.1 -o "$TMP/nutcracker.log" \
    -p "$TMP/nutcracker.pid" &
PIDS+=($!)
wait_port "$NUT"
free_ports "$NN" 22000; RC=$PORT
for ((i = 0; i < NN; i++)); do start_redis $((RC + i)) --cluster-enabled yes --cluster-config-file nodes.conf; done
for ((i = 0; i < NN; i++)); do
    lo=$((16384 * i / NN)); hi=$((16384 * (i + 1) / NN - 1))
    redis-cli -p $((RC + i)) CLUSTER ADDSLOTSRANGE "$lo" "$hi" >/dev/null
    [ "$i" = 0 ] || redis-cli -p "$RC" CLUSTER MEET 127.0.0.1 $((RC + i)) >/dev/null
done
for _ in $(seq 150); do
    ok=1
    for ((i = 0; i < NN; i++)); do
        redis-cli -p $((RC + i)) CLUSTER INFO | grep -q 'cluster_state:ok' || ok=0
        [ "$(redis-cli -p $((RC + i)) CLUSTER NODES | wc -l)" = "$NN" ] || ok=0
    done
    [ $ok = 1 ] && break
    sleep 0.2
done
[ $ok = 1 ] || { echo "$0: redis cluster did not form" >&2; exit 1; }

ports() { local b=$1 i; for ((i = 0; i < NN; i++)); do echo -n "$((b + i)) "; done; }
targets() { local b=$1 i out=""; for ((i = 0; i < NN; i++)); do out+="127.0.0.1:$((b + i)),"; done; echo "${out%,}"; }
declare -A FLUSH=([recached-proxy]="$(ports "$FE")" [recached-direct]="$(ports "$FE")" [redis]="$R1"
    [redis-xN]="$(ports "$RN")" [nutcracker]="$(ports "$RN")" [redis-cluster]="$(ports "$RC")")
declare -A RB=([recached-proxy]="-p $FP" [recached-direct]="-p $FE --cluster" [redis]="-p $R1"
    [nutcracker]="-p $NUT" [redis-cluster]="-p $RC --cluster")
declare -A LG=([recached-proxy]="--target 127.0.0.1:$FP" [recached-direct]="--target 127.0.0.1:$FE --cluster"
    [redis]="--target 127.0.0.1:$R1" [redis-xN]="--target $(targets "$RN")" [nutcracker]="--target 127.0.0.1:$NUT"
    [redis-cluster]="--target 127.0.0.1:$RC --cluster")
declare -A NODES=([recached-proxy]=1 [recached-direct]=$NN [redis]=1 [redis-xN]=$NN [nutcracker]=1 [redis-cluster]=$NN)
SYSTEMS=(recached-proxy recached-direct redis redis-xN nutcracker redis-cluster)
echo "systems: N=$NN, $ROUNDS rounds, recached $RECACHED_VERSION, redis $REDIS_VERSION, nutcracker $NUTCRACKER_VERSION, $CPU_PLACEMENT" >&2

for round in $(seq "$ROUNDS"); do
    k=$(( (round - 1) % ${#SYSTEMS[@]} ))
    order=("${SYSTEMS[@]:k}" "${SYSTEMS[@]:0:k}")
    for sys in "${order[@]}"; do
        idx=0
        for ((j = 0; j < ${#SYSTEMS[@]}; j++)); do [ "${SYSTEMS[j]}" = "$sys" ] && idx=$j; done
        labels=("${LABELS[@]}" --label suite=systems --label "system=$sys" --label "sys_order=$idx" --label "round=$round"
            --label "rounds=$ROUNDS" --label "nodes=$NN" --label "pipeline=$PIPE")
        echo "round $round/$ROUNDS: $sys" >&2
        # shellcheck disable=SC2086 # FLUSH lists ports
        flush ${FLUSH[$sys]}
        rb=(-t set,get,incr -r 100000 -d 64 -P "$PIPE")
        if [ "$sys" = redis-xN ]; then
            bg=()
            for ((i = 0; i < NN; i++)); do
                gen "$BENCH_BIN" redis-benchmark --out "$RESULTS/systems-$RUN_ID-$sys-rb-r$round-part$i.json" \
                    "${labels[@]}" --label "part=$i" -- -h 127.0.0.1 -p $((RN + i)) "${rb[@]}" \
                    -n $((N / NN)) -c $((CLIENTS / NN)) >/dev/null &
                bg+=($!)
            done
            for p in "${bg[@]}"; do wait "$p"; done
        else
            # shellcheck disable=SC2086 # RB holds the port and maybe --cluster
            gen "$BENCH_BIN" redis-benchmark --out "$RESULTS/systems-$RUN_ID-$sys-rb-r$round.json" \
                "${labels[@]}" -- -h 127.0.0.1 ${RB[$sys]} "${rb[@]}" -n "$N" -c "$CLIENTS" >/dev/null
        fi
        # shellcheck disable=SC2086
        flush ${FLUSH[$sys]}
        conns=$(( CONNS / ${NODES[$sys]} )); [ "$conns" -ge 1 ] || conns=1
        # shellcheck disable=SC2086 # LG holds --target and maybe --cluster
        gen "$BENCH_BIN" run ${LG[$sys]} --rate "$RATE" --duration "$SECONDS_" --warmup "$WARMUP" \
            --connections "$conns" --mix get:90,set:10 --keys 100000 --value-size 64 --seed "$round" \
            --out "$RESULTS/systems-$RUN_ID-$sys-lat-r$round.json" "${labels[@]}" >&2
    done
done

"$BENCH_BIN" report --results "$RESULTS" --out "$TMP/report.md" --svg-dir "$TMP/svg" >/dev/null
sed -n '/^## Systems/,/^## /p' "$TMP/report.md" | grep '^|'
