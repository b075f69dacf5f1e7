#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time and prints executions per target.
#
#   scripts/fuzz.sh                       # each target FUZZ_SECONDS (default 60) seconds
#   FUZZ_SECONDS=600 scripts/fuzz.sh exec # one target, longer
#   FUZZ_TOTAL_SECONDS=60 scripts/fuzz.sh # 60 s shared by the targets run (what scripts/test.sh runs)
#
# Targets: engine/resp/fuzz (parse, frame_len: the RESP parser and reply scanner) and fuzz/
# (exec: commands over a random keyspace; split: proxy request splitting and reply merging;
# snapshot: the snapshot loader; restore: RESTORE payloads; fanout: the fan-out's browser
# messages; eval: Lua scripts through EVAL, FCALL and the script libraries). Needs the nightly
# toolchain (present here) and cargo-fuzz (installed if missing, `cargo install cargo-fuzz`).
#
# Each run keeps its corpus (<crate>/corpus/<target>, git-ignored) so later runs start where
# the last stopped. A crash stops the script with status 1 and leaves the input under
# <crate>/artifacts/<target>/; turn it into a regression test in the crate it came from.
#
# Output: one line per target, `target  seconds  total_execs  execs_per_s`, and the same as
# JSON lines in $FUZZ_RESULTS (default target/fuzz-results.jsonl) for the reports.
#
# Environment: FUZZ_SECONDS, FUZZ_TOTAL_SECONDS (overrides FUZZ_SECONDS: split evenly over the
# targets run, at least 1 s each), FUZZ_RESULTS, FUZZ_RSS_LIMIT_MB (default 2048).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-60}"
RESULTS="${FUZZ_RESULTS:-$ROOT/target/fuzz-results.jsonl}"
RSS_LIMIT="${FUZZ_RSS_LIMIT_MB:-2048}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi

# crate dir : targets
ALL=(
    "engine/resp/fuzz:parse frame_len"
    "fuzz:exec split snapshot fanout eval restore"
)
ONLY=("$@")

if [ -n "${FUZZ_TOTAL_SECONDS:-}" ]; then
    count=0
    for entry in "${ALL[@]}"; do
        for t in ${entry#*:}; do
            if [ "${#ONLY[@]}" -eq 0 ] || printf '%s\n' "${ONLY[@]}" | grep -qx "$t"; then
                count=$((count + 1))
            fi
        done
    done
    SECONDS_PER_TARGET=$(( count > 0 ? FUZZ_TOTAL_SECONDS / count : FUZZ_TOTAL_SECONDS ))
    [ "$SECONDS_PER_TARGET" -ge 1 ] || SECONDS_PER_TARGET=1
fi

mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"
printf '%-10s %8s %14s %12s\n' target seconds total_execs execs_per_s
for entry in "${ALL[@]}"; do
    dir="${entry%%:*}"
    for t in ${entry#*:}; do
        if [ "${#ONLY[@]}" -gt 0 ] && ! printf '%s\n' "${ONLY[@]}" | grep -qx "$t"; then
            continue
        fi
        mkdir -p "$ROOT/$dir/corpus/$t" "$ROOT/$dir/artifacts/$t"
        log="$ROOT/target/fuzz-$t.log"
        # Build first, so the time budget is spent fuzzing (the build is cached after once).
        (cd "$ROOT/$dir" && cargo +nightly fuzz build -O "$t" >"$log" 2>&1) || {
            tail -n 30 "$log"
            echo "fuzz.sh: building $t failed" >&2
            exit 1
        }
        status=0
        (cd "$ROOT/$dir" && cargo +nightly fuzz run -O "$t" -- \
            -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb="$RSS_LIMIT" \
            -timeout=10 -print_final_stats=1 >>"$log" 2>&1) || status=$?
        # libFuzzer's final stats: "stat::number_of_executed_units: N", and "Done N runs in
        # S second(s)" for the time.
        execs=$( (grep -E '^stat::number_of_executed_units:' "$log" || true) | tail -n 1 | awk '{print $2}')
        secs=$( (grep -E '^Done [0-9]+ runs in' "$log" || true) | tail -n 1 | awk '{print $5}')
        secs=${secs:-$SECONDS_PER_TARGET}
        execs=${execs:-0}
        rate=$(( secs > 0 ? execs / secs : 0 ))
        printf '%-10s %8s %14s %12s\n' "$t" "$secs" "$execs" "$rate"
        printf '{"target":"%s","seconds":%s,"total_execs":%s,"execs_per_s":%s,"ok":%s}\n' \
            "$t" "$secs" "$execs" "$rate" "$([ "$status" -eq 0 ] && echo true || echo false)" \
            >>"$RESULTS"
        if [ "$status" -ne 0 ]; then
            grep -E 'ERROR|panicked|SUMMARY|Test unit written' "$log" | head -n 20 || true
            echo "fuzz.sh: $t found a crash (status $status); see $log and $dir/artifacts/$t/" >&2
            exit 1
        fi
    done
done
