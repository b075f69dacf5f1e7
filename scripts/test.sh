#!/usr/bin/env bash
# THE test command of recached (CI runs it through .ci/run). From any directory:
#
#   scripts/test.sh
#
# 1. Installs what the tests need, only if missing (idempotent; root or sudo for apt-get):
#    redis-server, redis-cli, redis-benchmark (differential and end-to-end tests) and
#    nutcracker (benchmarks), and the wasm32-unknown-unknown target; the smart-client test
#    clients into tests/cluster/ (project-local, git-ignored): redis-py in tests/cluster/.venv
#    (pip, tests/cluster/requirements.txt) and ioredis in tests/cluster/node_modules
#    (npm ci, tests/cluster/package-lock.json); the newest redis-py, node-redis and ioredis,
#    pinned exactly, for the default-settings tests through the proxy, into tests/clients/
#    (redis-py in tests/clients/.venv from tests/clients/requirements.txt; node-redis and
#    ioredis in tests/clients/node_modules, npm ci from tests/clients/package-lock.json), with
#    the memcached clients pymemcache (in that venv) and npm `memcached` (in node_modules);
#    Debian's memcached and libmemcached-tools for the memcached port's tests.
#    Each is skipped when already installed.
#    Debian's chromium and playwright-core in tests/browser/node_modules (npm ci, idempotent)
#    for the browser-replica tests, and the replica module (scripts/build-wasm.sh).
# 2. Builds the release binaries and exports RECACHED_BIN=<abs path> for the tests in tests/ and
#    RECACHED_BENCH_BIN (the benchmark tools, `recached-bench`) for the benchmark smoke.
# 3. Runs every test of the workspace (`cargo test --workspace`).
# 4. Runs every fuzz target briefly (scripts/fuzz.sh, 60 s shared by the targets; nightly +
#    cargo-fuzz).
#    Then checks that the pure crates build for wasm32 (the browser replica runs that code).
# 5. Runs the benchmark scripts' short versions (BENCH_SMOKE=1, about a minute in all).
#
# Environment: CARGO_TEST_ARGS (extra args after `cargo test --workspace`, e.g. "-- --nocapture").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
start=$(date +%s)
step() { printf '\n==> [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

step "tools"
missing=()
command -v redis-server    >/dev/null || missing+=(redis-server)
command -v redis-cli       >/dev/null || missing+=(redis-tools)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v nutcracker      >/dev/null || missing+=(nutcracker)
# A real memcached 1.6 for the memcached port's byte-for-byte transcripts, and memccapable
# (libmemcached-tools) for its conformance run (tests/tests/memcached.rs).
command -v memcached       >/dev/null || missing+=(memcached)
command -v memccapable     >/dev/null || missing+=(libmemcached-tools)
# Debian's Chromium for the browser-replica tests (tests/browser, driven by playwright-core).
[ -x /usr/bin/chromium ]              || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        $(printf '%s\n' "${missing[@]}" | sort -u)
    # The Debian package starts a redis-server on 6379 as a service; the tests use their own
    # servers on free ports and never touch it.
fi
redis-server --version
memcached -V
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    echo "installing the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi
cargo --version

step "smart-client test clients (tests/cluster)"
CLUSTER_DIR="$ROOT/tests/cluster"
if ! "$CLUSTER_DIR/.venv/bin/python" -c 'import redis' 2>/dev/null \
    || ! cmp -s "$CLUSTER_DIR/requirements.txt" "$CLUSTER_DIR/.venv/requirements.txt"; then
    echo "installing redis-py into $CLUSTER_DIR/.venv"
    python3 -m venv "$CLUSTER_DIR/.venv"
    "$CLUSTER_DIR/.venv/bin/python" -m pip install -q -r "$CLUSTER_DIR/requirements.txt"
    cp "$CLUSTER_DIR/requirements.txt" "$CLUSTER_DIR/.venv/requirements.txt"
fi
"$CLUSTER_DIR/.venv/bin/python" -c 'import redis; print("redis-py", redis.__version__)'
# prometheus_client: its text-format parser checks the supervisor's /metrics (tests/tests/metrics.rs).
if ! "$CLUSTER_DIR/.venv/bin/python" -c 'import prometheus_client' 2>/dev/null; then
    echo "installing prometheus_client into $CLUSTER_DIR/.venv"
    "$CLUSTER_DIR/.venv/bin/python" -m pip install -q prometheus_client==0.21.1
fi
if ! [ -d "$CLUSTER_DIR/node_modules/ioredis" ] \
    || ! cmp -s "$CLUSTER_DIR/package-lock.json" "$CLUSTER_DIR/node_modules/.package-lock.json.installed"; then
    echo "installing ioredis into $CLUSTER_DIR/node_modules"
    (cd "$CLUSTER_DIR" && npm ci --no-audit --no-fund --silent)
    cp "$CLUSTER_DIR/package-lock.json" "$CLUSTER_DIR/node_modules/.package-lock.json.installed"
fi
node -e 'console.log("ioredis", require(process.argv[1] + "/node_modules/ioredis/package.json").version)' "$CLUSTER_DIR"

step "client libraries through the proxy (tests/clients)"
# The newest released redis-py, rq, Django, node-redis (npm `redis`) and ioredis, pinned exactly in
# tests/clients/requirements.txt and package-lock.json (raise the pins when new versions
# appear), driven with their default settings through the proxy (tests/tests/clients_proxy.rs).
CLIENTS_DIR="$ROOT/tests/clients"
# rq and Django (its RedisCache backend) live in the same venv (tests/clients/rq_proxy.py,
# django_cache_proxy.py); any change to requirements.txt reinstalls.
if ! "$CLIENTS_DIR/.venv/bin/python" -c 'import redis, rq, django, pymemcache' 2>/dev/null \
    || ! cmp -s "$CLIENTS_DIR/requirements.txt" "$CLIENTS_DIR/.venv/requirements.txt"; then
    echo "installing redis-py, rq, Django and pymemcache into $CLIENTS_DIR/.venv"
    python3 -m venv "$CLIENTS_DIR/.venv"
    "$CLIENTS_DIR/.venv/bin/python" -m pip install -q -r "$CLIENTS_DIR/requirements.txt"
    cp "$CLIENTS_DIR/requirements.txt" "$CLIENTS_DIR/.venv/requirements.txt"
fi
"$CLIENTS_DIR/.venv/bin/python" -c 'import redis, rq, django; print("redis-py", redis.__version__, "rq", rq.VERSION, "django", django.__version__)'
if ! [ -d "$CLIENTS_DIR/node_modules/redis" ] || ! [ -d "$CLIENTS_DIR/node_modules/ioredis" ] \
    || ! [ -d "$CLIENTS_DIR/node_modules/memcached" ] \
    || ! cmp -s "$CLIENTS_DIR/package-lock.json" "$CLIENTS_DIR/node_modules/.package-lock.json.installed"; then
    echo "installing node-redis and ioredis into $CLIENTS_DIR/node_modules"
    (cd "$CLIENTS_DIR" && npm ci --no-audit --no-fund --silent)
    cp "$CLIENTS_DIR/package-lock.json" "$CLIENTS_DIR/node_modules/.package-lock.json.installed"
fi
node -e 'for (const p of ["redis", "ioredis", "memcached"]) console.log(p, require(process.argv[1] + "/node_modules/" + p + "/package.json").version)' "$CLIENTS_DIR"

step "browser-replica test clients (tests/browser) and the wasm module"
BROWSER_DIR="$ROOT/tests/browser"
if ! [ -d "$BROWSER_DIR/node_modules/playwright-core" ] \
    || ! cmp -s "$BROWSER_DIR/package-lock.json" "$BROWSER_DIR/node_modules/.package-lock.json.installed"; then
    echo "installing playwright-core into $BROWSER_DIR/node_modules (no browser download: Debian's chromium is used)"
    (cd "$BROWSER_DIR" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
    cp "$BROWSER_DIR/package-lock.json" "$BROWSER_DIR/node_modules/.package-lock.json.installed"
fi
/usr/bin/chromium --version 2>/dev/null || true
# Built here once, so the tests (which also call it, incrementally) start with it in place.
RECACHED_WASM="$(scripts/build-wasm.sh)"
export RECACHED_WASM
ls -l "$RECACHED_WASM"

step "cargo build --release -p recached -p recached-bench"
cargo build --release -p recached -p recached-bench
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
export RECACHED_BIN="$TARGET_DIR/release/recached"
test -x "$RECACHED_BIN"
echo "RECACHED_BIN=$RECACHED_BIN"
# Exported, so the benchmark scripts below use this build instead of building their own.
export RECACHED_BENCH_BIN="$TARGET_DIR/release/recached-bench"
test -x "$RECACHED_BENCH_BIN"
echo "RECACHED_BENCH_BIN=$RECACHED_BENCH_BIN"

step "cargo test --workspace"
# shellcheck disable=SC2086 # CARGO_TEST_ARGS is split on purpose
cargo test --workspace ${CARGO_TEST_ARGS:-}

step "fuzz targets, briefly (scripts/fuzz.sh: FUZZ_TOTAL_SECONDS, default 60, split over the targets)"
# Every cargo-fuzz target (engine/resp/fuzz, fuzz/) runs a few seconds (60 s in all, ~8 s each
# for seven targets): a smoke test that they build and hold their oracles; long runs are
# `FUZZ_SECONDS=600 scripts/fuzz.sh` (FUZZ_SECONDS set: that long each). Needs nightly;
# cargo-fuzz is installed once if missing (~45 s).
if cargo +nightly --version >/dev/null 2>&1; then
    if ! cargo fuzz --version >/dev/null 2>&1; then
        cargo install --locked cargo-fuzz
    fi
    if [ -n "${FUZZ_SECONDS:-}" ]; then
        FUZZ_RESULTS="$ROOT/target/fuzz-results.jsonl" scripts/fuzz.sh
    else
        FUZZ_TOTAL_SECONDS="${FUZZ_TOTAL_SECONDS:-60}" FUZZ_RESULTS="$ROOT/target/fuzz-results.jsonl" scripts/fuzz.sh
    fi
else
    echo "skipped: no nightly toolchain (rustup toolchain install nightly)"
fi

step "wasm32 build of the pure crates"
cargo build -p engine-core -p resp -p recached-wasm --target wasm32-unknown-unknown

step "benchmark smoke (scripts/bench-*.sh, scripts/soak.sh: short versions)"
# Ran, no errors, JSON valid: each script's BENCH_SMOKE=1 version writes into a scratch results
# folder, then `recached-bench validate` checks every file (and that no request failed, except in
# the soak's kill phase, where requests to the killed engine fail by design) and the report renders.
BENCH_SMOKE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/recached-bench-smoke.XXXXXX")
for s in bench-scaling bench-systems bench-scenarios soak soak-memcached bench-memcached bench-memory-shapes bench-proxy \
    bench-scripting bench-streams bench-datatypes bench-geo bench-tracking bench-transactions \
    bench-small-collections bench-reshard; do
    BENCH_SMOKE=1 BENCH_RESULTS="$BENCH_SMOKE_DIR" scripts/$s.sh >"$BENCH_SMOKE_DIR/$s.log" 2>&1 \
        || { tail -n 30 "$BENCH_SMOKE_DIR/$s.log"; echo "$s failed"; exit 1; }
    echo "$s: ok"
done
"$RECACHED_BENCH_BIN" validate "$BENCH_SMOKE_DIR"/*.json
"$RECACHED_BENCH_BIN" validate --no-errors $(ls "$BENCH_SMOKE_DIR"/*.json | grep -v -- '-kill\.json$')
"$RECACHED_BENCH_BIN" report --results "$BENCH_SMOKE_DIR" --out "$BENCH_SMOKE_DIR/BENCHMARKS.md" \
    --svg-dir "$BENCH_SMOKE_DIR/svg"
rm -rf "$BENCH_SMOKE_DIR"

step "all tests passed"
