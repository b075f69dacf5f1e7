#!/usr/bin/env bash
# How throughput scales with the engine count (issue 9): one release binary, only the number of
# engines varies.
#
#   scripts/bench-scaling.sh
#   ENGINES="1 2 4" BENCH_ROUNDS=3 scripts/bench-scaling.sh
#   PIN=1 SERVER_CPUS=0-5 BENCH_CPUS=6-7 scripts/bench-scaling.sh      # with taskset placement
#
# For each round and each engine count (the order rotates every round), a fresh fleet
# (`recached start --engines N`) is started; `recached status --json` must report N engines up
# before every measurement (recorded as engines_reported). With PIN=1 the supervisor is started
# under `taskset -c SERVER_CPUS` (its children inherit it) and redis-benchmark under
# `taskset -c BENCH_CPUS`; the CPU list the kernel reports for each fleet process is recorded
# (fleet_affinity), so a result says where it actually ran. On a host with fewer CPUs than
# engines + proxy + generator no placement can show scaling; the report says so. Then, through the proxy and direct to the engines (`redis-benchmark
# --cluster`), each from an empty keyspace:
#   kv          SET, GET, INCR over 100,000 random keys (-r 100000), 64-byte values
#   collection  LPUSH, SADD, HSET, ZADD, each into one key (redis-benchmark 7's own tests; the
#               elements vary over -r 100000, the key does not)
# Every measurement is one JSON file in bench/results/ (BENCH_RESULTS) labelled suite=scaling;
# at the end the scaling table (median per cell, change against the previous column) is printed
# from those files by `recached-bench report`.
#
# Environment: ENGINES ("1 2 4"), BENCH_ROUNDS (3), BENCH_N (requests per kv test, 200000),
# BENCH_N_COLL (per collection test, 100000), BENCH_CLIENTS (50), BENCH_PIPELINE (1),
# BENCH_SMOKE=1 (the test script's ~30 s version), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN,
# RECACHED_BENCH_BIN.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

ENGINES=${ENGINES:-"1 2 4"}
ROUNDS=${BENCH_ROUNDS:-3}
N=${BENCH_N:-200000}
NC=${BENCH_N_COLL:-100000}
CLIENTS=${BENCH_CLIENTS:-50}
PIPE=${BENCH_PIPELINE:-1}
if [ "$SMOKE" = 1 ]; then
    ENGINES=${ENGINES_SMOKE:-"1 2"} ROUNDS=1 N=5000 NC=2000
fi
read -ra ENGINE_LIST <<<"$ENGINES"
mapfile -t LABELS < <(common_labels)
echo "scaling: engines ${ENGINE_LIST[*]}, $ROUNDS rounds, recached $RECACHED_VERSION, $CPU_PLACEMENT" >&2

for round in $(seq "$ROUNDS"); do
    # Rotate the engine-count order so drift on a shared machine does not favour one column.
    k=$(( (round - 1) % ${#ENGINE_LIST[@]} ))
    order=("${ENGINE_LIST[@]:k}" "${ENGINE_LIST[@]:0:k}")
    for n in "${order[@]}"; do
        free_ports "$n"; base=$PORT
        free_ports 1; proxy=$PORT
        dir="$TMP/fleet-$round-$n"
        start_fleet "$n" "$dir" "$proxy" "$base"
        # With PIN=1, the CPUs each fleet process may run on, as the kernel reports them.
        affinity=$(fleet_affinity "$dir")
        engine_ports=()
        for ((i = 0; i < n; i++)); do engine_ports+=($((base + i))); done
        for path in proxy direct; do
            # redis-benchmark refuses --cluster with one node ("Invalid cluster: 1 node(s)"); a
            # lone engine owns every slot, so direct means plain redis-benchmark against it.
            if [ "$path" = proxy ]; then target=(-h 127.0.0.1 -p "$proxy")
            elif [ "$n" = 1 ]; then target=(-h 127.0.0.1 -p "$base")
            else target=(-h 127.0.0.1 -p "$base" --cluster); fi
            for workload in kv collection; do
                # Verified before every measurement, not only at start: an engine that died and
                # is being restarted would make this column measure fewer engines than it says.
                reported=$(fleet_engines "$dir")
                [ "$reported" = "$n" ] || { echo "$0: fleet reports $reported engines up, expected $n" >&2; exit 1; }
                flush "${engine_ports[@]}"
                if [ "$workload" = kv ]; then
                    tests=(-t set,get,incr -n "$N"); dist="uniform over 100000 keys (-r)"
                else
                    tests=(-t lpush,sadd,hset,zadd -n "$NC"); dist="one key per test (elements over -r 100000)"
                fi
                echo "round $round/$ROUNDS: $n engines, $path, $workload" >&2
                gen "$BENCH_BIN" redis-benchmark \
                    --out "$RESULTS/scaling-$RUN_ID-e$n-$path-$workload-r$round.json" "${LABELS[@]}" \
                    --label suite=scaling --label "engines=$n" --label "engines_reported=$reported" \
                    --label "fleet_affinity=$affinity" \
                    --label "path=$path" --label "workload=$workload" --label "round=$round" \
                    --label "rounds=$ROUNDS" --label "key_distribution=$dist" -- \
                    "${target[@]}" "${tests[@]}" -r 100000 -d 64 -c "$CLIENTS" -P "$PIPE" >/dev/null
            done
        done
        stop_fleet "$dir"
    done
done

"$BENCH_BIN" report --results "$RESULTS" --out "$TMP/report.md" --svg-dir "$TMP/svg" >/dev/null
sed -n '/^## Scaling/,/^## /p' "$TMP/report.md" | sed '$d' | grep -E '^\||^Engine counts'
