#!/usr/bin/env python3
"""Sizing: what one keyed first request and one replay cost each store, measured.

    python3 benches/load/sizing.py [--stores memory,file,redis,valkey,cluster] [--duration 10]

For each store it starts the release proxy (BENCH_PROXY_BIN, or target/release/idempotency-proxy)
in front of an nginx answering a 204-byte JSON body, and the store's server of its own (a Redis,
a Valkey 9, a cluster of three Redis masters; none of them shared, so nothing else is counted).
Then, with wrk (-t2 -c64) sending a 203-byte JSON body:

1. keyed first requests (a fresh key each) for `--duration` seconds after a warm-up;
2. replays of 16 keys, answered from the proxy's replay cache;
3. replays of 16 keys by a second proxy whose replay cache is off (sizing.proxy.toml), so each
   is read from the store, as a replay more than `replay_cache_ttl` after the last one is;
4. `--trips` keyed first requests and as many replays, one at a time, under `MONITOR`: the
   commands the proxy sends per request (round trips) and those its scripts run.

Around each window: CPU time of the proxy and of the store's processes (/proc/PID/stat), the
proxy's resident set and /proc/PID/io, its fdatasync and write calls (`perf stat`), its request
log's growth, and each node's INFO (used_memory, bytes over the wire, calls per command). Bytes
held per record: used_memory's growth over the keyed window (the proxy's resident set for the
memory store) divided by the requests; for the file store, the store file and its log after
the proxy has closed them, and the file's size polled through the keyed window with the
requests made when it grew (redb grows its file in doublings: each is taken when it is full). It prints a table and writes every figure to
benches/load/results/sizing.json. CPU figures move with the machine's other load; counts and
bytes do not.
"""

import sys

sys.dont_write_bytecode = True

import argparse
import http.client
import json
import os
import signal
import subprocess
import time

from procs import Interrupted, bench_scope, cpu_seconds, free_port, interrupted, log
from sizing_probes import (Growth, Monitor, Snapshot, Syscalls, calls_between, node_shares,
                           node_sum, store_bytes)
from redisclient import Redis
from runner import HERE, ROOT
from servers import Fixtures, Proxy, Running
from sizing_report import print_table
from stores import RedisCluster, RedisServer, ValkeyServer

BODY = ('{"amount":2000,"currency":"eur","customer":"cus_Q1w2E3r4T5y6U7","payment_method":'
        '"pm_1PqR8sLkdF2a1bC3","description":"Order 10452, 3 items","metadata":{"order_id":'
        '"10452","channel":"web"},"capture":true}')
REPLAY_KEYS = 16
STORES = {
    "memory": "memory",
    "file": "file:@PREFIX@/sizing-@WHICH@.db",
    "redis": RedisServer(),
    "valkey": ValkeyServer(),
    "cluster": RedisCluster(),
}


def proxy(store, which, config=None):
    if isinstance(store, str):
        store = store.replace("@WHICH@", which)
    return Proxy(store, config=config)


