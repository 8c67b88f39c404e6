#!/usr/bin/env python3
"""Load benchmark: the proxy next to the upstream reached directly and next to nginx.

Started by run.sh, which installs nginx and wrk and builds the proxy first. Every case is
measured with wrk (BENCH_CONNECTIONS connections, BENCH_THREADS threads) for BENCH_DURATION
seconds after a BENCH_WARMUP warm-up, in BENCH_ROUNDS interleaved rounds; the table gives the
median of the rounds, and each ratio is taken against nginx pass-through of the same round.

Only loopback addresses are used. Every process started here is stopped at the end, on
failure, Ctrl-C and SIGTERM too. Records written to Redis carry this run's key prefix and are
deleted afterwards; nothing else in Redis is touched.
"""

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

DURATION = int(os.environ.get("BENCH_DURATION", "10"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "2"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "64"))
THREADS = int(os.environ.get("BENCH_THREADS", "2"))
REPLAY_KEYS = int(os.environ.get("BENCH_REPLAY_KEYS", "16"))
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
PROXY_BIN = os.environ.get(
    "BENCH_PROXY_BIN", os.path.join(ROOT, "target", "release", "idempotency-proxy")
)
# Only these cases, if set (comma-separated case names, e.g. "nginx,ours-keyed-memory").
ONLY = [c for c in os.environ.get("BENCH_CASES", "").split(",") if c]

PATH = "/v1/charges"
BODY = b'{"amount":100,"currency":"eur","customer":"cus_1"}'
RUN_ID = f"{os.getpid()}-{int(time.time())}"


class Interrupted(Exception):
    pass


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


class Processes:
    """Every process this run started, stopped by PID, newest first."""

    def __init__(self):
        self.running = []

    def start(self, argv, stdout, stderr, env=None):
        process = subprocess.Popen(
            argv,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,  # a Ctrl-C reaches this driver, which stops them in order
        )
        self.running.append(process)
        return process

    def stop(self, process, sig=signal.SIGTERM, grace=5.0):
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process in self.running:
            self.running.remove(process)

    def stop_all(self):
        for process in reversed(list(self.running)):
            self.stop(process)


