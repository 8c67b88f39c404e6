#!/usr/bin/env bash
# The outbox relay's benchmark (docs/performance.md, "Outbox relay"): one relay, the release
# binary, delivering to a local receiver from a private PostgreSQL with its durable defaults,
# started on a free port as the tests start theirs.
#
#   benches/load/outbox.sh [--cases drain,drain-nats,blocked,notify,poll,consume-raw,...]
#                          [--backlog 50000] [--rate 1000]
#                          [--blocked 200000] [--delivered-kept 1000000]
#                          [--seconds 20] [--concurrency N]
#
# `drain-nats` drains to JetStream, and `consume-raw`, `consume-file`, `consume-redis` measure
# the consumer from JetStream (docs/performance.md, "Brokers"); they start a private
# `nats-server -js` (and `redis-server`) from PATH.
#
# Prints a table and a JSON line. Run it alone on the machine (flock around it when others
# may benchmark too): CPU per row is read from /proc.
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build --release --quiet
cargo build --release --quiet --example outbox-load
exec target/release/examples/outbox-load --binary target/release/idempotency-proxy "$@"
