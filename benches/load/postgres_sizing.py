#!/usr/bin/env python3
"""Sizing of the Postgres store: what one keyed first request and one replay cost it, measured.

    python3 benches/load/postgres_sizing.py [--duration 10] [--connections 64]

It starts a PostgreSQL of its own with its durable defaults (stores.PostgresServer: `fsync`
and `synchronous_commit` on), the release proxy (BENCH_PROXY_BIN, or
target/release/idempotency-proxy) with `--store postgres://...` in front of an nginx answering
a 204-byte JSON body, and sends with wrk (-t2 -c64) the sizing script's 203-byte body:

1. keyed first requests (a fresh key each) for `--duration` seconds after a warm-up;
2. replays of 16 keys by a proxy whose replay cache is off (sizing.proxy.toml), so each is read
   from the store.

Around each window, per request: CPU time of the proxy and of every PostgreSQL process
(/proc/PID/stat), the WAL written (`pg_current_wal_lsn()`), the transactions committed and the
statements run (`pg_stat_database.xact_commit`; `pg_stat_statements` is not assumed, so
statements are counted as the commits they made: each is its own transaction), and the WAL
flushes (`pg_stat_wal.wal_sync`). It prints one line per window and writes every figure to
benches/load/results/postgres_sizing.json.
"""

import sys

sys.dont_write_bytecode = True

import argparse
import json
import os
import time

from procs import Interrupted, bench_scope, cpu_seconds, free_port, interrupted, log
from runner import HERE, ROOT
from servers import Fixtures, Proxy, Running
from sizing import BODY, prime, stop_and_wait, wrk
from stores import PostgresServer


def counters(store):
    """The database's counters now: WAL position (bytes), commits, WAL flushes."""
    row = store.psql(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8, "
        "(SELECT sum(xact_commit) FROM pg_stat_database)::int8, "
        "(SELECT wal_sync FROM pg_stat_wal)::int8")
    wal, commits, syncs = (int(v) for v in row.split("|"))
    return {"wal_bytes": wal, "commits": commits, "wal_syncs": syncs}


def cpu_of(pids):
    """CPU seconds of those of `pids` still there."""
    return sum(cpu_seconds([pid]) or 0.0 for pid in pids)


def window(server, mode, prefix, args):
    store = server.store
    before = counters(store)
    time.sleep(0.5)  # the probe's own backend gone
    watched = {"proxy": server.pids, "postgres": store.pids}
    cpu = {k: cpu_of(pids) for k, pids in watched.items()}
    figures = wrk(None, server, mode, args.duration, prefix, args)
    cpu = {k: cpu_of(watched[k]) - v for k, v in cpu.items()}
    after = counters(store)
    n = figures["requests"]
    out = {
        "requests": n,
        "req_per_s": n / (figures["duration_us"] / 1e6),
        "p99_ms": figures["p99_us"] / 1000,
        "proxy_cpu_us": cpu["proxy"] * 1e6 / n,
        "postgres_cpu_us": cpu["postgres"] * 1e6 / n,
    }
    # The psql probes themselves commit once each: two per window, left out.
    out.update({f"{k}_per_request": (after[k] - before[k] - (2 if k == "commits" else 0)) / n
                for k in after})
    return out


def measure(fixtures, args):
    run = f"pg-sizing-{os.getpid()}"
    result = {}
    server = Proxy(PostgresServer()).start(fixtures, "pg-sizing-a")
    try:
        log(f"warm-up, then {args.duration}s of keyed first requests")
        wrk(None, server, "keyed", args.warmup, f"{run}-w", args)
        result["keyed"] = window(server, "keyed", f"{run}-k", args)
    finally:
        stop_and_wait(server)
        server.stop()
    server = Proxy(PostgresServer(), config="sizing.proxy.toml").start(fixtures, "pg-sizing-b")
    try:
        log("replays read from the store")
        prime(server, f"{run}-c")
        result["replay_store"] = window(server, "replay", f"{run}-c", args)
    finally:
        stop_and_wait(server)
        server.stop()
    return result


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured window")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "postgres_sizing.json"))
    return parser.parse_args()


def main():
    args = parse_args()
    os.environ["PATH"] += ":/usr/sbin"
    binary = os.environ.get("BENCH_PROXY_BIN",
                            os.path.join(ROOT, "target", "release", "idempotency-proxy"))
    try:
        with bench_scope("idempotency-proxy-pg-sizing-") as (processes, tmp):
            fixtures = Fixtures(tmp, processes, {"A": binary}, run_id=str(os.getpid()))
            port = free_port()
            nginx = fixtures.start_nginx("sizing.upstream.nginx.conf", "sizing-upstream", port)
            fixtures.upstream = Running(port, [nginx.pid])
            result = measure(fixtures, args)
    except Interrupted as e:
        return interrupted(e)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"settings": vars(args), "cpus": os.cpu_count(), "windows": result}, f,
                  indent=1)
        f.write("\n")
    for name, figures in result.items():
        print(name, " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
