#!/usr/bin/env bash
# TLS vs plain on one recached engine, side by side with redis-server's TLS port, in one run.
#
#   scripts/bench-tls.sh                 # N=200000 requests per test, 3 rounds
#   BENCH_SMOKE=1 scripts/bench-tls.sh   # tiny sizes (seconds)
#
# Servers (release build, loopback, certificates made here with openssl, ECDSA P-256):
#   recached plain   recached server --port P
#   recached TLS     the same engine's --tls-port (same process, same keyspace)
#   redis TLS        redis-server --port 0 --tls-port P --tls-auth-clients no (Debian's build)
#   redis plain      redis-server --port P, for reference
# Load: redis-benchmark (one thread, TLS via OpenSSL on the client side for both servers),
# SET and GET, 50 connections, random keys (-r 100000), 3-byte values, unpipelined (-P 1)
# and pipelined (-P 16). Rounds interleave the servers so machine noise spreads evenly;
# the median of the rounds is reported.
#
# Output: a table on stdout and in $RESULTS/tls-<run id>.md (BENCH_RESULTS, default
# bench/results): requests/s, p50 and p99 latency (ms), and CPU µs per request of the server
# and of the client (redis-benchmark) per server and test, then the ratios the issue targets:
# recached TLS / recached plain (≥ 0.8) and recached TLS / redis TLS (≥ 1.0). Client and
# server share the machine's cores, so the last table also gives the ceiling the client's own
# TLS cost puts on the TLS/plain ratio: (server + client CPU, plain) / (server CPU plain +
# client CPU TLS), i.e. the ratio if the server's TLS work cost nothing.
#
# Environment: BENCH_SMOKE, BENCH_RESULTS, BENCH_N (requests per test), BENCH_ROUNDS,
# BENCH_CLIENTS (connections), PIN/SERVER_CPUS/BENCH_CPUS (see bench-lib.sh), RECACHED_BIN.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

N=${BENCH_N:-200000}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-50}
if [ "$SMOKE" = 1 ]; then
    N=${BENCH_N:-5000}
    ROUNDS=${BENCH_ROUNDS:-1}
fi

# ----- certificates -----
CERTS="$TMP/certs"
mkdir -p "$CERTS"
(
    cd "$CERTS"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
        -out ca.crt -days 1 -subj /CN=bench-ca -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
        -out server.csr -subj /CN=localhost
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
        -days 1 -extfile server.ext
) >"$TMP/openssl.log" 2>&1 || { cat "$TMP/openssl.log" >&2; exit 1; }

# ----- servers -----
free_ports 4
RC_PLAIN=$PORT
RC_TLS=$((PORT + 1))
REDIS_TLS=$((PORT + 2))
REDIS_PLAIN=$((PORT + 3))
(cd "$TMP" && exec "${SRV[@]}" "$BIN" server --bind 127.0.0.1 --port "$RC_PLAIN" \
    --tls-port "$RC_TLS" --tls-cert-file "$CERTS/server.crt" --tls-key-file "$CERTS/server.key") \
    >"$TMP/recached.log" 2>&1 &
PIDS+=($!)
RC_PID=$!
wait_port "$RC_PLAIN"
wait_port "$RC_TLS"
start_redis "$REDIS_TLS" --port 0 --tls-port "$REDIS_TLS" --tls-cert-file "$CERTS/server.crt" \
    --tls-key-file "$CERTS/server.key" --tls-ca-cert-file "$CERTS/ca.crt" --tls-auth-clients no
REDIS_TLS_PID=${PIDS[-1]}
start_redis "$REDIS_PLAIN"
REDIS_PLAIN_PID=${PIDS[-1]}

TLS_ARGS=(--tls --cacert "$CERTS/ca.crt")
# name port tls? pid
SERVERS=(
    "recached-plain $RC_PLAIN 0 $RC_PID"
    "recached-tls $RC_TLS 1 $RC_PID"
    "redis-tls $REDIS_TLS 1 $REDIS_TLS_PID"
    "redis-plain $REDIS_PLAIN 0 $REDIS_PLAIN_PID"
)

# CPU time (user + system, clock ticks) a process has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# The client's CPU time (user + system seconds) goes to $TMP/client-cpu when GNU time exists.
if [ -x /usr/bin/time ]; then
    CLIENT_TIME=(/usr/bin/time -f "%U %S" -o "$TMP/client-cpu")
else
    CLIENT_TIME=()
fi

