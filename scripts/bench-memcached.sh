#!/usr/bin/env bash
# The memcached port's performance clause (issue 22) in one run, three systems side by side
# under the same load, the same machine and the same limits:
#
#   recached        the proxy's memcached port (--memcached-port) in front of 2 engines
#   memcached-t2    memcached -t 2 (Debian's 1.6)
#   memcached-t1x2  two memcached -t 1 processes (the per-core layout), keys split between
#                   them by the client (one-at-a-time hash mod 2, libmemcached's defaults)
#
#   scripts/bench-memcached.sh
#   BENCH_ROUNDS=3 scripts/bench-memcached.sh
#   BENCH_SMOKE=1 scripts/bench-memcached.sh        # the test script's short version
#
# Load: `recached-bench run --protocol memcached` (text protocol `get <key>` and `set <key> 0 0
# <n>`, every reply parsed whole; an error reply, a miss-as-error or a broken connection is
# counted by kind), 2 generator threads (closed loop; 1 for the open loop, see OPEN_THREADS),
# BENCH_CONNECTIONS (32) connections in all (16 per
# process for the two memcached -t 1), keys `key:0` … `key:<BENCH_KEYS-1>` (10,000) uniform.
# Workloads: 64 B and 1 KB values × `get` (get 90 % / set 10 %) and `set` (100 % set); before
# each value size the key space is flushed and filled (closed-loop sets, not recorded), so gets
# hit. For each workload, in each round (system order alternating between rounds):
#   peak    closed loop (each connection sends its next request when its last one is
#           answered), BENCH_SECONDS (5) after a 1 s warm-up: requests/s and latency
#           percentiles of the closed-loop view;
#   half    open loop (Poisson arrivals, latency from each request's intended start: no
#           coordinated omission) at 50 % of that system's own peak of this round;
#   common  open loop at 50 % of the slowest system's peak of this round: the same offered
#           load for all three, so their p50/p95/p99 compare at equal throughput.
# The table gives the medians over the rounds, each system's peak as a ratio to memcached -t 2
# and its p99 against memcached -t 2's at the common rate (target, issue 22: ≥ 1.0× the
# throughput at an equal or lower p99). A figure off target never fails the script; an error
# reply, a failed run or a non-zero error count does.
#
# Writes one JSON per run to bench/results (BENCH_RESULTS): memcached-RUN-SYSTEM-WORKLOAD-LOAD
# -rROUND.json, labels suite=memcached, system, workload, load (peak, half, common), round;
# `recached-bench report` renders them (docs/BENCHMARKS.md, "The memcached port").
# Environment: BENCH_SECONDS (5), BENCH_ROUNDS (1), BENCH_CONNECTIONS (32), BENCH_THREADS (2),
# BENCH_OPEN_THREADS (1), BENCH_NAP_US (20; 0 = spin),
# BENCH_KEYS (10000), BENCH_SMOKE=1 (1 s runs, 64 B only), PIN/SERVER_CPUS/BENCH_CPUS,
# RECACHED_BIN, RECACHED_BENCH_BIN. Loopback only; every server is stopped by PID (or
# `recached stop`) on exit (bench-lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
command -v memcached >/dev/null || { echo "$0: memcached not found (apt-get install memcached)" >&2; exit 1; }

SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-1}
CONNS=${BENCH_CONNECTIONS:-32}
THREADS=${BENCH_THREADS:-2}
# Open loop: one generator thread. At these rates each thread polls without sleeping (the next
# arrival is always < 2 ms away), so every generator thread keeps a core busy; two would take
# both cores of a 2-core machine from the servers.
OPEN_THREADS=${BENCH_OPEN_THREADS:-1}
# …and it naps (≤ BENCH_NAP_US µs, timer slack 1 µs) instead of spinning between arrivals, so
# the spinning does not take a core from the servers either (`recached-bench run --nap-us`).
NAP_US=${BENCH_NAP_US:-20}
KEYS=${BENCH_KEYS:-10000}
SIZES=(64 1024)
WARMUP=1
FILL_SECS=2
if [ "$SMOKE" = 1 ]; then
    SECS=1 SIZES=(64) WARMUP=0.3 FILL_SECS=1 KEYS=2000
fi
MEMCACHED_VERSION=$(memcached -V 2>/dev/null | awk '{print $2}')
mapfile -t LABELS < <(common_labels)
LABELS+=(--label "memcached_version=$MEMCACHED_VERSION" --label "rounds=$ROUNDS")

free_ports 3
PROXY=$PORT BASE=$((PORT + 1))
free_ports 1
MC_RECACHED=$PORT
free_ports 1
MC_T2=$PORT
free_ports 2
MC_T1A=$PORT MC_T1B=$((PORT + 1))

