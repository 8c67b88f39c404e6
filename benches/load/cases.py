"""The cases the benchmark measures, as data: what serves, what load it gets, what it must meet.

Adding a case is one `Case(...)` line in `all_cases`: a name (what `BENCH_CASES` selects), a
label for the table, the server (`Upstream()`, `Nginx(template)`, `Bare()` or `Proxy(store,
args, config)`), the load (`Load(mode, script, path, headers)`), its goals, and the case its
ratios are taken against (nginx pass-through unless it says otherwise: a case behind TLS would
name an nginx case terminating TLS with a config template of its own). A case may also name a
case it is compared with (`versus`): the median of its per-round req/s and CPU ratios to that
case is printed under the tables (an inbox route against proxy mode on the same store, ours
pass-through against the bare floor).
"""

import dataclasses
import re
from dataclasses import dataclass, field

from servers import Bare, Nginx, Proxy, Upstream
from stores import PostgresServer, RedisCluster, ValkeyServer


@dataclass(frozen=True)
class Goal:
    """A bound on one of a case's figures (medians over the rounds)."""

    metric: str  # "rps_ratio", "p99_ratio", "rss_mib" or "cpu_us" (the server's, per request)
    bound: float
    at_least: bool  # the figure must be >= bound (else <= bound)

    def met(self, value):
        return value >= self.bound if self.at_least else value <= self.bound

    def describe(self, reference):
        sign = "≥" if self.at_least else "≤"
        return {
            "rps_ratio": f"req/s {sign} {self.bound:g} × {reference}",
            "p99_ratio": f"p99 {sign} {self.bound:g} × {reference}'s",
            "rss_mib": f"peak RSS {sign} {self.bound:g} MiB",
            "cpu_us": f"CPU {sign} {self.bound:g} µs per request",
        }[self.metric]


def throughput(at_least):
    """Requests per second, as a ratio to the reference case of the same round."""
    return Goal("rps_ratio", at_least, True)


def p99(at_most):
    """99th percentile latency, as a ratio to the reference case's of the same round."""
    return Goal("p99_ratio", at_most, False)


def peak_rss_mib(at_most):
    return Goal("rss_mib", at_most, False)


def cpu_us(at_most):
    """The server's own CPU time (user and system) per request, in microseconds."""
    return Goal("cpu_us", at_most, False)


@dataclass(frozen=True)
class Load:
    """What wrk sends: a Lua script (and its BENCH_MODE), the path, extra headers."""

    mode: str = "plain"  # bench.lua: plain (no key), keyed (a fresh key each), replay (primed keys)
    script: str = "bench.lua"
    path: str = "/v1/charges"
    headers: tuple = ()  # "Name: value", given to wrk with -H

    @property
    def primes_replays(self):
        return self.mode == "replay"


PLAIN, KEYED, REPLAY = Load("plain"), Load("keyed"), Load("replay")
# wrk reconnects after every answer and keeps no TLS session: one full handshake per request.
HANDSHAKES = Load("plain", headers=("Connection: close",))


