#!/usr/bin/env bash
# Stress/soak run in phases against one recached fleet through the proxy's memcached port
# (issue 22: the 7 phases of scripts/soak.sh, memcached's text protocol instead of RESP):
#
#   scripts/soak-memcached.sh                     # SOAK_SECONDS=210: about 30 s per phase
#   BENCH_SMOKE=1 scripts/soak-memcached.sh       # the test script's version (~45 s in all)
#
# Phases (each an open-loop `recached-bench run --protocol memcached` against the port:
# `get <key>` and `set <key> 0 0 <n>`, every reply parsed whole, errors counted per phase by
# kind: SERVER_ERROR, CLIENT_ERROR, ERROR, NOT_STORED…, io, unavailable, overload, unfinished):
#   ramp       three steps at 1/4, 1/2, 3/4 of SOAK_RATE
#   sustained  SOAK_RATE, get 80 % / set 20 %
#   burst      3 × SOAK_RATE
#   churn      1/2 × SOAK_RATE, every connection closed and redialled after 50 replies
#   large      64 KB values, 1/20 × SOAK_RATE, get 50 % / set 50 % over 2,000 keys
#   eviction   4 KB sets over a 1,000,000-key space with `CONFIG SET maxmemory` (SOAK_MAXMEMORY,
#              allkeys-lru) on every engine; check: each engine stays within its limit (skipped
#              when the engine refuses the CONFIG SET)
#   kill       SOAK_RATE while engine 0 is SIGKILLed a third of the way in; the supervisor
#              restarts it. Checks: every engine is up again, and 2,000 items set through the
#              memcached port and SAVEd before the kill all come back from a multi-get
#              through the port after the restart (skipped when SAVE is refused). Errors are
#              expected in this phase only (requests to the dead engine).
# The pass condition: zero errors in every phase but kill (the script fails otherwise, after
# writing every result). RSS of the whole fleet (supervisor + children) is sampled every
# 500 ms throughout. Every phase, check and the RSS series is one JSON file in bench/results/
# (BENCH_RESULTS), suite=soak-memcached, rendered by `recached-bench report`.
#
# Environment: SOAK_SECONDS (210), SOAK_RATE (5000), SOAK_ENGINES (2), SOAK_MAXMEMORY (32mb),
# BENCH_SMOKE=1 (SOAK_SECONDS=30 and rate 1000), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN,
# RECACHED_BENCH_BIN. Loopback only; the fleet is stopped on exit (bench-lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

TOTAL=${SOAK_SECONDS:-210}
RATE=${SOAK_RATE:-5000}
ENGINES=${SOAK_ENGINES:-2}
MAXMEM=${SOAK_MAXMEMORY:-32mb}
if [ "$SMOKE" = 1 ]; then
    TOTAL=${SOAK_SECONDS:-30} RATE=1000
fi
SUITE=soak-memcached
# 7 phases; the ramp's three steps share one phase's time. At least 2 s each.
P=$(awk -v t="$TOTAL" 'BEGIN { p = t / 7; if (p < 2) p = 2; printf "%.1f", p }')
mapfile -t LABELS < <(common_labels)
[ "$ENGINES" -ge 2 ] || { echo "$0: SOAK_ENGINES must be ≥ 2 (the kill phase needs a survivor)" >&2; exit 2; }

free_ports "$ENGINES"; FE=$PORT
free_ports 1; FP=$PORT
free_ports 1; MC=$PORT
DIR="$TMP/fleet"
srv "$BIN" start --engines "$ENGINES" --bind 127.0.0.1 --proxy-port "$FP" --engine-port-base "$FE" \
    --memcached-port "$MC" --fanout-port 0 --metrics-port 0 --dir "$DIR" --daemonize >"$TMP/fleet.log" 2>&1
FLEETS+=("$DIR")
for _ in $(seq 100); do
    [ "$(fleet_engines "$DIR")" = "$ENGINES" ] && ! port_free "$MC" && break
    sleep 0.2
done
# mc: sends stdin to the memcached port, then `quit`; prints the replies (10 s at most).
mc() {
    { cat; printf 'quit\r\n'; } | timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$MC; cat >&3; cat <&3" 2>/dev/null || true
}
for _ in $(seq 100); do
    [[ $(printf 'set soak:warm 0 0 1\r\nx\r\n' | mc | head -1) == STORED* ]] && break
    sleep 0.2
done
[[ $(printf 'set soak:warm 0 0 1\r\nx\r\n' | mc | head -1) == STORED* ]] \
    || { echo "$0: the memcached port does not store" >&2; "$BIN" status --dir "$DIR" >&2 || true; exit 1; }
engine_ports=()
for ((i = 0; i < ENGINES; i++)); do engine_ports+=($((FE + i))); done
pid_of() { # pid_of ROLE: from recached status --json
    { "$BIN" status --dir "$DIR" --json || true; } \
        | grep -o "\"role\":\"$1\",\"port\":[^,]*,\"pid\":[0-9]*" | sed 's/.*"pid"://' | head -1 || true
}
SUP=$(pid_of supervisor)
[ -n "$SUP" ] || { echo "$0: no supervisor pid in recached status --json" >&2; exit 1; }
"$BENCH_BIN" rss --ppid "$SUP" --interval-ms 500 --seconds $((TOTAL * 3 + 120)) \
    --out "$RESULTS/$SUITE-$RUN_ID-rss.json" "${LABELS[@]}" --label "suite=$SUITE" >/dev/null &