# recached: the proxy's memcached port in front of 2 engines.
DIR="$TMP/fleet"
srv "$BIN" start --engines 2 --bind 127.0.0.1 --proxy-port "$PROXY" --engine-port-base "$BASE" \
    --memcached-port "$MC_RECACHED" --fanout-port 0 --metrics-port 0 --dir "$DIR" --daemonize \
    >"$TMP/fleet.log" 2>&1
FLEETS+=("$DIR")
# memcached: the same memory limit (1 GB) and connection limit for every process; exec in the
# subshell, so $! is memcached's own pid, which the exit trap kills.
start_memcached() { # start_memcached PORT THREADS
    (exec "${SRV[@]}" memcached -u root -l 127.0.0.1 -p "$1" -U 0 -t "$2" -m 1024 -c 4096) \
        >"$TMP/memcached-$1.log" 2>&1 &
    PIDS+=($!)
}
start_memcached "$MC_T2" 2
start_memcached "$MC_T1A" 1
start_memcached "$MC_T1B" 1
for p in "$MC_T2" "$MC_T1A" "$MC_T1B" "$MC_RECACHED"; do wait_port "$p"; done

# mc PORT: sends stdin to a memcached port, ends with `quit`, prints the replies.
mc() {
    { cat; printf 'quit\r\n'; } | timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; cat >&3; cat <&3" 2>/dev/null || true
}
# The port's engine links are up once a store answers (at most 20 s).
for _ in $(seq 100); do
    [[ $(printf 'set bench:warm 0 0 1\r\nx\r\n' | mc "$MC_RECACHED" | head -1) == STORED* ]] && break
    sleep 0.2
done
[[ $(printf 'set bench:warm 0 0 1\r\nx\r\n' | mc "$MC_RECACHED" | head -1) == STORED* ]] \
    || { echo "$0: the memcached port does not store" >&2; tail -n 20 "$TMP/fleet.log" >&2; exit 1; }

SYSTEMS=(recached memcached-t2 memcached-t1x2)
declare -A TARGET=(
    [recached]="127.0.0.1:$MC_RECACHED"
    [memcached-t2]="127.0.0.1:$MC_T2"
    [memcached-t1x2]="127.0.0.1:$MC_T1A,127.0.0.1:$MC_T1B"
)
declare -A CONNS_OF=([recached]=$CONNS [memcached-t2]=$CONNS [memcached-t1x2]=$((CONNS / 2)))
flush_system() {
    local t
    for t in ${TARGET[$1]//,/ }; do
        [[ $(printf 'flush_all\r\n' | mc "${t#*:}" | head -1) == OK* ]] \
            || { echo "$0: flush_all on $t failed" >&2; exit 1; }
    done
}

ROWS="$TMP/rows.csv" # system,workload,load,round,achieved,p50,p95,p99,errors
: >"$ROWS"
# load SYSTEM WORKLOAD LOAD ROUND SIZE MIX [run args…]: one recorded run.
load() {
    local s=$1 w=$2 l=$3 round=$4 size=$5 mix=$6 out log threads=$OPEN_THREADS
    shift 6
    local nap=(--nap-us "$NAP_US")
    [ "$l" = peak ] && threads=$THREADS nap=()
    out="$RESULTS/memcached-$RUN_ID-$s-$w-$l-r$round.json"
    log="$TMP/run-$s-$w-$l-r$round.log"
    if ! gen "$BENCH_BIN" run --protocol memcached --target "${TARGET[$s]}" \
        --connections "${CONNS_OF[$s]}" --threads "$threads" --keys "$KEYS" --value-size "$size" \
        --mix "$mix" --duration "$SECS" --warmup "$WARMUP" --seed "$round" --max-backlog 20000 "${nap[@]}" "$@" \
        --out "$out" "${LABELS[@]}" --label suite=memcached --label "system=$s" \
        --label "workload=$w" --label "load=$l" --label "round=$round" >"$log" 2>&1; then
        echo "$0: $s $w $l: recached-bench run failed:" >&2
        tail -n 5 "$log" >&2
        exit 1
    fi
    if ! "$BENCH_BIN" validate --no-errors "$out" >/dev/null 2>&1; then
        echo "$0: $s $w $l round $round: errors counted:" >&2
        grep -E '^target|^errors' "$log" >&2
        exit 1
    fi
    python3 - "$out" "$s" "$w" "$l" "$round" >>"$ROWS" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); r = d["results"]; l = r["latency_us"]
print(",".join(sys.argv[2:6] + [str(r["achieved_rate"]), str(l["p50"]), str(l["p95"]), str(l["p99"]), str(sum(r["errors"].values()))]))
EOF
    echo "round $round: $s $w $l: $(sed -n 's/^target [^ ]* \(.*\)/\1/p' "$log" | cut -c1-150)" >&2
}
val() { # val SYSTEM WORKLOAD LOAD ROUND COLUMN(5..9)
    awk -F, -v s="$1" -v w="$2" -v l="$3" -v r="$4" -v c="$5" '$1==s && $2==w && $3==l && $4==r {print $c}' "$ROWS" | tail -1
}

