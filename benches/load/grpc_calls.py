#!/usr/bin/env python3
"""Keyed unary gRPC calls per second and their latency, through the proxy and straight to the
upstream, in the same run (docs/performance.md, "gRPC routes").

Usage: python3 benches/load/grpc_calls.py [--proxy-bin target/release/idempotency-proxy]
                                    [--duration 10] [--concurrency 32] [--store memory]

It compiles tests/grpc/payments.proto into a temporary directory, starts the tests' grpcio
Payments server (tests/grpc/server.py) and the proxy in front of it (one gRPC route), then
runs, one after the other, with a grpc.aio client of `--concurrency` calls in flight on one
channel (one HTTP/2 connection):
  direct   CreatePayment straight to the upstream
  keyed    through the proxy, every call with a fresh idempotency-key (each one runs)
  replay   through the proxy, every call a retry of a key already stored (none runs)
and prints calls/s, p50 and p99 for each. Needs grpcio and grpcio-tools.
"""
import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "grpc")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


async def run_case(stub, pb, duration, concurrency, keys):
    """Calls for `duration` seconds with `concurrency` in flight; `keys(worker, i)` names each."""
    latencies = []
    stop = time.monotonic() + duration
    request = pb.CreatePaymentRequest(account="acct_1", amount=100)

    async def worker(w):
        i = 0
        while time.monotonic() < stop:
            key = keys(w, i)
            metadata = (("idempotency-key", key),) if key else None
            started = time.perf_counter()
            await stub.CreatePayment(request, metadata=metadata)
            latencies.append(time.perf_counter() - started)
            i += 1

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.monotonic() - started
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    return len(latencies) / elapsed, pick(0.50), pick(0.99)


async def measure(target, generated, duration, concurrency, case):
    sys.path.insert(0, generated)
    import grpc
    import payments_pb2
    import payments_pb2_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = payments_pb2_grpc.PaymentsStub(channel)
        run = uuid.uuid4().hex[:8]
        if case == "replay":
            stored = [f"{run}-r{w}" for w in range(concurrency)]
            for key in stored:
                await stub.CreatePayment(
                    payments_pb2.CreatePaymentRequest(account="acct_1", amount=100),
                    metadata=(("idempotency-key", key),),
                )
            keys = lambda w, i: stored[w]
        else:
            keys = lambda w, i: f"{run}-{case}-{w}-{i}"
        # A short warm-up, not counted.
        await run_case(stub, payments_pb2, 1.0, concurrency, lambda w, i: f"{run}-warm-{w}-{i}")
        return await run_case(stub, payments_pb2, duration, concurrency, keys)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--proxy-bin", default=os.path.join(ROOT, "target/release/idempotency-proxy"))
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--store", default="memory")
    args = parser.parse_args()
    processes = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            subprocess.run(
                [sys.executable, "-m", "grpc_tools.protoc", f"-I{FIXTURES}",
                 f"--python_out={tmp}", f"--grpc_python_out={tmp}",
                 os.path.join(FIXTURES, "payments.proto")],
                check=True,
            )
            upstream = subprocess.Popen(
                [sys.executable, os.path.join(FIXTURES, "server.py"), tmp, os.devnull],
                stdout=subprocess.PIPE, text=True,
            )
            processes.append(upstream)
            upstream_port = int(upstream.stdout.readline())
            proxy_port, admin_port = free_port(), free_port()
            store = args.store if args.store != "file" else f"file:{tmp}/records.db"
            config = os.path.join(tmp, "proxy.toml")
            with open(config, "w") as f:
                f.write(
                    f'listen = "127.0.0.1:{proxy_port}"\nadmin_listen = "127.0.0.1:{admin_port}"\n'
                    f'store = "{store}"\n[[routes]]\nname = "payments"\n'
                    f'path_prefix = "/payments.Payments/"\n'
                    f'upstream = "http://127.0.0.1:{upstream_port}"\nprotocol = "grpc"\n'
                )
            proxy = subprocess.Popen(
                [args.proxy_bin, "--config", config],
                env={**os.environ, "RUST_LOG": "warn"},
            )
            processes.append(proxy)
            wait_for_port(proxy_port)
            print(f"{'case':<8} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8}   "
                  f"(concurrency {args.concurrency}, {args.duration:.0f} s, store {args.store})")
            for case, port in (("direct", upstream_port), ("keyed", proxy_port),
                               ("replay", proxy_port)):
                rate, p50, p99 = asyncio.run(
                    measure(f"127.0.0.1:{port}", tmp, args.duration, args.concurrency, case)
                )
                print(f"{case:<8} {rate:>9.0f} {p50:>8.2f} {p99:>8.2f}", flush=True)
        finally:
            for p in processes:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
