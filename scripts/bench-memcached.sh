#!/usr/bin/env bash
# The memcached port's performance clause (issue 22) in one run, side by side:
#
#   recached   the proxy's memcached port (--memcached-port) in front of 2 engines
#   memcached  memcached -t 2 (Debian's 1.6), the same machine, the same load
#
#   scripts/bench-memcached.sh
#   BENCH_SECONDS=20 BENCH_ROUNDS=3 scripts/bench-memcached.sh
#
# Load: memaslap (`memcaslap`, libmemcached-tools; memtier_benchmark is not packaged in
# Debian 12), text protocol, 2 threads, BENCH_CLIENTS (32) concurrent connections, 16-byte
# keys, for each value size (64 B and 1 KB) two mixes: `set` (100 % set) and `get` (90 % get,
# 10 % set, memaslap's usual mix: it gets only keys it has set). Each round runs every
# (size, mix) on both targets, the order alternating, each from an empty cache. Reported:
# throughput (memaslap's TPS) per target, the median over the rounds, and the ratio
# recached / memcached. memaslap is a closed loop and reports no latency percentiles, so p50,
# p95, p99 and the open-loop figures of the issue are not measured here.
#
# Writes memcached-RUN.csv (size,mix,target,round,tps) to bench/results (BENCH_RESULTS) and
# prints the table. Environment: BENCH_SECONDS (10 per run), BENCH_ROUNDS (1),
# BENCH_CLIENTS (32), BENCH_SMOKE=1 (2 s runs), PIN/SERVER_CPUS/BENCH_CPUS, RECACHED_BIN.
# Loopback only; every server is stopped on exit (bench-lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
command -v memcached >/dev/null || { echo "$0: memcached not found (apt-get install memcached)" >&2; exit 1; }
command -v memcaslap >/dev/null || { echo "$0: memcaslap not found (apt-get install libmemcached-tools)" >&2; exit 1; }

SECS=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-1}
CLIENTS=${BENCH_CLIENTS:-32}
[ "$SMOKE" = 1 ] && SECS=2

free_ports 4
PROXY=$PORT BASE=$((PORT + 1)) MC_RECACHED=$((PORT + 3))
free_ports 1
MC_REF=$PORT

DIR="$TMP/fleet"
srv "$BIN" start --engines 2 --bind 127.0.0.1 --proxy-port "$PROXY" --engine-port-base "$BASE" \
    --memcached-port "$MC_RECACHED" --fanout-port 0 --metrics-port 0 --dir "$DIR" --daemonize \
    >"$TMP/fleet.log" 2>&1
FLEETS+=("$DIR")
# exec in the subshell: $! is memcached's own pid, which the exit trap kills.
(exec "${SRV[@]}" memcached -u root -l 127.0.0.1 -p "$MC_REF" -U 0 -t 2 -m 1024 -c 4096) \
    >"$TMP/memcached.log" 2>&1 &
PIDS+=($!)
wait_port "$MC_REF"
wait_port "$MC_RECACHED"
# The port's engine links are up once a store answers.
for _ in $(seq 100); do
    r=$( (printf 'set bench:warm 0 0 1\r\nx\r\n'; sleep 0.2) | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$MC_RECACHED; cat >&3 & cat <&3" 2>/dev/null | head -1 || true)
    [[ $r == STORED* ]] && break
    sleep 0.2
done

flush_mc() { (printf 'flush_all\r\nquit\r\n') | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; cat >&3; cat <&3" >/dev/null 2>&1 || true; }

CSV="$RESULTS/memcached-$RUN_ID.csv"
echo "size,mix,target,round,tps" >"$CSV"
for round in $(seq "$ROUNDS"); do
    for size in 64 1024; do
        for mix in set get; do
            cfg="$TMP/cfg-$size-$mix"
            if [ "$mix" = set ]; then sp=1.0 gp=0.0; else sp=0.1 gp=0.9; fi
            printf 'key\n16 16 1\nvalue\n%s %s 1\ncmd\n0 %s\n1 %s\n' "$size" "$size" "$sp" "$gp" >"$cfg"
            targets=(memcached recached)
            (( round % 2 == 0 )) && targets=(recached memcached)
            for target in "${targets[@]}"; do
                port=$MC_REF
                [ "$target" = recached ] && port=$MC_RECACHED
                flush_mc "$port"
                out="$TMP/$target-$size-$mix-$round.txt"
                gen memcaslap -s "127.0.0.1:$port" -T 2 -c "$CLIENTS" -t "${SECS}s" -F "$cfg" >"$out" 2>&1 || true
                tps=$(sed -n 's/^Run time: .* TPS: \([0-9]*\).*/\1/p' "$out" | tail -1)
                [ -n "$tps" ] || { echo "$0: memaslap against $target gave no TPS:" >&2; tail -5 "$out" >&2; exit 1; }
                echo "$size,$mix,$target,$round,$tps" >>"$CSV"
                echo "round $round: $size B $mix $target: $tps ops/s" >&2
            done
        done
    done
done

echo
echo "memcached port (2 engines) vs memcached -t 2 — memaslap, $CLIENTS connections, ${SECS}s per run, $ROUNDS round(s), $CPU_PLACEMENT"
printf '%-6s %-4s %14s %14s %8s\n' size mix memcached recached ratio
for size in 64 1024; do
    for mix in set get; do
        med() { awk -F, -v s="$size" -v m="$mix" -v t="$1" '$1==s && $2==m && $3==t {print $5}' "$CSV" | sort -n |
            awk '{v[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
        a=$(med memcached) b=$(med recached)
        printf '%-6s %-4s %14.0f %14.0f %8.2f\n' "$size" "$mix" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print (a > 0 ? b / a : 0)}')"
    done
done
echo "results: $CSV"
