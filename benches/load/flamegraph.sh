#!/usr/bin/env bash
# A flame graph of one benchmark case's server under load.
#
#   benches/load/flamegraph.sh CASE OUT.svg        e.g. ours-keyed-memory keyed-memory.svg
#
# Builds the proxy with the `profiling` profile (release code with line tables, so frames have
# names and inlined functions show), runs CASE once as driver.py measures it, and records the
# server under test (the proxy; for nginx, master and workers) with `perf record -F 999` for
# BENCH_PERF_SECONDS (5) in the middle of a BENCH_DURATION (15) second window. The stacks are
# folded by inferno-collapse-perf and drawn by inferno-flamegraph. Installs linux-perf, nginx and
# wrk from Debian's packages and inferno with cargo if they are missing.
#
# BENCH_CALL_GRAPH sets perf's call-graph flags. The default, "--call-graph dwarf,32768",
# unwinds from a 32 KiB copy of each sample's stack: the build keeps no frame pointers, so with
# "-g" about half the samples end two or three frames up, under [unknown]; with dwarf's default
# 8 KiB copy a third of the stacks reach the thread's start, with 32 KiB most do (tokio's
# futures nest deep). It makes perf.data large (tens of MiB a second) and `perf script` slow
# (it looks up inlined frames with addr2line): expect a minute or two after the run.
# BENCH_PROXY_BIN profiles another binary (build it with debug info for names). The folded
# stacks are kept next to the graph (OUT.folded) for benches/load/profile.py.
set -euo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 CASE OUT.svg   (CASE as in BENCH_CASES, e.g. ours-keyed-memory)" >&2
    exit 2
fi
case_name="$1"
out="$(realpath -m "$2")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export PATH="$PATH:/usr/sbin:$HOME/.cargo/bin"

missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v perf >/dev/null 2>&1 || missing+=(linux-perf)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "[flamegraph] installing ${missing[*]} from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v inferno-flamegraph >/dev/null 2>&1; then
    echo "[flamegraph] cargo install inferno" >&2
    cargo install --locked --quiet inferno
fi
if ! perf stat -e task-clock true >/dev/null 2>&1; then
    echo "[flamegraph] perf cannot count events here (kernel.perf_event_paranoid is" \
        "$(cat /proc/sys/kernel/perf_event_paranoid)); run as root or lower it" >&2
    exit 1
fi

if [ -z "${BENCH_PROXY_BIN:-}" ]; then
    echo "[flamegraph] cargo build --profile profiling" >&2
    (cd "$root" && cargo build --profile profiling --quiet)
    export BENCH_PROXY_BIN="$root/target/profiling/idempotency-proxy"
fi

if [ "$case_name" = bare ] && [ -z "${BENCH_BARE_BIN:-}" ]; then
    echo "[flamegraph] cargo build --profile profiling --example bare-proxy" >&2
    (cd "$root" && cargo build --profile profiling --quiet --example bare-proxy)
    export BENCH_BARE_BIN="$root/target/profiling/examples/bare-proxy"
fi

work="$(mktemp -d -t idempotency-proxy-flamegraph-XXXXXX)"
trap 'rm -rf "$work"' EXIT
BENCH_DURATION="${BENCH_DURATION:-15}" python3 -B "$here/driver.py" \
    --profile "$case_name" --perf-data "$work/perf.data" \
    --perf-seconds "${BENCH_PERF_SECONDS:-5}" \
    --call-graph="${BENCH_CALL_GRAPH:---call-graph dwarf,32768}"

echo "[flamegraph] folding $(du -h "$work/perf.data" | cut -f1) of samples" >&2
perf script -i "$work/perf.data" 2>/dev/null | inferno-collapse-perf >"$work/folded"
inferno-flamegraph --title "$case_name under load" <"$work/folded" >"$out"
# The folded stacks too, next to the graph: benches/load/profile.py reads them.
cp "$work/folded" "${out%.svg}.folded"
echo "[flamegraph] $out" >&2
