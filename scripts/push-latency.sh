#!/usr/bin/env bash
# Push latency of the browser-replica path (issue 5): a SET on the proxy's RESP port until it
# arrives as a `keychange` on a WebSocket subscribed to the fan-out, and how many subscribed
# WebSocket clients one fan-out serves at 1,000 keychanges/s with p99 under 10 ms.
#
#   scripts/push-latency.sh                      # full run (a few minutes)
#   N=2000 CLIENTS="100 500" TOPICS="1 C" SECONDS_PER_RUN=5 scripts/push-latency.sh   # shorter
#
# Starts its own fleet on free loopback ports (2 engines in cluster mode, the proxy, the
# fan-out) and kills it by PID at the end. Phases:
#   1. idle:    N (default 10,000) closed-loop SETs (proxy → engine → feed → fan-out → WS)
#   2. loaded:  the same while redis-benchmark hammers the proxy (SET/GET, 50 clients, -P 16)
#   3. fan-out: C subscribers (CLIENTS, default "100 1000 2000 5000 10000") over T topics
#               (TOPICS, default "1 100 C"; client i subscribes to fan:<i % T>:, C = one prefix
#               per client), 1,000 SETs/s spread over the T topics for SECONDS_PER_RUN; every
#               keychange of max(100, T) timed clients is timed. T=1 is a broadcast: every
#               keychange to every client. Each run also prints the fan-out's CPU (% of one
#               core, from /proc) and its socket writes (INFO wire_writes), µs per write.
# The measuring client is proxy/fanout/examples/push_latency.rs. Figures: µs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N="${N:-10000}"
CLIENTS="${CLIENTS:-100 1000 2000 5000 10000}"
TOPICS="${TOPICS:-1 100 C}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
# SKIP_BUILD=1 uses the binaries already built.
[ -n "${SKIP_BUILD:-}" ] || { cargo build --release -q -p recached && cargo build --release -q -p recached-fanout --example push_latency; }
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BIN="$TARGET_DIR/release/recached"
PL="$TARGET_DIR/release/examples/push_latency"
ulimit -n 20000 2>/dev/null || true

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
E0=$(free_port); E1=$(free_port); PROXY=$(free_port); FAN=$(free_port)
NODES="127.0.0.1:$E0,127.0.0.1:$E1"
LOGS=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$LOGS"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }

"$BIN" server --port "$E0" --cluster-nodes "$NODES" --cluster-index 0 >"$LOGS/e0.log" 2>&1 & PIDS+=($!)
"$BIN" server --port "$E1" --cluster-nodes "$NODES" --cluster-index 1 >"$LOGS/e1.log" 2>&1 & PIDS+=($!)
wait_port "$E0"; wait_port "$E1"
"$BIN" proxy --port "$PROXY" --backends "$NODES" >"$LOGS/proxy.log" 2>&1 & PIDS+=($!)
"$BIN" fanout --port "$FAN" --engines "$NODES" --heartbeat-ms 60000 >"$LOGS/fanout.log" 2>&1 & FANOUT=$!
PIDS+=($FANOUT)
wait_port "$PROXY"; wait_port "$FAN"
sleep 0.3
WS="ws://127.0.0.1:$FAN/ws"

echo "== idle fleet: $N SETs (proxy port) → keychange"
"$PL" latency --resp "127.0.0.1:$PROXY" --ws "$WS" --n "$N"
echo "== idle fleet: $N SETs (engine port, no proxy hop) → keychange"
"$PL" latency --resp "127.0.0.1:$E0" --ws "$WS" --n "$N"

echo "== under load: redis-benchmark -t set,get -c 50 -P 16 on the proxy meanwhile"
redis-benchmark -p "$PROXY" -t set,get -c 50 -P 16 -n 100000000 -r 100000 -q >"$LOGS/bench.log" 2>&1 & BENCH=$!
PIDS+=($BENCH)
sleep 1
"$PL" latency --resp "127.0.0.1:$PROXY" --ws "$WS" --n "$N"
kill "$BENCH" 2>/dev/null || true

# CPU ticks (user + system) of a process, and one field of the fan-out's INFO.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
info() { redis-cli -p "$FAN" info | tr -d '\r' | sed -n "s/^$1://p"; }
HZ=$(getconf CLK_TCK)
for c in $CLIENTS; do
    done_topics=" "
    for t in $TOPICS; do
        [ "$t" = C ] && t=$c
        [ "$t" -le "$c" ] || continue
        case "$done_topics" in *" $t "*) continue ;; esac
        done_topics="$done_topics$t "
        echo "== fan-out: $c subscribers over $t topic(s), 1000 keychanges/s for ${SECONDS_PER_RUN}s"
        # CPU and writes are counted once every client is subscribed, until the client exits
        # (SECONDS_PER_RUN of writes + 2 s of reading), and shown per second of writes.
        "$PL" fanout --resp "127.0.0.1:$PROXY" --ws "$WS" --clients "$c" --topics "$t" --rate 1000 \
            --seconds "$SECONDS_PER_RUN" >"$LOGS/run.out" 2>"$LOGS/run.err" & RUN=$!
        while ! grep -q connected "$LOGS/run.err" 2>/dev/null && kill -0 "$RUN" 2>/dev/null; do sleep 0.05; done
        c0=$(ticks "$FANOUT"); w0=$(info wire_writes)
        wait "$RUN" || echo "(failed at $c clients, $t topics)"
        c1=$(ticks "$FANOUT"); w1=$(info wire_writes)
        cat "$LOGS/run.out"
        # On a shared machine the tail depends on the neighbours: the 1-minute load average.
        echo "   load average $(cut -d' ' -f1 /proc/loadavg)"
        awk -v dc=$((c1 - c0)) -v hz="$HZ" -v s="$SECONDS_PER_RUN" -v dw=$((w1 - w0)) 'BEGIN {
            cpu = dc / hz; printf "   fan-out CPU %.0f%% of one core, %d socket writes/s, %.1f us CPU / write\n",
            100 * cpu / s, dw / s, dw ? 1e6 * cpu / dw : 0 }'
        sleep 1
    done
done
