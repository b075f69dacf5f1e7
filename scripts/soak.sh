#!/usr/bin/env bash
# Stress/soak run in phases against one recached fleet through its proxy (issue 9):
#
#   scripts/soak.sh                      # SOAK_SECONDS=210: about 30 s per phase
#   SOAK_SECONDS=30 scripts/soak.sh      # the test script's version
#
# Phases (each an open-loop `recached-bench run`, errors counted per phase by kind):
#   ramp       three steps at 1/4, 1/2, 3/4 of SOAK_RATE
#   sustained  SOAK_RATE, GET 80% / SET 20%
#   burst      3 × SOAK_RATE
#   churn      1/2 × SOAK_RATE, every connection redialled after 50 replies
#   large      64 KB values, 1/20 × SOAK_RATE
#   eviction   4 KB SETs over a 1,000,000-key space with `CONFIG SET maxmemory` (SOAK_MAXMEMORY,
#              allkeys-lru) on every engine; check: each engine stays within its limit (skipped
#              when the engine refuses the CONFIG SET)
#   kill       SOAK_RATE while engine 0 is SIGKILLed a third of the way in; the supervisor
#              restarts it. Checks: every engine is up again, and keys written and SAVEd on
#              engine 0 before the kill are all there after the restart (the durability rule:
#              what a completed snapshot holds survives a crash; skipped when SAVE is refused).
#              Errors are expected in this phase only (requests to the dead engine).
# RSS of the whole fleet (supervisor + children) is sampled every 500 ms throughout. Every phase,
# check and the RSS series is one JSON file in bench/results/ (BENCH_RESULTS), suite=soak.
#
# Environment: SOAK_SECONDS (210), SOAK_RATE (5000), SOAK_ENGINES (2), SOAK_MAXMEMORY (32mb),
# BENCH_SMOKE=1 (sets SOAK_SECONDS=30 and a low rate), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN,
# RECACHED_BENCH_BIN.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

TOTAL=${SOAK_SECONDS:-210}
RATE=${SOAK_RATE:-5000}
ENGINES=${SOAK_ENGINES:-2}
MAXMEM=${SOAK_MAXMEMORY:-32mb}
if [ "$SMOKE" = 1 ]; then
    TOTAL=${SOAK_SECONDS:-30} RATE=1000
fi
# 7 phases; the ramp's three steps share one phase's time. At least 2 s each.
P=$(awk -v t="$TOTAL" 'BEGIN { p = t / 7; if (p < 2) p = 2; printf "%.1f", p }')
mapfile -t LABELS < <(common_labels)
[ "$ENGINES" -ge 2 ] || { echo "$0: SOAK_ENGINES must be ≥ 2 (the kill phase needs a survivor)" >&2; exit 2; }

free_ports "$ENGINES"; FE=$PORT
free_ports 1; FP=$PORT
start_fleet "$ENGINES" "$TMP/fleet" "$FP" "$FE"
engine_ports=()
for ((i = 0; i < ENGINES; i++)); do engine_ports+=($((FE + i))); done
pid_of() { # pid_of ROLE: from recached status --json
    { "$BIN" status --dir "$TMP/fleet" --json || true; } \
        | grep -o "\"role\":\"$1\",\"port\":[^,]*,\"pid\":[0-9]*" | sed 's/.*"pid"://' | head -1 || true
}
SUP=$(pid_of supervisor)
[ -n "$SUP" ] || { echo "$0: no supervisor pid in recached status --json" >&2; exit 1; }
"$BENCH_BIN" rss --ppid "$SUP" --interval-ms 500 --seconds $((TOTAL * 3 + 120)) \
    --out "$RESULTS/soak-$RUN_ID-rss.json" "${LABELS[@]}" --label suite=soak >/dev/null &
RSS_PID=$!
PIDS+=($RSS_PID)
echo "soak: $TOTAL s in 7 phases of $P s, rate $RATE/s, $ENGINES engines, $CPU_PLACEMENT" >&2

order=0
phase() { # phase NAME WHAT RATE [run args…]
    local name=$1 what=$2 rate=$3
    shift 3
    order=$((order + 1))
    echo "phase $order: $name ($what)" >&2
    gen "$BENCH_BIN" run --target "127.0.0.1:$FP" --rate "$rate" --warmup 0 --connections 16 \
        --seed "$order" --max-backlog 50000 "$@" \
        --out "$RESULTS/soak-$RUN_ID-$(printf %02d $order)-$name.json" "${LABELS[@]}" \
        --label suite=soak --label "phase=$name" --label "what=$what" --label "order=$order" >&2
}
check() { # check NAME OUTCOME DETAIL
    "$BENCH_BIN" check --name "$1" --outcome "$2" --detail "$3" \
        --out "$RESULTS/soak-$RUN_ID-check-$1.json" "${LABELS[@]}" --label suite=soak >&2
}
# The phases both soaks share (scripts/soak-phases.sh).
source "$(dirname "${BASH_SOURCE[0]}")/soak-phases.sh"
soak_phases GET SET

# Kill one engine mid-load. First: keys on engine 0, then SAVE (the durability promise).
E0=${engine_ports[0]}
redis-cli -p "$E0" FLUSHALL >/dev/null
for i in $(seq 1 2000); do echo "SET durable:$i v$i"; done | redis-cli -p "$FP" >/dev/null
owned=$(redis-cli -p "$E0" DBSIZE)
saved=$(redis-cli -p "$E0" SAVE 2>&1 || true)
( sleep "$(awk -v p="$P" 'BEGIN { print p / 3 }')"; kill -KILL "$(pid_of engine-0)" ) &
killer=$!
phase kill "engine 0 SIGKILLed at 1/3, restarted by the supervisor" "$RATE" --duration "$P" --mix get:80,set:20 \
    --key-prefix soak:
wait "$killer" || true
up=0
for _ in $(seq 150); do
    [ "$(fleet_engines "$TMP/fleet")" = "$ENGINES" ] && { up=1; break; }
    sleep 0.1
done
if [ $up = 1 ]; then
    check restart passed "all $ENGINES engines up again after the SIGKILL (recached status)"
else
    check restart failed "engine 0 not back within 15 s after the phase"
fi
if [ "$saved" = OK ] && [ $up = 1 ]; then
    back=$(redis-cli -p "$E0" DBSIZE)
    # Keys of the durable: set that engine 0 owns and still has (the kill phase wrote soak: keys).
    have=$(for i in $(seq 1 2000); do echo "EXISTS durable:$i"; done | redis-cli -p "$FP" | awk '{ s += $1 } END { print s }')
    if [ "$have" = 2000 ]; then
        check durability passed "engine 0 held $owned keys at SAVE; after SIGKILL and restart all 2000 durable: keys are there (engine 0 DBSIZE $back)"
    else
        check durability failed "after SIGKILL and restart only $have of 2000 durable: keys are there (engine 0 saved $owned)"
    fi
else
    check durability skipped "SAVE answered: ${saved:-nothing}"
fi

sleep 1
kill -TERM "$RSS_PID" 2>/dev/null || true
wait "$RSS_PID" 2>/dev/null || true
"$BENCH_BIN" report --results "$RESULTS" --out "$TMP/report.md" --svg-dir "$TMP/svg" >/dev/null
sed -n '/^## Soak/,/^## /p' "$TMP/report.md" | grep -E '^\||^- Check|^RSS'
