#!/usr/bin/env python3
"""Delivery throughput of an inbox route: how fast the proxy empties a full queue.

    python3 benches/load/delivery.py                 # memory, file and Redis, 3,000 each
    DELIVERY_COUNT=5000 DELIVERY_STORES=file python3 benches/load/delivery.py

For each store: an upstream (a Python asyncio server here, started as a process of its own)
answers every request `200` after DELIVERY_DELAY_MS (20) ms; the release proxy runs with one
inbox route to it (`deliver_concurrency` DELIVERY_CONCURRENCY, 16, the other keys at their
defaults); DELIVERY_CLIENTS (32) keep-alive connections enqueue DELIVERY_COUNT (3,000) keyed
POSTs as fast as the proxy acknowledges them; then the upstream's arrivals give deliveries per
second from the first to the last arrival, set against the cap concurrency / delay (16 / 20 ms
= 800/s), and every key must have arrived exactly once (`Idempotency-Key`, `Delivery-Attempt:
1`), with the route's queue empty afterwards (`GET /inbox/{route}` on the admin listener).

Before the stores, the upstream alone is measured with wrk at DELIVERY_CONCURRENCY and 64
connections (its own cap is connections / delay): what it gives at the proxy's concurrency is a
second, practical ceiling (Python's timers and parsing add a little to each 20 ms).

Knobs (environment): DELIVERY_STORES=memory,file,redis  DELIVERY_COUNT=3000
DELIVERY_CONCURRENCY=16  DELIVERY_DELAY_MS=20  DELIVERY_CLIENTS=32
DELIVERY_REDIS_URL=redis://127.0.0.1:6379/12 (the run's keys are deleted afterwards, nothing
else)  BENCH_PROXY_BIN (default target/release/idempotency-proxy).
"""

import sys

sys.dont_write_bytecode = True

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.request

from procs import Interrupted, bench_scope, free_port, interrupted, log, wait_ready
from redisclient import Redis, redis_available

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BODY = b'{"type":"charge.succeeded","data":{"amount":100,"currency":"eur"}}'


# --- the upstream: `delivery.py --serve-upstream PORT DELAY_MS` -------------------------------

class Upstream:
    """Answers every request 200 after the delay; records (arrival time, key, attempt)."""

    def __init__(self, delay_s):
        self.delay_s = delay_s
        self.arrivals = []

    async def serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    await read_chunked(reader)
                else:
                    await reader.readexactly(int(headers.get("content-length", "0")))
                if target == "/_arrivals":
                    body = json.dumps(self.arrivals).encode()
                elif target == "/_count":
                    body = str(len(self.arrivals)).encode()
                else:
                    if "idempotency-key" in headers:
                        self.arrivals.append((arrived, headers["idempotency-key"],
                                              headers.get("delivery-attempt")))
                    await asyncio.sleep(self.delay_s)
                    body = b'{"ok":true}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def read_chunked(reader):
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return