RSS_PID=$!
PIDS+=($RSS_PID)
echo "$SUITE: $TOTAL s in 7 phases of $P s, rate $RATE/s, $ENGINES engines, memcached port $MC, $CPU_PLACEMENT" >&2

order=0
PHASE_FILES=()
phase() { # phase NAME WHAT RATE [run args…]
    local name=$1 what=$2 rate=$3 out
    shift 3
    order=$((order + 1))
    out="$RESULTS/$SUITE-$RUN_ID-$(printf %02d $order)-$name.json"
    PHASE_FILES+=("$out")
    echo "phase $order: $name ($what)" >&2
    gen "$BENCH_BIN" run --protocol memcached --target "127.0.0.1:$MC" --rate "$rate" --warmup 0 \
        --connections 16 --seed "$order" --max-backlog 50000 "$@" \
        --out "$out" "${LABELS[@]}" \
        --label "suite=$SUITE" --label "phase=$name" --label "what=$what" --label "order=$order" >&2
}
check() { # check NAME OUTCOME DETAIL
    "$BENCH_BIN" check --name "$1" --outcome "$2" --detail "$3" \
        --out "$RESULTS/$SUITE-$RUN_ID-check-$1.json" "${LABELS[@]}" --label "suite=$SUITE" >&2
}
# The phases both soaks share (scripts/soak-phases.sh).
source "$(dirname "${BASH_SOURCE[0]}")/soak-phases.sh"
soak_phases get set

# Kill one engine mid-load. First: 2,000 items set through the memcached port, then SAVE on
# engine 0 (the durability promise: what a completed snapshot holds survives a crash).
E0=${engine_ports[0]}
redis-cli -p "$E0" FLUSHALL >/dev/null
stored=$(for i in $(seq 1 2000); do printf 'set durable:%d 0 0 %d\r\nv%d\r\n' "$i" $((${#i} + 1)) "$i"; done | mc | grep -c '^STORED' || true)
owned=$(redis-cli -p "$E0" DBSIZE)
saved=$(redis-cli -p "$E0" SAVE 2>&1 || true)
( sleep "$(awk -v p="$P" 'BEGIN { print p / 3 }')"; kill -KILL "$(pid_of engine-0)" ) &
killer=$!
phase kill "engine 0 SIGKILLed at 1/3, restarted by the supervisor" "$RATE" --duration "$P" --mix get:80,set:20 \
    --key-prefix soak:
wait "$killer" || true
up=0
for _ in $(seq 150); do
    [ "$(fleet_engines "$DIR")" = "$ENGINES" ] && { up=1; break; }
    sleep 0.1
done
if [ $up = 1 ]; then
    check restart passed "all $ENGINES engines up again after the SIGKILL (recached status)"
else
    check restart failed "engine 0 not back within 15 s after the phase"
fi
# Multi-gets of 200 keys each (split over the engines by the proxy), values checked.
getall() {
    local i
    for ((b = 1; b <= 2000; b += 200)); do
        printf 'get'
        for ((i = b; i < b + 200; i++)); do printf ' durable:%d' "$i"; done
        printf '\r\n'
    done | mc | tr -d '\r' | awk '/^VALUE / { k = $2; getline v; if ("v" substr(k, 9) == v) n++ } END { print n + 0 }'
}
if [ "$saved" = OK ] && [ $up = 1 ]; then
    have=""
    # The proxy redials the restarted engine: a few tries (at most 10 s).
    for _ in $(seq 20); do
        have=$(getall)
        [ "$have" = 2000 ] && break
        sleep 0.5
    done
    back=$(redis-cli -p "$E0" DBSIZE)
    if [ "$have" = 2000 ]; then
        check durability passed "$stored items set through the memcached port, engine 0 held $owned keys at SAVE; after SIGKILL and restart a multi-get through the port returns all 2000 with their values (engine 0 DBSIZE $back)"
    else
        check durability failed "after SIGKILL and restart a multi-get through the memcached port returns $have of 2000 items ($stored stored, engine 0 saved $owned keys)"
    fi
else
    check durability skipped "SAVE answered: ${saved:-nothing}"
fi

sleep 1
kill -TERM "$RSS_PID" 2>/dev/null || true
wait "$RSS_PID" 2>/dev/null || true
"$BENCH_BIN" report --results "$RESULTS" --out "$TMP/report.md" --svg-dir "$TMP/svg" >/dev/null
sed -n '/^## Soak (`scripts\/soak-memcached.sh`)/,/^## /p' "$TMP/report.md" | grep -E '^\||^- Check|^RSS'

# The pass condition: no error outside the kill phase, and no failed check.
bad=0
for f in "${PHASE_FILES[@]}"; do
    case "$f" in *-kill.json) continue ;; esac
    "$BENCH_BIN" validate --no-errors "$f" >/dev/null 2>&1 || { echo "$0: errors in $(basename "$f")" >&2; bad=1; }
done
if grep -l '"outcome": "failed"' "$RESULTS/$SUITE-$RUN_ID"-check-*.json >/dev/null 2>&1; then
    echo "$0: a check failed: $(grep -l '"outcome": "failed"' "$RESULTS/$SUITE-$RUN_ID"-check-*.json | xargs -n1 basename)" >&2
    bad=1
fi
[ $bad = 0 ] || exit 1
echo "$SUITE: passed (no errors outside the kill phase)"