# One redis-benchmark run per test (SET, GET); appends "server pipeline test rps p50 p99
# server_cpu_us_per_request client_cpu_us_per_request" to $TMP/raw. The server's CPU is read
# around each test, so the cost per request on the server side is known even when the
# (single-threaded, OpenSSL) client is the bottleneck; the client's shows how much of the
# TLS cost is the load generator's own.
bench_one() {
    local name=$1 port=$2 tls=$3 pid=$4 pipeline=$5 extra=() t before after line
    [ "$tls" = 1 ] && extra=("${TLS_ARGS[@]}")
    for t in set get; do
        echo "0 0" >"$TMP/client-cpu"
        before=$(cpu_ticks "$pid")
        line=$(gen "${CLIENT_TIME[@]}" redis-benchmark -h 127.0.0.1 -p "$port" "${extra[@]}" \
            -t "$t" -n "$N" -c "$CLIENTS" -P "$pipeline" -r 100000 -d 3 --csv 2>/dev/null |
            tail -n 1)
        after=$(cpu_ticks "$pid")
        # CSV columns: test, rps, avg, min, p50, p95, p99, max
        echo "$line" | awk -F'","' -v s="$name" -v p="$pipeline" \
            -v cpu=$(((after - before) * TICK_US)) -v n="$N" \
            -v ccpu="$(awk '{ print ($1 + $2) * 1e6 }' "$TMP/client-cpu")" '{
            gsub(/"/, "", $1); gsub(/"/, "", $NF);
            printf "%s %s %s %s %s %s %.2f %.2f\n", s, p, $1, $2, $5, $7, cpu / n, ccpu / n }' >>"$TMP/raw"
    done
}

: >"$TMP/raw"
for round in $(seq "$ROUNDS"); do
    for pipeline in 1 16; do
        # Rotate the order each round so no server always runs first.
        for i in $(seq 0 3); do
            entry=${SERVERS[$(((i + round) % 4))]}
            # shellcheck disable=SC2086 # entry holds three words on purpose
            bench_one $entry "$pipeline"
        done
    done
    echo "round $round/$ROUNDS done" >&2
done

# ----- report -----
OUT="$RESULTS/tls-$RUN_ID.md"
median() { sort -g | awk '{a[NR] = $1} END { if (NR == 0) print 0; else print a[int((NR + 1) / 2)] }'; }
get() { # server pipeline test column(4=rps 5=p50 6=p99 7=server CPU 8=client CPU)
    awk -v s="$1" -v p="$2" -v t="$3" -v c="$4" '$1 == s && $2 == p && $3 == t { print $c }' "$TMP/raw" | median
}
{
    echo "# TLS vs plain: recached $RECACHED_VERSION, redis $REDIS_VERSION"
    echo
    echo "Run $RUN_ID; redis-benchmark -c $CLIENTS -n $N -r 100000 -d 3, median of $ROUNDS rounds;"
    echo "$CPU_PLACEMENT; TLS 1.3, ECDSA P-256 certificate; rustls (ring) in recached, OpenSSL in redis."
    echo
    echo "| test | pipeline | server | requests/s | p50 ms | p99 ms | server CPU µs/request | client CPU µs/request |"
    echo "|---|---|---|---:|---:|---:|---:|---:|"
    for t in SET GET; do
        for p in 1 16; do
            for s in recached-plain recached-tls redis-tls redis-plain; do
                echo "| $t | $p | $s | $(get $s $p $t 4) | $(get $s $p $t 5) | $(get $s $p $t 6) | $(get $s $p $t 7) | $(get $s $p $t 8) |"
            done
        done
    done
    echo
    echo "Throughput ratios (what the client saw), and for reference redis' own TLS/plain ratio:"
    echo "when it is as low as recached's, the load generator, not the server, is the limit. The"
    echo "ceiling is what the client's own TLS cost leaves on the shared cores if recached's TLS"
    echo "work were free: (server + client CPU, plain) / (server CPU plain + client CPU TLS)."
    echo
    echo "| test | pipeline | recached TLS / recached plain (target ≥ 0.8) | recached TLS / redis TLS (target ≥ 1.0) | redis TLS / redis plain | client-bound ceiling of TLS / plain |"
    echo "|---|---|---:|---:|---:|---:|"
    for t in SET GET; do
        for p in 1 16; do
            tls=$(get recached-tls $p $t 4)
            plain=$(get recached-plain $p $t 4)
            rtls=$(get redis-tls $p $t 4)
            rplain=$(get redis-plain $p $t 4)
            sp=$(get recached-plain $p $t 7)
            cp=$(get recached-plain $p $t 8)
            ct=$(get recached-tls $p $t 8)
            awk -v t=$t -v p=$p -v a="$tls" -v b="$plain" -v c="$rtls" -v d="$rplain" \
                -v sp="$sp" -v cp="$cp" -v ct="$ct" \
                'BEGIN { printf "| %s | %s | %.2f | %.2f | %.2f | %s |\n", t, p, (b > 0 ? a / b : 0), (c > 0 ? a / c : 0), (d > 0 ? c / d : 0), (ct > 0 ? sprintf("%.2f", (sp + cp) / (sp + ct)) : "n/a") }'
        done
    done
} >"$OUT"
cat "$OUT"
echo "written: $OUT" >&2