class Client:
    """One keep-alive connection, one request at a time."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def post(self, key):
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        self.conn.request("POST", "/v1/charges", BODY, headers)
        response = self.conn.getresponse()
        response.read()
        return response.status, response.getheader("Idempotent-Replayed")


def wrk(fixtures, server, mode, seconds, prefix, args):
    env = dict(os.environ, BENCH_MODE=mode, BENCH_KEY_PREFIX=prefix, BENCH_BODY=BODY,
               BENCH_REPLAY_KEYS=str(REPLAY_KEYS))
    argv = ["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{seconds}s",
            "--timeout", "5s", "-s", os.path.join(HERE, "bench.lua"),
            f"http://127.0.0.1:{server.port}/v1/charges"]
    out = subprocess.run(argv, env=env, capture_output=True, check=True, timeout=seconds + 60)
    line = next(l for l in out.stdout.decode().splitlines() if l.startswith("BENCH "))
    figures = {k: int(v) for k, v in (item.split("=") for item in line.split()[1:])}
    errors = sum(v for k, v in figures.items() if k.startswith("err_"))
    if errors:
        raise RuntimeError(f"wrk {mode}: {errors} errors: {line}")
    return figures


def prime(server, prefix):
    client = Client(server.port)
    for i in range(REPLAY_KEYS):
        client.post(f"{prefix}-r{i}")
        if client.post(f"{prefix}-r{i}")[1] != "true":
            raise RuntimeError("priming did not produce a replay")


def window(fixtures, server, name, mode, prefix, args, store_file=None):
    """One measured wrk window: its figures per request."""
    log_path = os.path.join(fixtures.tmp, f"{name}.stderr")
    perf = Syscalls(server.pids[0], os.path.join(fixtures.tmp, f"{name}.perf"))
    growth = Growth(store_file, log_path) if store_file else None
    before = Snapshot.take(server, log_path)
    figures = wrk(fixtures, server, mode, args.duration, prefix, args)
    after = Snapshot.take(server, log_path)
    n = figures["requests"]
    out = {
        "requests": n,
        "req_per_s": n / (figures["duration_us"] / 1e6),
        "p99_ms": figures["p99_us"] / 1000,
        **proxy_figures(before, after, n),
        "syscalls": {k: v / n for k, v in perf.stop().items()},
    }
    if growth is not None:
        out["file_growth"] = file_growth(growth.stop(), before, after, n)
    if server.store is not None:
        out.update(store_figures(before, after, n))
    return out


def proxy_figures(before, after, n):
    io = {name: (after.proxy_io[name] - before.proxy_io[name]) / n
          for name in ("write_bytes", "wchar")}
    return {
        "proxy_cpu_us": (after.proxy_cpu_s - before.proxy_cpu_s) * 1e6 / n,
        "proxy_rss_growth_bytes": (after.proxy_rss - before.proxy_rss) / n,
        "log_bytes": (after.log_bytes - before.log_bytes) / n,
        "disk_write_bytes": io["write_bytes"],
        "write_call_bytes": io["wchar"],
    }


def file_growth(steps, before, after, n):
    """Each size the file had, with the requests made when it grew to it, counted by the
    request log's lines so far."""
    line = (after.log_bytes - before.log_bytes) / n
    return [{"file_bytes": size, "window_requests": (log - before.log_bytes) / line}
            for size, log in steps]


def store_figures(before, after, n):
    out = {"store_cpu_us": (after.store_cpu_s - before.store_cpu_s) * 1e6 / n}
    for figure in ("used_memory", "total_net_input_bytes", "total_net_output_bytes"):
        out[f"store_{figure}"] = (node_sum(after, figure) - node_sum(before, figure)) / n
    out["store_calls"] = {k: v / n for k, v in calls_between(before, after).items()}
    out["store_node_shares"] = node_shares(before, after)
    return out


def round_trips(server, prefix, count):
    """Commands per keyed first request and per replay (the cache off), one at a time."""
    client = Client(server.port)
    out = {}
    for kind in ("keyed", "replay"):
        monitor = Monitor(server.store.nodes)
        for i in range(count):
            status, replayed = client.post(f"{prefix}-t{i}")
            if (replayed == "true") != (kind == "replay"):
                raise RuntimeError(f"{kind} {i}: status {status}, replayed {replayed}")
        seen = monitor.stop()
        out[kind] = {side: {k: v / count for k, v in counts.items()}
                     for side, counts in seen.items()}
    return out


def idle_cpu(store, seconds=3.0):
    """CPU seconds per second the store's processes use with no request: a cluster's masters
    gossip and run their timers whatever the load."""
    before = cpu_seconds(store.pids)
    time.sleep(seconds)
    return (cpu_seconds(store.pids) - before) / seconds


def record_sample(store):
    """MEMORY USAGE of one record, from the first node that holds one."""
    for url in store.nodes:
        with Redis(url) as client:
            _, keys = client.call("SCAN", "0", "MATCH", "idempotency-proxy:*", "COUNT", "1000")
            if keys:
                return int(client.call("MEMORY", "USAGE", keys[0], "SAMPLES", "0"))
    return None


