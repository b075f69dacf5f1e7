#!/usr/bin/env bash
# Deployment scenarios (issue 9): cache-aside in front of a simulated slow origin, each run with
# and without recached in the path on identical traffic.
#
#   scripts/bench-scenarios.sh
#
# The origin is `recached-bench origin`: every GET costs ORIGIN_LATENCY_MS of waiting (no CPU)
# plus ORIGIN_CPU_US of CPU serialised on one core (so it saturates near 1e6/ORIGIN_CPU_US GETs/s,
# like a loaded database). recached is a fleet of SCEN_ENGINES engines behind its proxy.
# Scenarios (key space, distribution, value size, TTL, rate):
#   per-user-ttl   20,000 `user:` keys, zipf 0.9, 512 B values, TTL 2 s   — sessions/profiles
#   hot-key        1,000 keys, zipf 1.2 (a few keys take most reads), 1 KB, TTL 10 s
#   large-values   500 keys, uniform, 64 KB values, TTL 30 s, at 1/5 of the rate
# Each scenario runs twice with the same seed, rate, keys and duration: *without* (GETs straight
# at the origin) and *with* (`recached-bench run --mode cache-aside`: GET at the proxy, on a miss
# GET at the origin and SET with the TTL), from an empty cache. The report shows origin calls
# (and their reduction), the hit ratio and p99 latency (from the intended start) side by side.
#
# Environment: SCEN_RATE (2000 requests/s), SCEN_SECONDS (10), SCEN_ENGINES (2), BENCH_ROUNDS (1),
# ORIGIN_LATENCY_MS (5), ORIGIN_CPU_US (300), BENCH_SMOKE=1, PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN,
# RECACHED_BENCH_BIN.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

RATE=${SCEN_RATE:-2000}
SECS=${SCEN_SECONDS:-10}
ENGINES=${SCEN_ENGINES:-2}
ROUNDS=${BENCH_ROUNDS:-1}
OLAT=${ORIGIN_LATENCY_MS:-5}
OCPU=${ORIGIN_CPU_US:-300}
WARMUP=1
if [ "$SMOKE" = 1 ]; then
    RATE=500 SECS=1 ROUNDS=1 WARMUP=0.5
fi
mapfile -t LABELS < <(common_labels)

free_ports "$ENGINES"; FE=$PORT
free_ports 1; FP=$PORT
start_fleet "$ENGINES" "$TMP/fleet" "$FP" "$FE"
engine_ports=()
for ((i = 0; i < ENGINES; i++)); do engine_ports+=($((FE + i))); done

# name | key prefix | keys | distribution | zipf s | value bytes | ttl ms | rate divisor
SCENARIOS=(
    "per-user-ttl|user:|20000|zipf|0.9|512|2000|1"
    "hot-key|item:|1000|zipf|1.2|1024|10000|1"
    "large-values|blob:|500|uniform|0.99|65536|30000|5"
)
echo "scenarios: origin ${OLAT} ms + ${OCPU} µs CPU per GET, rate $RATE/s, ${SECS} s, $ENGINES engines" >&2
for round in $(seq "$ROUNDS"); do
    for s in "${SCENARIOS[@]}"; do
        IFS='|' read -r name prefix keys dist zs vsize ttl div <<<"$s"
        free_ports 1; OP=$PORT
        "${SRV[@]}" "$BENCH_BIN" origin --port "$OP" --latency-ms "$OLAT" --cpu-us "$OCPU" \
            --value-size "$vsize" >"$TMP/origin-$OP.log" 2>&1 &
        opid=$!
        PIDS+=($opid)
        wait_port "$OP"
        shape=$dist; [ "$dist" = zipf ] && shape="zipf $zs"
        settings="$keys keys, $shape, ${vsize} B values, TTL ${ttl} ms, $((RATE / div))/s, origin ${OLAT} ms + ${OCPU} µs CPU"
        common=(--rate $((RATE / div)) --duration "$SECS" --warmup "$WARMUP" --connections 16 --keys "$keys"
            --key-prefix "$prefix" --distribution "$dist" --zipf-s "$zs" --value-size "$vsize" --seed "$round"
            --max-backlog 20000)
        labels=("${LABELS[@]}" --label suite=scenarios --label "scenario=$name" --label "round=$round"
            --label "rounds=$ROUNDS" --label "settings=$settings")
        for variant in without with; do
            flush "${engine_ports[@]}"
            echo "round $round/$ROUNDS: $name, $variant recached" >&2
            if [ "$variant" = without ]; then
                gen "$BENCH_BIN" run --target "127.0.0.1:$OP" --mix get:1 "${common[@]}" \
                    --out "$RESULTS/scenarios-$RUN_ID-$name-$variant-r$round.json" "${labels[@]}" --label variant=without >&2
            else
                gen "$BENCH_BIN" run --target "127.0.0.1:$FP" --mode cache-aside --origin "127.0.0.1:$OP" \
                    --ttl-ms "$ttl" "${common[@]}" \
                    --out "$RESULTS/scenarios-$RUN_ID-$name-$variant-r$round.json" "${labels[@]}" --label variant=with >&2
            fi
        done
        kill -TERM "$opid" 2>/dev/null || true
        wait "$opid" 2>/dev/null || true
    done
done

"$BENCH_BIN" report --results "$RESULTS" --out "$TMP/report.md" --svg-dir "$TMP/svg" >/dev/null
sed -n '/^## Deployment/,/^## /p' "$TMP/report.md" | grep '^|'
