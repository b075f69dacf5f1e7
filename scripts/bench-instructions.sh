#!/usr/bin/env bash
# User-space instructions per unpipelined request, counted by callgrind (repeatable whatever the
# machine is doing, unlike timings). For each server given, and for GET, SET and INCR:
# start it under `valgrind --tool=callgrind` with instrumentation off, warm up with redis-benchmark,
# then count WARM..WARM+N requests of one client (-c 1 -P 1) and divide by N.
#
#   scripts/bench-instructions.sh [BIN…]        # default: target/release/recached and redis-server
#   N=20000 scripts/bench-instructions.sh /path/to/old/recached target/release/recached
#
# A BIN whose name ends in redis-server is run as redis-server; one ending in nutcracker as
# nutcracker (twemproxy, `redis: true`) in front of one redis-server (not counted); anything
# else as `BIN server`, or with ROLE=proxy as `BIN proxy` in front of one `BIN server` (not
# counted), to count the proxy's instructions. Prints one line per server and command:
# `<label> <cmd> <instructions/request>`.
#
# CMDS (default "get set incr"; also mget10: MGET of 10 random keys; evalsha: EVALSHA of
# the INCR + EXPIRE script of scripts/bench-scripting.sh; hset-small, sadd-small, zadd-small,
# lpush-small: one element into one of 1,000 small collections) and P (pipeline depth,
# default 1) choose the load; with P > 1 the figure is still per request. BACKENDS (default 1)
# puts that many engines (redis-servers for nutcracker) behind the proxy, so that MGET is
# split; CLUSTER=1 runs `BIN server` as a one-node cluster (every key's slot checked); RB_ARGS adds redis-benchmark flags to every run (e.g. "-3", "--dbnum 1"). STRACE=1 counts
# system calls instead (`strace -c -f`, no valgrind): `<label> <cmd> <syscalls/request>` and
# the top calls. CONFIG_SET ("name value …") is sent as one CONFIG SET to the counted server
# before the warm-up, e.g. the cost of slowlog and latency tracking at their defaults:
#   P=16 scripts/bench-instructions.sh target/release/recached
#   P=16 CONFIG_SET="slowlog-log-slower-than -1 latency-tracking no" scripts/bench-instructions.sh target/release/recached
# Loopback only; each server is stopped by PID.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${N:-20000}
WARM=${WARM:-2000}
CMDS=${CMDS:-get set incr}
P=${P:-1}
STRACE=${STRACE:-0}
BACKENDS=${BACKENDS:-1}
read -r -a RB_ARGS <<<"${RB_ARGS:-}"
[ $# -gt 0 ] || set -- "${CARGO_TARGET_DIR:-target}/release/recached" "$(command -v redis-server)"
for tool in valgrind callgrind_control redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install valgrind redis-tools)" >&2; exit 1; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/recached-instr.XXXXXX")
PID=
BACKEND=()
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null
    [ "${#BACKEND[@]}" = 0 ] || kill "${BACKEND[@]}" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

MGET=(mget)
for _ in 1 2 3 4 5 6 7 8 9 10; do MGET+=("key:__rand_int__"); done
# evalsha: the scripting clause's script (scripts/bench-scripting.sh), loaded first.
EVALSHA_BODY="redis.call('incr', KEYS[1]); redis.call('expire', KEYS[1], 100); return 1"
# Writes into small collections (issue 16's compact encodings): 1,000 keys, so over the warm-up
# and the counted requests each collection gets ~20 elements (listpack hashes and sorted sets,
# intset sets, one quicklist node).
declare -A SMALL=(
    [hset-small]="HSET sh:__rand_int__ f__rand_int__ v"
    [sadd-small]="SADD ss:__rand_int__ 1__rand_int__"
    [zadd-small]="ZADD sz:__rand_int__ __rand_int__ m__rand_int__"
    [lpush-small]="LPUSH sl:__rand_int__ v"
)
load() { # load CMD PORT N
    if [ "$1" = mget10 ]; then
        redis-benchmark -p "$2" "${RB_ARGS[@]}" -c 1 -P "$P" -n "$3" -r 100000 -q "${MGET[@]}" >/dev/null
    elif [ "$1" = evalsha ]; then
        local sha
        sha=$(redis-cli -p "$2" SCRIPT LOAD "$EVALSHA_BODY")
        redis-benchmark -p "$2" "${RB_ARGS[@]}" -c 1 -P "$P" -n "$3" -r 100000 -q \
            EVALSHA "$sha" 1 'key:__rand_int__' >/dev/null
    elif [ -n "${SMALL[$1]:-}" ]; then
        # shellcheck disable=SC2086 # the command's words
        redis-benchmark -p "$2" "${RB_ARGS[@]}" -c 1 -P "$P" -n "$3" -r 1000 -q ${SMALL[$1]} >/dev/null
    else
        redis-benchmark -p "$2" "${RB_ARGS[@]}" -c 1 -P "$P" -n "$3" -r 100000 -t "$1" -q >/dev/null
    fi
}

