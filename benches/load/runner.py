"""One measured run of one case: start its server, prime, warm up, measure with wrk, stop.

The measured window is wrk's run after the warm-up. At its start and end the CPU time of the
server under test is read (for nginx, master and workers), and of what it leans on: the
upstream, the Redis the run uses (found by `INFO server`'s `process_id`; or the run's own Valkey
or cluster masters, stores.py) and wrk itself. Each is divided by the requests wrk completed in
the window, giving CPU microseconds per request.
"""

import os
import resource
import subprocess
import urllib.request
from dataclasses import dataclass

from procs import cpu_seconds, log, vm_hwm_kib
from redisclient import Redis
from servers import NotStarted

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BODY = b'{"amount":100,"currency":"eur","customer":"cus_1"}'


@dataclass(frozen=True)
class Settings:
    duration_s: int
    warmup_s: int
    rounds: int
    connections: int
    threads: int
    replay_keys: int
    redis_url: str
    proxy_bin: str
    proxy_bin_b: str  # empty: compare no second build
    bare_bin: str  # the floor, benches/load/bare_proxy.rs
    only: tuple  # case names, empty for all

    @classmethod
    def from_env(cls):
        env = os.environ.get
        return cls(
            duration_s=int(env("BENCH_DURATION", "10")),
            warmup_s=int(env("BENCH_WARMUP", "2")),
            rounds=int(env("BENCH_ROUNDS", "5")),
            connections=int(env("BENCH_CONNECTIONS", "64")),
            threads=int(env("BENCH_THREADS", "2")),
            replay_keys=int(env("BENCH_REPLAY_KEYS", "16")),
            redis_url=env("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11"),
            proxy_bin=env("BENCH_PROXY_BIN",
                          os.path.join(ROOT, "target", "release", "idempotency-proxy")),
            proxy_bin_b=env("BENCH_PROXY_BIN_B", ""),
            bare_bin=env("BENCH_BARE_BIN",
                         os.path.join(ROOT, "target", "release", "examples", "bare-proxy")),
            only=tuple(c for c in env("BENCH_CASES", "").split(",") if c),
        )


def post(port, path, key=None):
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=BODY, headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.headers, response.read()


class Runner:
    def __init__(self, settings, fixtures, redis_pid, run_id):
        self.settings = settings
        self.fixtures = fixtures
        self.redis_pid = redis_pid
        self.run_id = run_id

    def measure(self, case, round_no, during=None):
        """Figures of one run, or None if the server did not start (case.skipped says why).

        `during(server, seconds)`, if given, is called once the measured window has begun.
        """
        key_prefix = f"bench-{self.run_id}-{case.slug}-{round_no}"
        try:
            server = case.server.start(self.fixtures, case.slug)
        except NotStarted as e:
            case.skipped = str(e)
            return None
        try:
            if case.load.primes_replays:
                self.prime_replays(case, server.port, key_prefix)
            self.wrk(case, server, self.settings.warmup_s, f"{key_prefix}-w")
            return self.measured_window(case, server, key_prefix, during)
        finally:
            server.stop()
            if server.store is not None:
                server.store.flush()
            elif case.uses_redis:
                self.forget_redis_keys(key_prefix, case)

    def measured_window(self, case, server, key_prefix, during):
        watched = {"server": server.pids}
        if server is not self.fixtures.upstream:
            watched["upstream"] = self.fixtures.upstream.pids
        if server.store is not None:
            watched["redis"] = server.store.pids
        elif case.uses_redis and self.redis_pid is not None:
            watched["redis"] = [self.redis_pid]
        delivered_before = delivered(server)
        before = {name: cpu_seconds(pids) for name, pids in watched.items()}
        result, wrk_cpu_s = self.wrk(case, server, self.settings.duration_s, key_prefix, during)
        after = {name: cpu_seconds(pids) for name, pids in watched.items()}
        delivered_after = delivered(server)
        used = {name: _minus(after[name], before[name]) for name in watched}
        used["wrk"] = wrk_cpu_s
        requests = result["requests"]
        result["cpu_us_per_req"] = {
            name: (seconds * 1e6 / requests if seconds is not None and requests else None)
            for name, seconds in used.items()
        }
        result["rps"] = requests / (result["duration_us"] / 1e6)
        result["errors"] = sum(v for k, v in result.items() if k.startswith("err_"))
        if delivered_before is not None and delivered_after is not None:
            # An inbox route's deliveries to the upstream made in the same window.
            result["delivered_per_s"] = ((delivered_after - delivered_before)
                                         / (result["duration_us"] / 1e6))
        if server.rss_pid is not None:
            result["vm_hwm_kib"] = vm_hwm_kib(server.rss_pid)
        return result

    def prime_replays(self, case, port, key_prefix):
        for i in range(self.settings.replay_keys):
            post(port, case.load.path, f"{key_prefix}-r{i}")
            _, headers, _ = post(port, case.load.path, f"{key_prefix}-r{i}")
            if headers.get("Idempotent-Replayed") != "true":
                raise RuntimeError(f"{case.name}: priming did not produce a replay")

    def wrk(self, case, server, seconds, key_prefix, during=None):
        """wrk's figures for one run, and the CPU seconds wrk itself used."""
        s = self.settings
        env = dict(os.environ, BENCH_MODE=case.load.mode, BENCH_KEY_PREFIX=key_prefix,
                   BENCH_REPLAY_KEYS=str(s.replay_keys))
        argv = ["wrk", "-t", str(s.threads), "-c", str(s.connections), "-d", f"{seconds}s",
                "--timeout", "5s", "-s", os.path.join(HERE, case.load.script)]
        for header in case.load.headers:
            argv += ["-H", header]
        argv.append(f"{server.scheme}://127.0.0.1:{server.port}{case.load.path}")
        # wrk is the only child reaped while it runs, so the children's rusage grows by its own.
        children_before = _children_cpu_s()
        process = self.fixtures.processes.start(argv, subprocess.PIPE, subprocess.PIPE, env=env)
        if during is not None:
            during(server, seconds)
        out, err = process.communicate(timeout=seconds + 60)
        wrk_cpu_s = _children_cpu_s() - children_before
        self.fixtures.processes.forget(process)
        if process.returncode != 0:
            raise RuntimeError(f"wrk failed: {err.decode().strip()}")
        for line in out.decode().splitlines():
            if line.startswith("BENCH "):
                fields = dict(item.split("=") for item in line.split()[1:])
                return {k: int(v) for k, v in fields.items()}, wrk_cpu_s
        raise RuntimeError(f"no BENCH line in wrk's output:\n{out.decode()}")

    def forget_redis_keys(self, key_prefix, case):
        try:
            with Redis(self.settings.redis_url) as client:
                client.delete_matching(f"idempotency-proxy:*{key_prefix}-*")
                # An inbox route's queue (inbox.proxy.toml names the route after the run and
                # the case): what is still queued when the proxy stops.
                route = f"bench-{self.run_id}-{case.slug}"
                client.delete_matching(f"idempotency-proxy:inbox:{{{route}:*")
        except (OSError, RuntimeError) as e:
            log(f"could not delete this run's Redis keys ({key_prefix}-*): {e}")


def delivered(server):
    """Deliveries an inbox route has made so far (idempotency_inbox_attempts_total with
    result="delivered", from the admin listener's /metrics), or None without one."""
    if server.admin_port is None:
        return None
    url = f"http://127.0.0.1:{server.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("idempotency_inbox_attempts_total{")
               and 'result="delivered"' in line)


def _children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _minus(after, before):
    return None if after is None or before is None else after - before

