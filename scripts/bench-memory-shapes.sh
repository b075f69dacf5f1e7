#!/usr/bin/env bash
# Memory per data shape (issue 9): RSS of ONE fresh recached engine and ONE fresh redis-server
# holding the same data, at a known DBSIZE, with INFO used_memory beside it.
#
#   scripts/bench-memory-shapes.sh
#   MEM_RUNS=5 scripts/bench-memory-shapes.sh
#   BENCH_SMOKE=1 scripts/bench-memory-shapes.sh        # tiny sizes, one run (the test script)
#
# Shapes (full size; the smoke divides the counts by 50–100):
#   empty         a fresh process, nothing stored (the fixed cost each process starts with)
#   strings       1,000,000 keys, 64-byte values
#   small-hashes  100,000 hashes × 10 fields, 8-byte values (Redis keeps these as listpacks)
#   small-sets    100,000 sets × 10 integer members (Redis keeps these as intsets)
#   small-zsets   100,000 sorted sets × 10 members of 8 bytes with integer scores (listpacks)
#   hashes        100 hashes × 10,000 fields, 8-byte values
#   sets          100 sets × 10,000 members
#   zsets         100 sorted sets × 10,000 members
#   lists         100 lists × 10,000 elements of 8 bytes
# For each of MEM_RUNS rounds, each shape and each server (the server order alternates every
# round), a fresh process is started on a free port of 127.0.0.1, filled with `redis-cli --pipe`
# from a RESP file generated once (cached in MEM_WORK), given 0.5 s to settle, and sampled by
# `recached-bench memory` (DBSIZE must equal the shape's key count; RSS from /proc/PID/status;
# INFO used_memory), then stopped by PID. One JSON file per sample in bench/results/
# (BENCH_RESULTS), labelled suite=memory; `recached-bench report` shows the median per shape and
# server. Neither server persists anything (recached server without --dir; redis-server
# --save '' --appendonly no).
#
# Environment: MEM_RUNS (3), MEM_SHAPES (all of the above, space separated), MEM_WORK
# (/tmp/recached-bench-memory-shapes), BENCH_SMOKE=1, PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN,
# RECACHED_BENCH_BIN.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

RUNS=${MEM_RUNS:-3}
SHAPES=${MEM_SHAPES:-"empty strings small-hashes small-sets small-zsets hashes sets zsets lists"}
WORK=${MEM_WORK:-/tmp/recached-bench-memory-shapes}
# Sizes: string keys, small hashes/sets/zsets, collection keys × elements per collection.
NSTR=1000000 NSMALL=100000 NCOLL=100 NELEM=10000
if [ "$SMOKE" = 1 ]; then
    RUNS=1 NSTR=20000 NSMALL=2000 NCOLL=10 NELEM=1000
fi
mkdir -p "$WORK"
mapfile -t LABELS < <(common_labels)
read -ra SHAPE_LIST <<<"$SHAPES"

# shape → "keys|elements|value bytes|description"
shape_info() {
    case $1 in
    empty) echo "0|0|0|a fresh process, nothing stored" ;;
    strings) echo "$NSTR|$NSTR|64|$NSTR keys, 64-byte values" ;;
    small-hashes) echo "$NSMALL|$((NSMALL * 10))|8|$NSMALL hashes × 10 fields, 8-byte values" ;;
    small-sets) echo "$NSMALL|$((NSMALL * 10))|0|$NSMALL sets × 10 integer members" ;;
    small-zsets) echo "$NSMALL|$((NSMALL * 10))|8|$NSMALL sorted sets × 10 members of 8 bytes" ;;
    hashes) echo "$NCOLL|$((NCOLL * NELEM))|8|$NCOLL hashes × $NELEM fields, 8-byte values" ;;
    sets) echo "$NCOLL|$((NCOLL * NELEM))|0|$NCOLL sets × $NELEM members (12 bytes)" ;;
    zsets) echo "$NCOLL|$((NCOLL * NELEM))|0|$NCOLL sorted sets × $NELEM members (12 bytes)" ;;
    lists) echo "$NCOLL|$((NCOLL * NELEM))|8|$NCOLL lists × $NELEM elements of 8 bytes" ;;
    *) echo "$0: unknown shape $1" >&2; exit 2 ;;
    esac
}

