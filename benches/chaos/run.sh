#!/usr/bin/env bash
# The fault campaign (docs/testing.md, "Fault campaign"): builds the proxy and the campaign, runs one
# campaign and checks its histories. Exits 1 when the checker finds a forbidden second run, a
# mismatched replay or a lost answer (with `--scenario outbox` or `brokers`: a lost row, a
# rolled-back row sent, an effect twice); 2 when the campaign could not run.
#
#   benches/chaos/run.sh [--store file|redis|cluster|postgres] [--replicas N] [--duration SECS]
#                        [--seed N] [--clients M]
#   benches/chaos/run.sh --scenario outbox|brokers [--replicas RELAYS] [--duration SECS] [--seed N]
#
# The histories go to a temporary directory, removed after a clean run and kept otherwise
# (CHAOS_DIR=path picks the directory and always keeps it). CHAOS_PROXY=path runs the campaign
# against that proxy binary instead of building this tree's, to compare two builds on one seed.
set -euo pipefail
cd "$(dirname "$0")/../.."

proxy=${CHAOS_PROXY:-target/release/idempotency-proxy}
[ -n "${CHAOS_PROXY:-}" ] || cargo build --release --quiet
cargo build --release --quiet --example chaos

if [ -n "${CHAOS_DIR:-}" ]; then
  dir=$CHAOS_DIR
  keep=1
  mkdir -p "$dir"
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/idempotency-proxy-chaos.XXXXXX")
  keep=0
fi

# Should the campaign itself die, stop what it started: by PID, and only processes that still
# belong to this run (a PID may have been reused since): a proxy names its config in the run
# directory on its command line; a redis-server renames itself but works in its directory there,
# and a postgres works in its data directory there.
belongs_to_run() {
  { tr '\0' ' ' <"/proc/$1/cmdline"; readlink "/proc/$1/cwd"; } 2>/dev/null | grep -qF "$dir"
}
stop_leftovers() {
  [ -f "$dir/pids" ] || return 0
  while read -r pid; do
    if belongs_to_run "$pid"; then
      kill -CONT "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done <"$dir/pids"
}
trap stop_leftovers EXIT

status=0
target/release/examples/chaos run --dir "$dir" --binary "$proxy" "$@" ||
  status=$?

if [ "$status" -eq 0 ] && [ "$keep" -eq 0 ]; then
  stop_leftovers
  rm -rf "$dir"
elif [ "$status" -ne 0 ]; then
  echo "chaos: histories and logs kept in $dir"
fi
exit "$status"
