# The phases scripts/soak.sh (RESP through the proxy) and scripts/soak-memcached.sh (the
# proxy's memcached port) share, in order: ramp (three steps), sustained, burst, churn, large
# values, and eviction with its check (each engine within its maxmemory). Each phase runs
# through the caller's `phase NAME WHAT RATE [recached-bench run args…]` and each check through
# its `check NAME OUTCOME DETAIL`, which drive the caller's protocol and name its results.
# Needs P (seconds per phase), RATE, MAXMEM and engine_ports (the engines' RESP ports). The kill
# phase differs (how the durable keys are written and read back) and stays with each script.
#
#   soak_phases READ WRITE     the words the phase labels use: GET SET, or get set

soak_phases() {
    local third evict_ok p r1 r2 detail outcome limit used evicted
    third=$(awk -v p="$P" 'BEGIN { printf "%.1f", p / 3 }')
    phase ramp-1 "ramp 1/4" $((RATE / 4)) --duration "$third" --mix get:80,set:20
    phase ramp-2 "ramp 2/4" $((RATE / 2)) --duration "$third" --mix get:80,set:20
    phase ramp-3 "ramp 3/4" $((RATE * 3 / 4)) --duration "$third" --mix get:80,set:20
    phase sustained "steady $1/$2" "$RATE" --duration "$P" --mix get:80,set:20
    phase burst "3x rate" $((RATE * 3)) --duration "$P" --mix get:80,set:20
    phase churn "redial every 50 replies" $((RATE / 2)) --duration "$P" --mix get:80,set:20 --reconnect-every 50
    phase large "64 KB values" $((RATE / 20)) --duration "$P" --mix get:50,set:50 --value-size 65536 --keys 2000

    # Eviction pressure.
    evict_ok=1
    for p in "${engine_ports[@]}"; do
        r1=$(redis-cli -p "$p" CONFIG SET maxmemory "$MAXMEM" 2>&1 || true)
        r2=$(redis-cli -p "$p" CONFIG SET maxmemory-policy allkeys-lru 2>&1 || true)
        [ "$r1" = OK ] && [ "$r2" = OK ] || evict_ok=0
    done
    phase eviction "4 KB $2s, maxmemory $MAXMEM allkeys-lru" $((RATE / 2)) --duration "$P" --mix set:1 \
        --value-size 4096 --keys 1000000
    if [ $evict_ok = 1 ]; then
        detail="" outcome=passed
        limit=$(redis-cli -p "${engine_ports[0]}" CONFIG GET maxmemory | tail -1)
        for p in "${engine_ports[@]}"; do
            used=$(redis-cli -p "$p" INFO memory | tr -d '\r' | sed -n 's/^used_memory://p')
            evicted=$(redis-cli -p "$p" INFO stats | tr -d '\r' | sed -n 's/^evicted_keys://p')
            detail+="engine :$p used_memory ${used:-?} of $limit, evicted_keys ${evicted:-?}; "
            [ -n "$used" ] && [ "$used" -le $((limit + limit / 20)) ] || outcome=failed
        done
        check eviction "$outcome" "$detail"
        for p in "${engine_ports[@]}"; do redis-cli -p "$p" CONFIG SET maxmemory 0 >/dev/null; done
    else
        check eviction skipped "CONFIG SET maxmemory refused by the engines: $r1 / $r2"
    fi
}
