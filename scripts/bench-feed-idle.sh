#!/usr/bin/env bash
# What the keychange feed costs a fleet that serves no browser (issue 14: unpipelined SET
# through the proxy paid for effects nobody read). Unpipelined SET, GET and MGET of 10 keys
# (redis-benchmark -c 50, no -P, -r 100000 -d 64) through the proxy of:
#
#   after       `recached start --engines 2` with this build (fan-out on, no browser)
#   nofanout    the same build with --fanout-port 0 (the floor: no feed at all)
#   before      the same fleet with BEFORE_BIN, when given (e.g. a build of an older commit)
#   nutcracker  nutcracker (twemproxy) over 2 redis-servers, as scripts/bench-proxy.sh
#
#   scripts/bench-feed-idle.sh
#   BEFORE_BIN=/tmp/recached-old ROUNDS=3 scripts/bench-feed-idle.sh
#
# Per round and test every target runs back to back (the order rotating every round), SET
# and MGET10 from an empty keyspace, GET after SET. Prints each run, then per target and
# test the median requests/s over the rounds and the median CPU time the target's server
# processes used per request (µs, from /proc: engines + proxy + fan-out, or redis-servers +
# nutcracker). On a shared machine the CPU figures are the steadier ones.
#
# Environment: ROUNDS (3), N (100000 requests per run), CLIENTS (50), TESTS ("SET GET
# MGET10"), RECACHED_BIN (default target/release/recached, built if missing), BEFORE_BIN.
# Loopback only; everything started is stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for tool in redis-server redis-cli redis-benchmark nutcracker python3; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-3} N=${N:-100000} CLIENTS=${CLIENTS:-50} TESTS=${TESTS:-SET GET MGET10}
AFTER=${RECACHED_BIN:-${CARGO_TARGET_DIR:-target}/release/recached}
[ -x "$AFTER" ] || cargo build --release -p recached >&2
BEFORE=${BEFORE_BIN:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-feed-idle.XXXXXX")
PIDS=()
declare -A BIN_OF=() DIR_OF=()
cleanup() {
    set +e
    for t in "${!DIR_OF[@]}"; do "${BIN_OF[$t]}" stop --dir "${DIR_OF[$t]}" >/dev/null 2>&1; done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
NEXT=$((20000 + RANDOM % 8000))
# A free port range of $1 ports below the ephemeral range: sets PORT.
free_ports() {
    local i ok
    while :; do
        ok=1
        for ((i = 0; i < $1; i++)); do port_free $((NEXT + i)) || { ok=0; break; }; done
        PORT=$NEXT
        NEXT=$((NEXT + $1))
        [ $ok = 0 ] || return 0
    done
}
wait_port() {
    for _ in $(seq 200); do port_free "$1" || return 0; sleep 0.1; done
    echo "$0: nothing listens on $1" >&2
    exit 1
}

declare -A PORT_OF=() FLUSH=() PROCS=()
# fleet TARGET BIN FANOUT(yes|no)
fleet() {
    local t=$1 bin=$2 fan=$3 proxy base fport
    free_ports 1; proxy=$PORT
    free_ports 2; base=$PORT
    if [ "$fan" = yes ]; then free_ports 1; fport=$PORT; else fport=0; fi
    DIR_OF[$t]=$TMP/$t BIN_OF[$t]=$bin
    "$bin" start --engines 2 --bind 127.0.0.1 --proxy-port "$proxy" --engine-port-base "$base" \
        --fanout-port "$fport" --metrics-port 0 --dir "$TMP/$t" --daemonize >"$TMP/$t.log" 2>&1
    for p in "$proxy" "$base" $((base + 1)); do wait_port "$p"; done
    PORT_OF[$t]=$proxy FLUSH[$t]="$base $((base + 1))"
    PROCS[$t]=$("$bin" status --dir "$TMP/$t" --json | grep -o '"role":"[^"]*","port":[0-9]*,"pid":[0-9]*' |
        sed 's/"role":"\([^"]*\)".*"pid":\([0-9]*\)/\1=\2/' | tr '\n' ' ')
}
TARGETS=()
if [ -n "$BEFORE" ]; then fleet before "$BEFORE" yes; TARGETS+=(before); fi
fleet after "$AFTER" yes
fleet nofanout "$AFTER" no
TARGETS+=(after nofanout nutcracker)
free_ports 2; RN=$PORT
for p in "$RN" $((RN + 1)); do
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
        >"$TMP/redis-$p.log" 2>&1 &
    PIDS+=($!)
    PROCS[nutcracker]+="redis-$((p - RN))=$! "
    wait_port "$p"
done
free_ports 2; NUT=$PORT
cat >"$TMP/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:$NUT
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  timeout: 5000
  servers:
   - 127.0.0.1:$RN:1
   - 127.0.0.1:$((RN + 1)):1
YML
nutcracker -c "$TMP/nutcracker.yml" -s $((NUT + 1)) -a 127.0.0.1 -o "$TMP/nutcracker.log" &
PIDS+=($!)
PROCS[nutcracker]+="nutcracker=$!"
wait_port "$NUT"
PORT_OF[nutcracker]=$NUT FLUSH[nutcracker]="$RN $((RN + 1))"
echo "feed-idle: $ROUNDS rounds, $N requests, $CLIENTS clients; after=$AFTER before=${BEFORE:-none}; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
MGET=(mget)
for _ in $(seq 10); do MGET+=("key:__rand_int__"); done
ROWS=$TMP/rows
: >"$ROWS"
for round in $(seq "$ROUNDS"); do
    k=$(((round - 1) % ${#TARGETS[@]}))
    order=("${TARGETS[@]:k}" "${TARGETS[@]:0:k}")
    for test in $TESTS; do
        for t in "${order[@]}"; do
            if [ "$test" != GET ]; then
                for p in ${FLUSH[$t]}; do redis-cli -p "$p" FLUSHALL >/dev/null; done
            fi
            case $test in
                SET) args=(-t set) ;;
                GET) args=(-t get) ;;
                MGET10) args=("${MGET[@]}") ;;
                *) echo "$0: unknown test $test" >&2; exit 1 ;;
            esac
            declare -A t0=()
            for rp in ${PROCS[$t]}; do t0[$rp]=$(ticks "${rp#*=}"); done
            rps=$(redis-benchmark -h 127.0.0.1 -p "${PORT_OF[$t]}" -c "$CLIENTS" -r 100000 -d 64 \
                -n "$N" --csv "${args[@]}" 2>>"$TMP/redis-benchmark.err" | tail -n 1 | tr -d '"' | cut -d, -f2)
            cpu=""
            for rp in ${PROCS[$t]}; do
                cpu+=" ${rp%%=*}:$(awk -v d=$(($(ticks "${rp#*=}") - ${t0[$rp]})) -v hz="$HZ" -v n="$N" \
                    'BEGIN { printf "%.2f", d / hz * 1e6 / n }')"
            done
            unset t0
            echo "$t,$test,$round,$rps,$cpu" | tee -a "$ROWS"
        done
    done
    echo "round $round/$ROUNDS done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

python3 - "$ROWS" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, test, _, rps, cpu = line.rstrip("\n").split(",", 4)
    rows[(t, test)].append((float(rps), dict((k, float(v)) for k, v in (p.split(":") for p in cpu.split()))))
targets = [t for t in ("before", "after", "nofanout", "nutcracker") if any(k[0] == t for k in rows)]
print("target,test,median_rps,median CPU us/request (all server processes; by process)")
for test in dict.fromkeys(k[1] for k in rows):
    med = {}
    for t in targets:
        r = rows[(t, test)]
        med[t] = statistics.median(x[0] for x in r)
        by = " ".join(f"{p}:{statistics.median(x[1][p] for x in r):.1f}" for p in r[0][1])
        print(f"{t},{test},{med[t]:.0f},{statistics.median(sum(x[1].values()) for x in r):.1f}; {by}")
    print(f"  {test} vs nutcracker: " + ", ".join(f"{t} {med[t] / med['nutcracker']:.2f}x" for t in targets if t != "nutcracker"))
PY
