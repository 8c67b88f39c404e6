#!/usr/bin/env bash
# Load benchmark: the proxy next to the upstream reached directly and next to nginx.
#
#   benches/load/run.sh
#
# Installs nginx and wrk from Debian's packages if missing, builds the proxy in release mode
# (unless BENCH_PROXY_BIN names a binary), then runs driver.py, which prints the tables and the
# goals, and writes a chart and every round's figures. Knobs (environment):
#   BENCH_DURATION=10  BENCH_WARMUP=2  BENCH_ROUNDS=5  BENCH_CONNECTIONS=64  BENCH_THREADS=2
#   BENCH_REDIS_URL=redis://127.0.0.1:6379/11  BENCH_REPLAY_KEYS=16
#   BENCH_BODY='{...}'  (the body wrk sends; default a 50-byte JSON object)
#   BENCH_CASES=ours-keyed-memory,...  (a subset; nginx pass-through always runs)
#   BENCH_PROXY_BIN=path  (default target/release/idempotency-proxy)
#   BENCH_PROXY_BIN_B=path  (a second build: every case of ours also runs as "<case> (B)")
#   BENCH_BARE_BIN=path  (the floor, bare_proxy.rs; default target/release/examples/bare-proxy)
#   BENCH_CHART=benches/load/results/chart.svg  (results.json is written next to it)
#   VALKEY_SERVER=path  (the Valkey case's server; default: the one .ci/fetch-valkey fetches)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "[bench] installing ${missing[*]} from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
export PATH="$PATH:/usr/sbin"

if [ -z "${BENCH_PROXY_BIN:-}" ]; then
    echo "[bench] cargo build --release" >&2
    (cd "$root" && cargo build --release --quiet)
fi

if [ -z "${BENCH_BARE_BIN:-}" ]; then
    echo "[bench] cargo build --release --example bare-proxy" >&2
    (cd "$root" && cargo build --release --quiet --example bare-proxy)
fi

if [ -z "${VALKEY_SERVER:-}" ]; then
    if VALKEY_SERVER="$("$root/.ci/fetch-valkey" 2>/dev/null)"; then
        export VALKEY_SERVER
    else
        echo "[bench] no Valkey could be fetched (.ci/fetch-valkey): its case is skipped" >&2
    fi
fi

exec python3 -B "$here/driver.py" "$@"