def stop_and_wait(server):
    """Stops the proxy and waits until it has exited (the file store's last checkpoint done),
    leaving it to `server.stop()` to reap it and remove its files."""
    os.kill(server.pids[0], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and cpu_seconds(server.pids) is not None:
        with open(f"/proc/{server.pids[0]}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        time.sleep(0.05)


def file_sizes(fixtures, which):
    db = os.path.join(fixtures.tmp, f"sizing-{which}.db")
    return {db: store_bytes(db)} if os.path.exists(db) else {}


def measure_store(fixtures, store_name, args):
    spec = STORES[store_name]
    run = f"sizing-{os.getpid()}-{store_name}"
    result = {}
    with_cache(fixtures, store_name, proxy(spec, "a"), run, args, result)
    server = proxy(spec, "b", "sizing.proxy.toml").start(fixtures, f"sizing-{store_name}-b")
    try:
        log(f"{store_name}: replays read from the store")
        prime(server, f"{run}-c")
        result["replay_store"] = window(fixtures, server, f"sizing-{store_name}-b", "replay",
                                        f"{run}-c", args)
        if server.store is not None:
            log(f"{store_name}: {args.trips} of each under MONITOR")
            result["round_trips"] = round_trips(server, f"{run}-t", args.trips)
    finally:
        stop_and_wait(server)
        server.stop()
        if server.store is not None:
            server.store.flush()
    return result


def with_cache(fixtures, store_name, spec, run, args, result):
    """Keyed first requests, then replays from the replay cache, with the default settings."""
    name = f"sizing-{store_name}-a"
    server = spec.start(fixtures, name)
    store_file = os.path.join(fixtures.tmp, "sizing-a.db") if store_name == "file" else None
    try:
        if server.store is not None:
            result["store_idle_cpu_per_s"] = idle_cpu(server.store)
        log(f"{store_name}: warm-up, then {args.duration}s of keyed first requests")
        at_start = sum(file_sizes(fixtures, "a").values())
        result["warmup_requests"] = wrk(fixtures, server, "keyed", args.warmup, f"{run}-w",
                                        args)["requests"]
        result["keyed"] = window(fixtures, server, name, "keyed", f"{run}-k", args, store_file)
        if server.store is not None:
            result["record_memory_usage_bytes"] = record_sample(server.store)
        log(f"{store_name}: replays from the replay cache")
        prime(server, f"{run}-h")
        result["replay_cached"] = window(fixtures, server, name, "replay", f"{run}-h", args)
    finally:
        stop_and_wait(server)
        if store_file is not None and "keyed" in result:
            file_after_close(fixtures, result, at_start)
        server.stop()
        if server.store is not None:
            server.store.flush()


def file_after_close(fixtures, result, at_start):
    # Every record it holds: the warm-up's, the window's and the replays' keys.
    records = result["warmup_requests"] + result["keyed"]["requests"] + REPLAY_KEYS
    result["file_bytes"] = file_sizes(fixtures, "a")
    result["file_bytes_per_record"] = (sum(result["file_bytes"].values()) - at_start) / records


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured window")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trips", type=int, default=200, help="requests under MONITOR")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "sizing.json"))
    parser.add_argument("--upstream", default="sizing.upstream.nginx.conf",
                        help="the upstream's nginx config template (upstream.nginx.conf: the "
                             "load run's 47-byte answer)")
    return parser.parse_args()


def main():
    args = parse_args()
    os.environ["PATH"] += ":/usr/sbin"  # nginx, as run.sh finds it
    binary = os.environ.get("BENCH_PROXY_BIN",
                            os.path.join(ROOT, "target", "release", "idempotency-proxy"))
    try:
        with bench_scope("idempotency-proxy-sizing-") as (processes, tmp):
            return run(args, binary, processes, tmp)
    except Interrupted as e:
        return interrupted(e)


def run(args, binary, processes, tmp):
    fixtures = Fixtures(tmp, processes, {"A": binary}, run_id=str(os.getpid()))
    port = free_port()
    nginx = fixtures.start_nginx(args.upstream, "sizing-upstream", port)
    fixtures.upstream = Running(port, [nginx.pid])
    results = {name: measure_store(fixtures, name, args) for name in args.stores.split(",")}
    settings = {"duration_s": args.duration, "connections": args.connections,
                "threads": args.threads, "request_body_bytes": len(BODY),
                "upstream": args.upstream, "cpus": os.cpu_count(),
                "load_average": os.getloadavg()}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"settings": settings, "stores": results}, f, indent=1)
        f.write("\n")
    print_table(results)
    print(f"\nEvery figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