# start_backends KIND: BACKENDS servers (KIND redis or the recached BIN) on free ports; sets
# BACKEND (pids) and EPORTS (ports).
start_backends() {
    local kind=$1 p
    EPORTS=()
    for ((b = 0; b < BACKENDS; b++)); do
        p=$(free_port)
        if [ "$kind" = redis ]; then
            redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no >"$TMP/engine-$b.log" 2>&1 &
        else
            "$kind" server --port "$p" --bind 127.0.0.1 >"$TMP/engine-$b.log" 2>&1 &
        fi
        BACKEND+=($!)
        EPORTS+=("$p")
    done
    for p in "${EPORTS[@]}"; do
        for _ in $(seq 1 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
    done
}
stop_backends() {
    [ "${#BACKEND[@]}" = 0 ] || { kill "${BACKEND[@]}"; wait "${BACKEND[@]}" 2>/dev/null || true; }
    BACKEND=()
}

for bin in "$@"; do
    for cmd in $CMDS; do
        port=$(free_port)
        out="$TMP/cg.out"
        case "$bin" in
            *redis-server) args=("$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no) ;;
            *nutcracker)
                start_backends redis
                {
                    printf 'bench:\n  listen: 127.0.0.1:%s\n  hash: fnv1a_64\n  distribution: ketama\n' "$port"
                    printf '  redis: true\n  auto_eject_hosts: false\n  timeout: 5000\n  servers:\n'
                    for p in "${EPORTS[@]}"; do printf '   - 127.0.0.1:%s:1\n' "$p"; done
                } >"$TMP/nutcracker.yml"
                args=("$bin" -c "$TMP/nutcracker.yml" -s "$(free_port)" -a 127.0.0.1 -o "$TMP/nutcracker.log") ;;
            *) if [ "${ROLE:-server}" = proxy ]; then
                   start_backends "$bin"
                   list=$(printf '127.0.0.1:%s,' "${EPORTS[@]}")
                   args=("$bin" proxy --port "$port" --bind 127.0.0.1 --backends "${list%,}")
               else
                   args=("$bin" server --port "$port" --bind 127.0.0.1)
                   # CLUSTER=1: a one-node cluster (the ownership check runs on every key).
                   if [ "${CLUSTER:-0}" = 1 ]; then
                       args+=(--cluster-nodes "127.0.0.1:$port" --cluster-index 0)
                   fi
               fi ;;
        esac
        if [ "$STRACE" = 1 ]; then
            "${args[@]}" >"$TMP/server.log" 2>&1 &
            PID=$!
            for _ in $(seq 1 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
            load "$cmd" "$port" "$WARM"
            strace -c -f -p "$PID" -o "$TMP/strace.out" 2>/dev/null &
            spid=$!
            sleep 1
            load "$cmd" "$port" "$N"
            kill -INT "$spid"; wait "$spid" 2>/dev/null || true
            kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
            stop_backends
            calls=$(awk '$NF == "total" {print $4}' "$TMP/strace.out")
            echo "$bin ${ROLE:-server} $cmd P=$P $(awk -v c="$calls" -v n="$N" 'BEGIN { printf "%.3f", c / n }') syscalls/request"
            awk -v n="$N" '$1 ~ /^[0-9.]+$/ && $NF != "total" { printf "    %-14s %.3f/request\n", $NF, $4 / n }' "$TMP/strace.out" | sort -k2 -rn | head -6
            continue
        fi
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
            "${args[@]}" >"$TMP/server.log" 2>&1 &
        PID=$!
        for _ in $(seq 1 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        if [ -n "${CONFIG_SET:-}" ]; then
            # shellcheck disable=SC2086 # name value pairs
            redis-cli -p "$port" CONFIG SET ${CONFIG_SET} | grep -qx OK \
                || { echo "$0: CONFIG SET ${CONFIG_SET} refused" >&2; exit 1; }
        fi
        load "$cmd" "$port" "$WARM"
        callgrind_control -i on "$PID" >/dev/null
        load "$cmd" "$port" "$N"
        # The dump holds what ran since instrumentation went on (turning it off first would
        # drop the counts); what runs after it (shutdown) goes to the final file, not read.
        callgrind_control -d "$PID" >/dev/null
        kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
        stop_backends
        total=$(awk '/^summary:/ {print $2}' "$out.1")
        [ -z "${KEEP_CALLGRIND:-}" ] || cp "$out.1" "$KEEP_CALLGRIND.$(basename "$bin").$cmd"
        rm -f "$out"*
        echo "$bin ${ROLE:-server} $cmd $(( total / N ))"
    done
done