@dataclass
class Case:
    name: str
    label: str
    server: object  # a spec from servers.py
    load: Load = PLAIN
    goals: tuple = ()
    reference: str = "nginx"  # the case whose same-round figures the ratios are taken against
    versus: str = ""  # a second case of the same rounds it is compared with, if any
    skipped: str = ""  # why the case has no figures
    results: list = field(default_factory=list)  # per round: a dict of figures, or None

    @property
    def slug(self):
        """The name as it may appear in keys and file names."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    @property
    def uses_redis(self):
        return getattr(self.server, "uses_redis", False)

    @property
    def is_ours(self):
        return isinstance(self.server, Proxy)


def all_cases(redis_url):
    memory, redis, file = "memory", redis_url, "file:@PREFIX@/bench.db"
    small = peak_rss_mib(64)
    return [
        Case("upstream", "upstream direct", Upstream()),
        Case("nginx", "nginx pass-through", Nginx()),
        # What hyper and tokio cost for forwarding alone: the floor under ours-plain.
        Case("bare", "bare hyper proxy (the floor)", Bare()),
        Case("ours-plain", "ours pass-through (no key)", Proxy(memory), PLAIN,
             (throughput(0.9),), versus="bare"),
        Case("ours-keyed-memory", "ours keyed first, memory", Proxy(memory), KEYED,
             (throughput(0.8), p99(1.5))),
        Case("ours-keyed-redis", "ours keyed first, Redis", Proxy(redis), KEYED,
             (throughput(0.54), p99(1.5), small)),
        Case("ours-keyed-file", "ours keyed first, file", Proxy(file), KEYED,
             (throughput(0.6), cpu_us(35), small)),
        # The same Redis store on servers of the run's own (stores.py): a Valkey 9, whose fenced
        # writes are its own SET ... IFEQ and DELIFEQ instead of scripts, and a cluster of three
        # Redis masters, the smallest that spreads keys over machines.
        Case("ours-keyed-valkey", "ours keyed first, Valkey", Proxy(ValkeyServer()), KEYED,
             (throughput(0.6), p99(1.5), small)),
        Case("ours-keyed-cluster", "ours keyed first, Redis Cluster (3 masters)",
             Proxy(RedisCluster()), KEYED, (small,)),
        # PostgreSQL of the run's own on the same machine, durable (stores.py): its CPU time is
        # reported in the store column.
        Case("ours-keyed-postgres", "ours keyed first, Postgres", Proxy(PostgresServer()),
             KEYED, (throughput(0.35), small)),
        # An inbox route (`mode = "inbox"`, inbox.proxy.toml): each keyed POST is stored with
        # its key and acknowledged 202; the proxy delivers it to the same upstream in the
        # background meanwhile, and those deliveries are part of the measured cost.
        Case("ours-inbox-redis", "ours inbox ack, Redis (delivering meanwhile)",
             Proxy(redis, config="inbox.proxy.toml"), KEYED, versus="ours-keyed-redis"),
        Case("ours-inbox-file", "ours inbox ack, file (delivering meanwhile)",
             Proxy(file, config="inbox.proxy.toml"), KEYED, versus="ours-keyed-file"),
        Case("ours-replay-memory", "ours replay, memory", Proxy(memory), REPLAY,
             (throughput(1.3),)),
        Case("ours-replay-redis", "ours replay, Redis", Proxy(redis), REPLAY,
             (throughput(1.3), small)),
        Case("ours-replay-file", "ours replay, file", Proxy(file), REPLAY,
             (throughput(1.3), small)),
        Case("ours-replay-postgres", "ours replay, Postgres", Proxy(PostgresServer()), REPLAY,
             (throughput(1.3), small)),
        # TLS on the listener, against nginx terminating TLS with the same certificate.
        Case("nginx-tls", "nginx TLS pass-through", Nginx("tls.nginx.conf", tls=True)),
        Case("ours-tls", "ours TLS pass-through (no key)", Proxy(memory, tls=True), PLAIN,
             reference="nginx-tls"),
        Case("nginx-tls-handshake", "nginx TLS, a handshake per request",
             Nginx("tls.nginx.conf", tls=True), HANDSHAKES),
        Case("ours-tls-handshake", "ours TLS, a handshake per request",
             Proxy(memory, tls=True), HANDSHAKES, reference="nginx-tls-handshake"),
    ]


def with_build_b(cases):
    """Each case of ours followed by the same case against the second build, named "... (B)"."""
    ours = {case.name for case in cases if case.is_ours}
    out = []
    for case in cases:
        out.append(case)
        if case.is_ours:
            out.append(dataclasses.replace(
                case, name=f"{case.name} (B)", label=f"{case.label} (B)",
                server=dataclasses.replace(case.server, build="B"), results=[],
                # A case of ours is compared with its own build's twin; the floor has none.
                versus=f"{case.versus} (B)" if case.versus in ours else case.versus,
            ))
    return out


def select(cases, names):
    """The named cases (each with its B twin), and every case their ratios need."""
    if not names:
        return cases
    wanted = {c.name for c in cases if c.name in names or c.name.removesuffix(" (B)") in names}
    unknown = set(names) - {c.name for c in cases}
    if unknown:
        raise ValueError(f"no such case: {', '.join(sorted(unknown))}; "
                         f"cases: {', '.join(c.name for c in cases)}")
    # A reference has a reference of its own (nginx TLS is measured against nginx in clear).
    while more := {n for c in cases if c.name in wanted for n in (c.reference, c.versus)
                   if n} - wanted:
        wanted |= more
    return [c for c in cases if c.name in wanted]