echo "memcached suite: ${SYSTEMS[*]}; ${SECS}s per run, $ROUNDS round(s), $CONNS connections, $THREADS generator threads, $CPU_PLACEMENT" >&2
for round in $(seq "$ROUNDS"); do
    order=("${SYSTEMS[@]}")
    # Alternate the order between rounds (reversed on even rounds).
    if ((round % 2 == 0)); then order=(memcached-t1x2 memcached-t2 recached); fi
    for size in "${SIZES[@]}"; do
        sz=$size
        [ "$size" = 1024 ] && sz=1KB || sz="${size}B"
        for s in "${order[@]}"; do
            flush_system "$s"
            # Fill the key space (closed-loop sets over uniform keys; not recorded).
            gen "$BENCH_BIN" run --protocol memcached --closed-loop --target "${TARGET[$s]}" \
                --connections "${CONNS_OF[$s]}" --threads "$THREADS" --keys "$KEYS" \
                --value-size "$size" --mix set:1 --duration "$FILL_SECS" --warmup 0 --seed 99 \
                >"$TMP/fill-$s.log" 2>&1 || { echo "$0: fill of $s failed" >&2; tail -n 5 "$TMP/fill-$s.log" >&2; exit 1; }
        done
        for kind in get set; do
            w="$sz-$kind"
            mix=get:90,set:10
            [ "$kind" = set ] && mix=set:1
            for s in "${order[@]}"; do load "$s" "$w" peak "$round" "$size" "$mix" --closed-loop; done
            slowest=""
            for s in "${order[@]}"; do
                peak=$(val "$s" "$w" peak "$round" 5)
                rate=$(awk -v p="$peak" 'BEGIN { printf "%d", p / 2 }')
                load "$s" "$w" half "$round" "$size" "$mix" --rate "$rate"
                if [ -z "$slowest" ] || awk -v a="$peak" -v b="$slowest" 'BEGIN { exit !(a < b) }'; then slowest=$peak; fi
            done
            common=$(awk -v p="$slowest" 'BEGIN { printf "%d", p / 2 }')
            for s in "${order[@]}"; do load "$s" "$w" common "$round" "$size" "$mix" --rate "$common"; done
        done
    done
done

# Medians over the rounds.
med() { # med SYSTEM WORKLOAD LOAD COLUMN
    awk -F, -v s="$1" -v w="$2" -v l="$3" -v c="$4" '$1==s && $2==w && $3==l {print $c}' "$ROWS" | sort -g |
        awk '{v[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
ms() { awk -v u="$1" 'BEGIN { printf "%.3f", u / 1000 }'; }
echo
echo "memcached port (recached, 2 engines) vs memcached -t 2 vs memcached -t 1 ×2 — recached-bench --protocol memcached,"
echo "$CONNS connections, $THREADS generator threads, ${SECS}s per run, $ROUNDS round(s), medians; $CPU_PLACEMENT; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
echo "peak: closed loop, ops/s and ratio to memcached-t2; half: open loop at 50 % of the system's own peak; common: open loop at 50 % of the slowest peak (latency ms)"
printf '%-9s %-15s %10s %6s %9s | %9s %7s %7s %7s | %9s %7s %7s %7s %s\n' workload system peak/s ×t2 'peak p99' 'half r/s' p50 p95 p99 'common/s' p50 p95 p99 'p99 vs t2 (common)'
for size in "${SIZES[@]}"; do
    [ "$size" = 1024 ] && sz=1KB || sz="${size}B"
    for kind in get set; do
        w="$sz-$kind"
        ref=$(med memcached-t2 "$w" peak 5)
        ref99=$(med memcached-t2 "$w" common 8)
        for s in "${SYSTEMS[@]}"; do
            p=$(med "$s" "$w" peak 5)
            c99=$(med "$s" "$w" common 8)
            verdict=$(awk -v a="$c99" -v b="$ref99" 'BEGIN { if (b <= 0) print "–"; else printf "%.2f× %s", a / b, (a <= b ? "(≤)" : "(higher)") }')
            printf '%-9s %-15s %10.0f %6.2f %9s | %9.0f %7s %7s %7s | %9.0f %7s %7s %7s %s\n' "$w" "$s" "$p" \
                "$(awk -v a="$p" -v b="$ref" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$(ms "$(med "$s" "$w" peak 8)")" \
                "$(med "$s" "$w" half 5)" "$(ms "$(med "$s" "$w" half 6)")" "$(ms "$(med "$s" "$w" half 7)")" "$(ms "$(med "$s" "$w" half 8)")" \
                "$(med "$s" "$w" common 5)" "$(ms "$(med "$s" "$w" common 6)")" "$(ms "$(med "$s" "$w" common 7)")" "$(ms "$c99")" "$verdict"
        done
    done
done
echo "results: $RESULTS/memcached-$RUN_ID-*.json"