# The RESP file of a shape (generated once per size).
resp_file() {
    local shape=$1 f="$WORK/$1-$NSTR-$NSMALL-$NCOLL-$NELEM.resp"
    if [ ! -s "$f" ]; then
        echo "generating $f" >&2
        python3 - "$shape" "$NSTR" "$NSMALL" "$NCOLL" "$NELEM" >"$f.tmp" <<'PY'
import sys
out = sys.stdout.buffer
def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    out.write(b"".join(parts))
shape = sys.argv[1]
nstr, nsmall, ncoll, nelem = (int(x) for x in sys.argv[2:6])
if shape == "strings":
    val = b"v" * 64
    for i in range(nstr):
        cmd(b"SET", b"key:%07d" % i, val)
elif shape == "small-hashes":
    for h in range(nsmall):
        args = [b"HSET", b"user:%06d" % h]
        for f in range(10):
            args += [b"field%d" % f, b"val%05d" % (h % 100000)]
        cmd(*args)
elif shape == "small-sets":
    # Integers below 100,000 (int32 in a Redis intset), distinct within a set.
    for h in range(nsmall):
        cmd(b"SADD", b"set:%06d" % h, *[b"%d" % ((h * 31 + m * 7919) % 100000) for m in range(10)])
elif shape == "small-zsets":
    for h in range(nsmall):
        args = [b"ZADD", b"zset:%06d" % h]
        for m in range(10):
            args += [b"%d" % ((h * 7 + m * 101) % 10007), b"mbr%05d" % ((h + m * 1000) % 100000)]
        cmd(*args)
else:
    for c in range(ncoll):
        key = b"%s:%03d" % (shape.encode(), c)
        if shape == "hashes":
            args = [b"HSET", key]
            for f in range(nelem):
                args += [b"field:%05d" % f, b"val%05d" % f]
        elif shape == "sets":
            args = [b"SADD", key] + [b"member:%05d" % m for m in range(nelem)]
        elif shape == "zsets":
            args = [b"ZADD", key]
            for m in range(nelem):
                args += [b"%d" % (m * 7 % 10007), b"member:%05d" % m]
        elif shape == "lists":
            args = [b"RPUSH", key] + [b"el%06d" % m for m in range(nelem)]
        cmd(*args)
PY
        mv "$f.tmp" "$f"
    fi
    echo "$f"
}

REDIS_ARGS=(--bind 127.0.0.1 --save '' --appendonly no --daemonize no)
# start_server recached|redis-server PORT: sets SPID to the server's pid.
start_server() {
    local kind=$1 p=$2 d="$TMP/$1-$2"
    mkdir -p "$d"
    if [ "$kind" = recached ]; then
        (cd "$d" && exec "${SRV[@]}" "$BIN" server --port "$p" --bind 127.0.0.1) >"$d.log" 2>&1 &
    else
        (cd "$d" && exec "${SRV[@]}" redis-server --port "$p" "${REDIS_ARGS[@]}") >"$d.log" 2>&1 &
    fi
    SPID=$!
    PIDS+=("$SPID")
    wait_port "$p"
}
# stop_server PID: stops it and forgets the pid (so the exit trap never signals a reused pid).
stop_server() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local keep=() q
    for q in "${PIDS[@]}"; do [ "$q" = "$1" ] || keep+=("$q"); done
    PIDS=("${keep[@]}")
}

echo "memory shapes: ${SHAPE_LIST[*]}; $RUNS runs; recached $RECACHED_VERSION, redis $REDIS_VERSION; $CPU_PLACEMENT" >&2
SYSTEMS=(recached redis-server)
for round in $(seq "$RUNS"); do
    for si in "${!SHAPE_LIST[@]}"; do
        shape=${SHAPE_LIST[si]}
        IFS='|' read -r keys elements vsize describe <<<"$(shape_info "$shape")"
        [ "$shape" = empty ] || file=$(resp_file "$shape")
        # Alternate which server goes first, so drift on a shared machine favours neither.
        if [ $((round % 2)) = 1 ]; then order=("${SYSTEMS[@]}"); else order=(redis-server recached); fi
        for sys in "${order[@]}"; do
            free_ports 1; p=$PORT
            start_server "$sys" "$p"
            if [ "$shape" != empty ]; then
                gen redis-cli -p "$p" --pipe <"$file" >"$TMP/pipe.out" 2>&1 \
                    || { cat "$TMP/pipe.out" >&2; echo "$0: loading $shape into $sys failed" >&2; exit 1; }
                grep -q 'errors: 0,' "$TMP/pipe.out" \
                    || { cat "$TMP/pipe.out" >&2; echo "$0: $sys answered errors while loading $shape" >&2; exit 1; }
            fi
            sleep 0.5
            if [ "$sys" = recached ]; then cmdline="recached server --port P --bind 127.0.0.1 (no --dir: no snapshots)"
            else cmdline="redis-server --port P ${REDIS_ARGS[*]}"; fi
            echo "round $round/$RUNS: $shape, $sys" >&2
            "$BENCH_BIN" memory --target "127.0.0.1:$p" --pid "$SPID" --shape "$shape" --describe "$describe" \
                --elements "$elements" --value-size "$vsize" --expect-keys "$keys" \
                --out "$RESULTS/memory-$RUN_ID-$shape-$sys-r$round.json" "${LABELS[@]}" \
                --label suite=memory --label "system=$sys" --label "shape=$shape" --label "shape_order=$si" --label "round=$round" \
                --label "rounds=$RUNS" --label "persistence=none (recached server without --dir; redis-server --save '' --appendonly no)" \
                --label "config=$cmdline" --label "loader=redis-cli --pipe" >&2
            stop_server "$SPID"
        done
    done
done

"$BENCH_BIN" report --results "$RESULTS" --out "$TMP/report.md" --svg-dir "$TMP/svg" >/dev/null
sed -n '/^## Memory/,/^## /p' "$TMP/report.md" | grep '^|'
