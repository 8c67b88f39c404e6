#!/usr/bin/env python3
"""What one request costs the proxy, counted rather than timed: instructions (valgrind's
callgrind, user space only), system calls and context switches (perf), per request.

Counts do not depend on what else the machine is doing, so two builds can be compared on a busy
machine where req/s and CPU time are noise. They leave out the kernel's time in those system
calls, and cache misses: `run.sh` stays the measure of speed; this says where a change went.
Valgrind does not offer the CPU's SHA extensions, so the keyed cases count a software SHA-256
(about 17,000 instructions per request) where the real CPU runs its SHA instructions; and a
write to memory another core wrote last (a shared count, a lock) counts as one instruction,
however long it takes.

    benches/load/cost.py [--requests N] [--connections C] CASE LABEL=BINARY [LABEL=BINARY ...]

CASE is plain, keyed-memory, keyed-redis, keyed-file or replay-memory. Each binary runs the case
once under callgrind and once under `perf stat`; one table row per binary.
"""

import argparse
import http.client
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from procs import Interrupted, bench_scope, free_port, interrupted, wait_ready  # noqa: E402
from servers import Fixtures  # noqa: E402

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
BODY = b'{"amount":100,"currency":"eur","customer":"cus_1"}'
CASES = {
    "plain": ("memory", None),
    "keyed-memory": ("memory", "fresh"),
    "keyed-redis": (REDIS_URL, "fresh"),
    "keyed-file": ("file", "fresh"),
    "replay-memory": ("memory", "replay"),
}


def send_all(port, requests, connections, keys, run_id):
    """Sends `requests` POSTs over `connections` keep-alive connections; returns how many got
    an answer."""
    answered = [0] * connections

    def worker(n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for i in range(n, requests, connections):
            headers = {"content-type": "application/json"}
            if keys == "fresh":
                headers["idempotency-key"] = f"{run_id}-{i}"
            elif keys == "replay":
                headers["idempotency-key"] = f"{run_id}-replay-{i % 16}"
            try:
                conn.request("POST", "/v1/charges", BODY, headers)
                conn.getresponse().read()
            except (ConnectionError, http.client.HTTPException):
                # The connection was closed under us: count nothing, go on with a new one.
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                continue
            answered[n] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(answered)


def start_proxy(processes, binary, store, upstream_port, tmp, wrapper):
    port = free_port()
    if store == "file":
        store = f"file:{tmp}/cost-{port}.db"
    argv = wrapper + [binary, "--listen", f"127.0.0.1:{port}", "--store", store,
                      "--upstream", f"http://127.0.0.1:{upstream_port}"]
    log = open(os.path.join(tmp, f"proxy-{port}.log"), "w")
    process = processes.start(argv, subprocess.DEVNULL, log)
    if not wait_ready(port, process, "proxy", timeout=120.0):
        raise RuntimeError(f"the proxy did not start: see {log.name}")
    return process, port


def prime(port, keys, run_id):
    if keys == "replay":
        send_all(port, 16, 1, "replay", run_id)


def instructions(fixtures, binary, case, requests, connections):
    store, keys = CASES[case]
    out = os.path.join(fixtures.tmp, f"callgrind-{time.monotonic_ns()}.out")
    wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"]
    process, port = start_proxy(fixtures.processes, binary, store,
                                fixtures.upstream.port, fixtures.tmp, wrapper)
    run_id = f"ir{time.monotonic_ns()}"
    prime(port, keys, run_id)
    send_all(port, 200, connections, keys, run_id + "w")  # warm-up, counted out below
    base = dump(out, process)
    answered = send_all(port, requests, connections, keys, run_id)
    total = dump(out, process, final=True)
    fixtures.processes.stop(process)
    return (total - base) / answered


def dump(out, process, final=False):
    """Asks callgrind for its counts so far and returns the instructions counted."""
    before = set(_outputs(out))
    subprocess.run(["callgrind_control", "--dump", str(process.pid)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    for _ in range(600):
        fresh = [p for p in _outputs(out) if p not in before]
        if fresh:
            time.sleep(0.2)
            return sum(_total(p) for p in _outputs(out))
        time.sleep(0.1)
    raise RuntimeError("callgrind did not dump its counts")


def _outputs(out):
    directory, name = os.path.split(out)
    return [os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(name)]


def _total(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return 0


def syscalls(fixtures, binary, case, requests, connections):
    store, keys = CASES[case]
    process, port = start_proxy(fixtures.processes, binary, store,
                                fixtures.upstream.port, fixtures.tmp, [])
    run_id = f"sys{time.monotonic_ns()}"
    prime(port, keys, run_id)
    send_all(port, 200, connections, keys, run_id + "w")
    stat = subprocess.Popen(["perf", "stat", "-x,", "-e",
                             "raw_syscalls:sys_enter,context-switches",
                             "-p", str(process.pid)],
                            stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    answered = send_all(port, requests, connections, keys, run_id)
    stat.send_signal(2)
    counts = {}
    for line in stat.communicate()[1].splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].isdigit():
            counts[parts[2]] = int(parts[0])
    fixtures.processes.stop(process)
    return (counts.get("raw_syscalls:sys_enter", 0) / answered,
            counts.get("context-switches", 0) / answered)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("binaries", nargs="+", metavar="LABEL=BINARY")
    args = parser.parse_args()
    try:
        with bench_scope("idempotency-proxy-cost-") as (processes, tmp):
            fixtures = Fixtures(tmp=tmp, processes=processes, proxy_bins={})
            fixtures.start_upstream()
            print(f"| {args.case} | instructions/req | syscalls/req | context switches/req |")
            print("|---|---:|---:|---:|")
            for spec in args.binaries:
                label, binary = spec.split("=", 1)
                ir = instructions(fixtures, binary, args.case, args.requests, args.connections)
                calls, switches = syscalls(fixtures, binary, args.case, args.requests,
                                           args.connections)
                print(f"| {label} | {ir:,.0f} | {calls:.1f} | {switches:.2f} |", flush=True)
    except Interrupted as e:
        return interrupted(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