def wait_ready(port, process, what, timeout=15.0):
    """Waits until something answers HTTP on the port; fails if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready-check", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer means it is serving
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer on port {port} within {timeout}s")


def post(port, key=None):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{PATH}", data=BODY, headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.headers, response.read()


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


# --- a little Redis client: PING, and deleting this run's keys -------------------------------


def redis_address(url):
    rest = url.split("://", 1)[1]
    hostport, _, db = rest.partition("/")
    host, _, port = hostport.rpartition(":")
    return host or "127.0.0.1", int(port or 6379), int(db or 0)


class Redis:
    def __init__(self, url):
        host, port, db = redis_address(url)
        self.sock = socket.create_connection((host, port), timeout=5)
        self.reader = self.sock.makefile("rb")
        self.call("SELECT", str(db))

    def call(self, *args):
        out = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode() if isinstance(arg, str) else arg
            out.append(f"${len(data)}\r\n".encode() + data + b"\r\n")
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.reader.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(f"redis: {rest.decode()}")
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.reader.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError(f"redis: unexpected reply {line!r}")

    def delete_matching(self, pattern):
        cursor, deleted = "0", 0
        while True:
            cursor, keys = self.call("SCAN", cursor, "MATCH", pattern, "COUNT", "2000")
            if keys:
                deleted += int(self.call("UNLINK", *keys))
            if cursor == "0":
                return deleted

    def close(self):
        self.sock.close()


def redis_available():
    try:
        client = Redis(REDIS_URL)
        ok = client.call("PING") == "PONG"
        client.close()
        return ok
    except OSError:
        return False


# --- the cases ---------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    label: str
    target: str  # "upstream", "nginx" or "proxy"
    mode: str  # "plain", "keyed" or "replay" (bench.lua's BENCH_MODE)
    store: str = "memory"
    skipped: str = ""  # why the case has no figures
    results: list = field(default_factory=list)  # one dict per round


def all_cases(tmp):
    file_store = f"file:{tmp}/bench.db"
    return [
        Case("upstream", "upstream direct", "upstream", "plain"),
        Case("nginx", "nginx pass-through", "nginx", "plain"),
        Case("ours-plain", "ours pass-through (no key)", "proxy", "plain", "memory"),
        Case("ours-keyed-memory", "ours keyed first, memory", "proxy", "keyed", "memory"),
        Case("ours-keyed-redis", "ours keyed first, Redis", "proxy", "keyed", REDIS_URL),
        Case("ours-keyed-file", "ours keyed first, file", "proxy", "keyed", file_store),
        Case("ours-replay-memory", "ours replay, memory", "proxy", "replay", "memory"),
        Case("ours-replay-redis", "ours replay, Redis", "proxy", "replay", REDIS_URL),
        Case("ours-replay-file", "ours replay, file", "proxy", "replay", file_store),
    ]


class Bench:
    def __init__(self, tmp, processes):
        self.tmp = tmp
        self.processes = processes
        self.upstream_port = None
        self.nginx_port = None
        self.nginx = None

    def render(self, template, name, **values):
        with open(os.path.join(HERE, template)) as f:
            text = f.read()
        values["PREFIX"] = self.tmp
        for key, value in values.items():
            text = text.replace(f"@{key}@", str(value))
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start_nginx(self, template, name, **values):
        conf = self.render(template, f"{name}.conf", **values)
        errors = open(os.path.join(self.tmp, f"{name}.stderr"), "w")
        argv = ["nginx", "-p", self.tmp, "-c", conf, "-e", f"{self.tmp}/{name}.error.log",
                "-g", "daemon off;"]
        process = self.processes.start(argv, subprocess.DEVNULL, errors)
        if not wait_ready(values["PORT"], process, name):
            raise RuntimeError(f"{name} exited: see {self.tmp}/{name}.stderr")
        return process

    def start_fixtures(self):
        self.upstream_port = free_port()
        self.start_nginx("upstream.nginx.conf", "upstream", PORT=self.upstream_port)
        status, _, body = post(self.upstream_port)
        log(f"upstream (nginx, 1 worker) on 127.0.0.1:{self.upstream_port}: {status} {body!r}")
        self.nginx_port = free_port()
        self.nginx = self.start_nginx(
            "passthrough.nginx.conf", "nginx", PORT=self.nginx_port,
            UPSTREAM_PORT=self.upstream_port,
        )
        log(f"nginx pass-through (2 workers) on 127.0.0.1:{self.nginx_port}")

    def start_proxy(self, store):
        port = free_port()
        stderr_path = os.path.join(self.tmp, "proxy.stderr")
        stderr = open(stderr_path, "w")
        argv = [PROXY_BIN, "--listen", f"127.0.0.1:{port}",
                "--upstream", f"http://127.0.0.1:{self.upstream_port}", "--store", store]
        process = self.processes.start(argv, subprocess.DEVNULL, stderr)
        stderr.close()
        if not wait_ready(port, process, "the proxy"):
            with open(stderr_path) as f:
                lines = [line.strip() for line in f if line.strip()]
            return None, port, (lines[-1] if lines else f"exit status {process.returncode}")
        return process, port, ""

    def wrk(self, port, mode, seconds, key_prefix):
        env = dict(os.environ, BENCH_MODE=mode, BENCH_KEY_PREFIX=key_prefix,
                   BENCH_REPLAY_KEYS=str(REPLAY_KEYS))
        argv = ["wrk", "-t", str(THREADS), "-c", str(CONNECTIONS), "-d", f"{seconds}s",
                "--timeout", "5s", "-s", os.path.join(HERE, "bench.lua"),
                f"http://127.0.0.1:{port}{PATH}"]
        process = self.processes.start(argv, subprocess.PIPE, subprocess.PIPE, env=env)
        out, err = process.communicate(timeout=seconds + 60)
        self.processes.running.remove(process)
        if process.returncode != 0:
            raise RuntimeError(f"wrk failed: {err.decode().strip()}")
        for line in out.decode().splitlines():
            if line.startswith("BENCH "):
                fields = dict(item.split("=") for item in line.split()[1:])
                return {k: int(v) for k, v in fields.items()}
        raise RuntimeError(f"no BENCH line in wrk's output:\n{out.decode()}")

    def measure(self, case, round_no):
        """One run of one case: start what it needs, warm up, measure, stop."""
        key_prefix = f"bench-{RUN_ID}-{case.name}-{round_no}"
        proxy = None
        if case.target == "upstream":
            port = self.upstream_port
        elif case.target == "nginx":
            port = self.nginx_port
        else:
            proxy, port, why = self.start_proxy(case.store)
            if proxy is None:
                case.skipped = f"the proxy did not start with --store {case.store}: {why}"
                return None
        try:
            if case.mode == "replay":
                for i in range(REPLAY_KEYS):
                    status, _, _ = post(port, f"{key_prefix}-r{i}")
                    _, headers, _ = post(port, f"{key_prefix}-r{i}")
                    if headers.get("Idempotent-Replayed") != "true":
                        raise RuntimeError(f"{case.name}: priming did not produce a replay")
            self.wrk(port, case.mode, WARMUP, f"{key_prefix}-w")
            result = self.wrk(port, case.mode, DURATION, key_prefix)
            if proxy is not None:
                result["vm_hwm_kib"] = vm_hwm_kib(proxy.pid)
            return result
        finally:
            if proxy is not None:
                self.processes.stop(proxy)
            if case.store.startswith("file:"):
                subprocess.run(["rm", "-f", case.store[len("file:"):]], check=False)
            if case.store.startswith("redis"):
                self.forget_redis_keys(key_prefix)

    def forget_redis_keys(self, key_prefix):
        try:
            client = Redis(REDIS_URL)
            client.delete_matching(f"idempotency-proxy:*:{key_prefix}-*")
            client.close()
        except OSError as e:
            log(f"could not delete this run's Redis keys ({key_prefix}-*): {e}")


# --- the report --------------------------------------------------------------------------------


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec, suffix=""):
    return "—" if value is None else f"{value:{spec}}{suffix}"


def report(cases):
    by_name = {case.name: case for case in cases}
    nginx = by_name["nginx"].results

    def per_round(case, metric):
        return [r[metric] if r else None for r in case.results]

    def ratio_median(case, metric):
        ratios = []
        for mine, ref in zip(case.results, nginx):
            if mine and ref and ref[metric]:
                ratios.append(mine[metric] / ref[metric])
        return median(ratios)

    for case in cases:
        for r in case.results:
            if r:
                r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
                r["errors"] = sum(v for k, v in r.items() if k.startswith("err_"))

    lines = [
        f"| case | req/s | × nginx | p50 ms | × nginx | p99 ms | × nginx | errors | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for case in cases:
        if not any(case.results):
            if case.skipped:
                lines.append(f"| {case.label} | skipped | | | | | | | |")
                notes.append((case.label, case.skipped))
            continue
        rps = median(per_round(case, "rps"))
        p50 = median(per_round(case, "p50_us"))
        p99 = median(per_round(case, "p99_us"))
        errors = sum(e for e in per_round(case, "errors") if e)
        hwm = median(per_round(case, "vm_hwm_kib")) if case.target == "proxy" else None
        lines.append(
            f"| {case.label} | {fmt(rps, ',.0f')} | {fmt(ratio_median(case, 'rps'), '.2f')} "
            f"| {fmt(p50 and p50 / 1000, '.2f')} | {fmt(ratio_median(case, 'p50_us'), '.2f')} "
            f"| {fmt(p99 and p99 / 1000, '.2f')} | {fmt(ratio_median(case, 'p99_us'), '.2f')} "
            f"| {errors} | {fmt(hwm and hwm / 1024, '.1f')} |"
        )
    rounds = []
    for case in cases:
        figures = [f"{r['rps']:.0f}" if r else "—" for r in case.results]
        if any(case.results):
            rounds.append(f"  {case.name}: req/s by round {', '.join(figures)}")
    return "\n".join(lines), notes, rounds


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    processes = Processes()
    tmp = tempfile.mkdtemp(prefix="idempotency-proxy-bench-")
    cases = all_cases(tmp)
    if ONLY:
        cases = [c for c in cases if c.name in ONLY or c.name == "nginx"]
    started = time.monotonic()
    try:
        if not os.access(PROXY_BIN, os.X_OK):
            raise RuntimeError(f"no proxy binary at {PROXY_BIN}: run cargo build --release")
        have_redis = redis_available()
        bench = Bench(tmp, processes)
        bench.start_fixtures()
        log(f"{ROUNDS} rounds of {len(cases)} cases, {DURATION}s each after {WARMUP}s warm-up, "
            f"wrk -t{THREADS} -c{CONNECTIONS}; files in {tmp}")
        for round_no in range(1, ROUNDS + 1):
            for case in cases:
                if case.skipped or (case.store.startswith("redis") and not have_redis):
                    case.skipped = case.skipped or f"no Redis at {REDIS_URL}"
                    case.results.append(None)
                    continue
                result = bench.measure(case, round_no)
                case.results.append(result)
                if result:
                    rps = result["requests"] / (result["duration_us"] / 1e6)
                    log(f"round {round_no} {case.name}: {rps:,.0f} req/s, "
                        f"p50 {result['p50_us'] / 1000:.2f} ms, p99 {result['p99_us'] / 1000:.2f} ms")
                else:
                    log(f"round {round_no} {case.name}: skipped ({case.skipped})")
                # nginx's access log is there to be written, not kept.
                open(os.path.join(tmp, "nginx.access.log"), "w").close()
        table, notes, rounds = report(cases)
        print()
        print(f"wrk -t{THREADS} -c{CONNECTIONS}, {DURATION}s per run after {WARMUP}s warm-up, "
              f"median of {ROUNDS} interleaved rounds; ratios are to nginx pass-through of the "
              f"same round (median of the per-round ratios). {os.cpu_count()} CPUs, "
              f"{time.monotonic() - started:.0f}s in all.")
        print()
        print(table)
        reasons = {}
        for label, why in notes:
            reasons.setdefault(why, []).append(label)
        for why, labels in reasons.items():
            print(f"\nSkipped ({', '.join(labels)}): {why}")
        print("\nPer round:\n" + "\n".join(rounds))
        return 0
    except Interrupted as e:
        log(f"interrupted ({e}); stopping everything")
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        processes.stop_all()
        subprocess.run(["rm", "-rf", tmp], check=False)


if __name__ == "__main__":
    sys.exit(main())