def serve_upstream(port, delay_ms):
    async def main():
        upstream = Upstream(delay_ms / 1000)
        server = await asyncio.start_server(upstream.serve, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(main())


# --- the enqueuer: keyed POSTs on keep-alive connections, as fast as they are acknowledged ------

async def enqueue(port, keys, clients):
    statuses = {}
    queue = list(reversed(keys))

    async def client():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while queue:
                key = queue.pop()
                writer.write(b"POST /hooks/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Content-Type: application/json\r\nIdempotency-Key: %s\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (key.encode(), len(BODY), BODY))
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ", 2)[1])
                length = next((int(l.split(":", 1)[1]) for l in lines[1:]
                               if l.lower().startswith("content-length:")), None)
                if length is None:
                    await read_chunked(reader)
                else:
                    await reader.readexactly(length)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    return started, time.monotonic(), statuses


# --- one store --------------------------------------------------------------------------------

def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def config(tmp, name, listen, admin, upstream_port, store, route, concurrency):
    path = os.path.join(tmp, f"{name}.toml")
    with open(path, "w") as f:
        f.write(f'''listen = "127.0.0.1:{listen}"
admin_listen = "127.0.0.1:{admin}"
store = "{store}"

[[routes]]
name = "{route}"
path_prefix = "/hooks/"
upstream = "http://127.0.0.1:{upstream_port}"
mode = "inbox"
require_key = true
deliver_concurrency = {concurrency}
''')
    return path


def start_upstream(processes, tmp, name, delay_ms):
    port = free_port()
    errors = open(os.path.join(tmp, f"{name}.upstream.stderr"), "w")
    process = processes.start([sys.executable, "-B", os.path.abspath(__file__),
                               "--serve-upstream", str(port), str(delay_ms)],
                              subprocess.DEVNULL, errors)
    errors.close()
    wait_ready(port, process, "the upstream")
    return port, process


def run_store(knobs, processes, tmp, store_name, store, run_tag):
    name = f"delivery-{store_name}"
    route = f"delivery-{run_tag}-{store_name}"
    upstream_port, upstream = start_upstream(processes, tmp, name, knobs["delay_ms"])
    listen, admin = free_port(), free_port()
    conf = config(tmp, name, listen, admin, upstream_port, store, route, knobs["concurrency"])
    stderr_path = os.path.join(tmp, f"{name}.proxy.stderr")
    with open(stderr_path, "w") as stderr:
        proxy = processes.start([knobs["proxy_bin"], "--config", conf],
                                subprocess.DEVNULL, stderr)
    try:
        if not wait_ready(listen, proxy, "the proxy"):
            with open(stderr_path) as f:
                raise RuntimeError(f"the proxy did not start: {f.read().strip()[-400:]}")
        count = knobs["count"]
        keys = [f"dlv-{run_tag}-{store_name}-{i}" for i in range(count)]
        started, acked, statuses = asyncio.run(enqueue(listen, keys, knobs["clients"]))
        if statuses != {202: count}:
            raise RuntimeError(f"{store_name}: acknowledgements {statuses}, not {count} × 202")
        deadline = time.monotonic() + 60 + count / 100
        while int(get(f"http://127.0.0.1:{upstream_port}/_count")) < count:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # Settled: nothing pending or in flight, nothing dead.
        queue = {}
        while time.monotonic() < deadline:
            queue = json.loads(get(f"http://127.0.0.1:{admin}/inbox/{route}"))
            if queue.get("pending") == 0 and queue.get("in_flight") == 0:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # time for a stray second attempt to show up
        arrivals = json.loads(get(f"http://127.0.0.1:{upstream_port}/_arrivals", timeout=30))
    finally:
        processes.stop(proxy)
        processes.stop(upstream)
    times = sorted(a[0] for a in arrivals)
    seen = {}
    for _, key, _attempt in arrivals:
        seen[key] = seen.get(key, 0) + 1
    attempts = {a[2] for a in arrivals}
    missing = [k for k in keys if k not in seen]
    twice = [k for k, n in seen.items() if n > 1]
    unknown = [k for k in seen if not k.startswith(f"dlv-{run_tag}-{store_name}-")]
    span = times[-1] - times[0] if len(times) > 1 else None
    rate = (len(times) - 1) / span if span else None
    cap = knobs["concurrency"] / (knobs["delay_ms"] / 1000)
    return {
        "store": store_name,
        "count": count,
        "acks_per_s": count / (acked - started),
        "enqueue_s": acked - started,
        "first_arrival_after_first_post_s": times[0] - started if times else None,
        "last_arrival_after_last_ack_s": times[-1] - acked if times else None,
        "arrivals": len(arrivals),
        "span_s": span,
        "deliveries_per_s": rate,
        "cap_per_s": cap,
        "ratio_to_cap": rate / cap if rate else None,
        "missing": len(missing),
        "delivered_twice": len(twice),
        "unknown": len(unknown),
        "attempt_headers": sorted(a for a in attempts if a is not None),
        "queue_after": queue,
        "exactly_once": not missing and not twice and not unknown and len(arrivals) == count,
    }


def check_upstream(processes, tmp, delay_ms, concurrency):
    """The upstream alone under wrk: its req/s at `concurrency` and 64 connections."""
    port, process = start_upstream(processes, tmp, "alone", delay_ms)
    out = {}
    try:
        for connections in sorted({concurrency, 64}):
            argv = ["wrk", "-t2", f"-c{connections}", "-d4s",
                    f"http://127.0.0.1:{port}/check"]
            result = subprocess.run(argv, capture_output=True, text=True, check=True)
            line = next(l for l in result.stdout.splitlines() if l.startswith("Requests/sec"))
            out[connections] = float(line.split()[1])
    finally:
        processes.stop(process)
    return out


def forget_redis_keys(url, run_tag):
    with Redis(url) as client:
        deleted = client.delete_matching(f"idempotency-proxy:*delivery-{run_tag}-*")
        deleted += client.delete_matching(f"idempotency-proxy:*dlv-{run_tag}-*")
        left = client.call("SCAN", "0", "MATCH", f"idempotency-proxy:*{run_tag}*", "COUNT", "100000")
    return deleted, left[1]


def fmt(value, spec):
    return "—" if value is None else f"{value:{spec}}"


def main():
    env = os.environ.get
    knobs = {
        "stores": [s for s in env("DELIVERY_STORES", "memory,file,redis").split(",") if s],
        "count": int(env("DELIVERY_COUNT", "3000")),
        "concurrency": int(env("DELIVERY_CONCURRENCY", "16")),
        "delay_ms": float(env("DELIVERY_DELAY_MS", "20")),
        "clients": int(env("DELIVERY_CLIENTS", "32")),
        "redis_url": env("DELIVERY_REDIS_URL", "redis://127.0.0.1:6379/12"),
        "proxy_bin": env("BENCH_PROXY_BIN",
                         os.path.join(ROOT, "target", "release", "idempotency-proxy")),
    }
    if not os.access(knobs["proxy_bin"], os.X_OK):
        raise SystemExit(f"no proxy binary at {knobs['proxy_bin']}: run cargo build --release")
    run_tag = f"{os.getpid()}-{int(time.time())}"
    results, cleanup = [], None
    try:
        with bench_scope("idempotency-proxy-delivery-") as (processes, tmp):
            alone = check_upstream(processes, tmp, knobs["delay_ms"], knobs["concurrency"])
            log(f"upstream alone ({knobs['delay_ms']:g} ms per answer): "
                + ", ".join(f"{c} connections {rps:,.0f} req/s (cap {c / knobs['delay_ms'] * 1000:,.0f})"
                            for c, rps in alone.items()))
            for store_name in knobs["stores"]:
                if store_name == "memory":
                    store = "memory"
                elif store_name == "file":
                    store = f"file:{tmp}/delivery.db"
                elif store_name == "redis":
                    if not redis_available(knobs["redis_url"]):
                        log(f"redis: skipped, no Redis at {knobs['redis_url']}")
                        continue
                    store = knobs["redis_url"]
                else:
                    raise SystemExit(f"no such store: {store_name} (memory, file, redis)")
                try:
                    result = run_store(knobs, processes, tmp, store_name, store, run_tag)
                finally:
                    if store_name == "redis":
                        cleanup = forget_redis_keys(knobs["redis_url"], run_tag)
                results.append(result)
                log(f"{store_name}: {result['count']} acknowledged at {result['acks_per_s']:,.0f}/s; "
                    f"{result['arrivals']} arrivals in {fmt(result['span_s'], '.2f')} s = "
                    f"{fmt(result['deliveries_per_s'], ',.0f')}/s, "
                    f"{fmt(result['ratio_to_cap'], '.2f')} × the cap; exactly once: "
                    f"{result['exactly_once']}; queue after: {result['queue_after']}")
    except Interrupted as e:
        return interrupted(e)

    cap = knobs["concurrency"] / knobs["delay_ms"] * 1000
    print(f"\n{knobs['count']:,} deliveries per store, deliver_concurrency = "
          f"{knobs['concurrency']}, upstream answering 200 after {knobs['delay_ms']:g} ms "
          f"(cap {cap:,.0f}/s), {knobs['clients']} enqueuing connections, {os.cpu_count()} CPUs\n")
    print("Upstream alone under wrk: " + ", ".join(
        f"{c} connections {rps:,.0f} req/s" for c, rps in alone.items()) + "\n")
    alone_same = alone.get(knobs["concurrency"])
    for r in results:
        r["ratio_to_upstream_alone"] = (r["deliveries_per_s"] / alone_same
                                        if alone_same and r["deliveries_per_s"] else None)
    print(f"| store | acks/s while enqueuing | deliveries/s, first to last arrival | × cap "
          f"| × upstream alone at {knobs['concurrency']} connections | arrivals | exactly once |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        verdict = "yes" if r["exactly_once"] else (
            f"no: {r['missing']} missing, {r['delivered_twice']} twice, {r['unknown']} unknown")
        print(f"| {r['store']} | {r['acks_per_s']:,.0f} | {fmt(r['deliveries_per_s'], ',.0f')} "
              f"| {fmt(r['ratio_to_cap'], '.2f')} | {fmt(r['ratio_to_upstream_alone'], '.2f')} "
              f"| {r['arrivals']:,} | {verdict} |")
    if cleanup is not None:
        print(f"\nRedis: {cleanup[0]} keys of this run deleted, {len(cleanup[1])} left")
    print("\n" + json.dumps({"knobs": knobs, "upstream_alone": alone, "results": results}))
    return 0 if results and all(r["exactly_once"] for r in results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-upstream":
        serve_upstream(int(sys.argv[2]), float(sys.argv[3]))
    else:
        sys.exit(main())
