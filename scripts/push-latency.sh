#!/usr/bin/env bash
# Push latency of the browser-replica path (issue 5): a SET on the proxy's RESP port until it
# arrives as a `keychange` on a WebSocket subscribed to the fan-out, and how many subscribed
# WebSocket clients one fan-out serves at 1,000 keychanges/s with p99 under 10 ms.
#
#   scripts/push-latency.sh                      # full run (a few minutes)
#   N=2000 CLIENTS="100 500" SECONDS_PER_RUN=5 scripts/push-latency.sh   # shorter
#
# Starts its own fleet on free loopback ports (2 engines in cluster mode, the proxy, the
# fan-out) and kills it by PID at the end. Phases:
#   1. idle:    N (default 10,000) closed-loop SETs (proxy → engine → feed → fan-out → WS)
#   2. loaded:  the same while redis-benchmark hammers the proxy (SET/GET, 50 clients, -P 16)
#   3. fan-out: C subscribers of one prefix, 1,000 SETs/s for SECONDS, latency sampled on 100
#               clients spread over the C (CLIENTS, default "100 1000 2000 5000 10000")
# The measuring client is proxy/examples/push_latency.rs. Figures: µs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N="${N:-10000}"
CLIENTS="${CLIENTS:-100 1000 2000 5000 10000}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
# SKIP_BUILD=1 uses the binaries already built.
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p recached -p recached-proxy --example push_latency
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
"$BIN" fanout --port "$FAN" --engines "$NODES" --heartbeat-ms 60000 >"$LOGS/fanout.log" 2>&1 & PIDS+=($!)
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

for c in $CLIENTS; do
    echo "== fan-out: $c subscribers, 1000 keychanges/s for ${SECONDS_PER_RUN}s"
    "$PL" fanout --resp "127.0.0.1:$PROXY" --ws "$WS" --clients "$c" --rate 1000 --seconds "$SECONDS_PER_RUN" --sample 100 || echo "(failed at $c clients)"
    sleep 1
done
