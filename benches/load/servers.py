"""How each kind of server under test is started, and the upstream they all share.

A case names one of these specs; `start` brings a fresh server up on a free loopback port for one
run and returns it as `Running`: where it listens, which processes' CPU time is its own, and how
to stop it. Config templates live next to this file; `@NAME@` placeholders in them are filled in
(`@PREFIX@` is the run's scratch directory, `@UPSTREAM_PORT@` the shared upstream's port, `@RUN@`
the run's id, `@NAME@` the case's slug).
"""

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional

from procs import NotStarted, free_port, wait_ready, with_children

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Running:
    port: int
    pids: list  # the processes whose CPU time is the server's own
    rss_pid: Optional[int] = None  # the process whose peak RSS is reported
    stop: Callable[[], None] = field(default=lambda: None)
    scheme: str = "http"
    admin_port: Optional[int] = None  # the proxy's admin listener, if its config opens one
    store: Optional[object] = None  # the run's own store server it uses (stores.Started), if any


@dataclass
class Fixtures:
    """What every run shares: the scratch directory, the started processes, the upstream."""

    tmp: str
    processes: object  # procs.Processes
    # "A" (and "B" when comparing two builds) -> path of a proxy binary; "bare" -> the floor's
    proxy_bins: dict
    upstream: Optional[Running] = None
    run_id: str = "run"  # this run's id, @RUN@ in templates
    stores: dict = field(default_factory=dict)  # store server spec -> stores.Started

    def store(self, spec):
        """The run's store server of this spec, started on first use and kept for the run."""
        if spec not in self.stores:
            self.stores[spec] = spec.start(self, f"store-{len(self.stores)}")
        return self.stores[spec]

    def render(self, template, name, **values):
        with open(os.path.join(HERE, template)) as f:
            text = f.read()
        values.update(PREFIX=self.tmp, NAME=name, RUN=self.run_id)
        if self.upstream is not None:
            values.setdefault("UPSTREAM_PORT", self.upstream.port)
        for key, value in values.items():
            text = text.replace(f"@{key}@", str(value))
        path = os.path.join(self.tmp, f"{name}.{template}")
        with open(path, "w") as f:
            f.write(text)
        return path

    def tls_pair(self):
        """A self-signed ECDSA P-256 certificate for localhost and 127.0.0.1, and its key: made
        once per run, and presented by every server under test that speaks TLS."""
        cert, key = (os.path.join(self.tmp, name) for name in ("tls.crt", "tls.key"))
        if not os.path.exists(cert):
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj",
                            "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                            "-keyout", key, "-out", cert], check=True, capture_output=True)
        return cert, key

    def start_nginx(self, template, name, port, scheme="http", **values):
        conf = self.render(template, name, PORT=port, **values)
        errors = open(os.path.join(self.tmp, f"{name}.stderr"), "w")
        argv = ["nginx", "-p", self.tmp, "-c", conf, "-e", f"{self.tmp}/{name}.error.log",
                "-g", "daemon off;"]
        process = self.processes.start(argv, subprocess.DEVNULL, errors)
        errors.close()
        if not wait_ready(port, process, name, scheme=scheme):
            raise RuntimeError(f"{name} exited: see {self.tmp}/{name}.stderr")
        return process

    def start_upstream(self):
        port = free_port()
        process = self.start_nginx("upstream.nginx.conf", "upstream", port)
        # Kept for the whole run: stopping it is the driver's last step, not a case's.
        self.upstream = Running(port, with_children(process.pid))
        return self.upstream


@dataclass(frozen=True)
class Upstream:
    """The shared upstream itself, reached directly: what no proxy in front of it can beat."""

    def start(self, fixtures, name):
        return fixtures.upstream


@dataclass(frozen=True)
class Nginx:
    """An nginx of its own for the run, from a config template (pass-through by default); with
    `tls`, the template gets the run's certificate as @CERT@ and @KEY@ and is reached by https."""

    template: str = "passthrough.nginx.conf"
    tls: bool = False

    def start(self, fixtures, name):
        port = free_port()
        values, scheme = {}, "http"
        if self.tls:
            values["CERT"], values["KEY"] = fixtures.tls_pair()
            scheme = "https"
        process = fixtures.start_nginx(self.template, name, port, scheme, **values)

        def stop():
            fixtures.processes.stop(process)
            # The access log is there to be written, as the proxy writes its log, not kept.
            _remove(os.path.join(fixtures.tmp, f"{name}.access.log"))

        return Running(port, with_children(process.pid), None, stop, scheme)


@dataclass(frozen=True)
class Bare:
    """The floor (bare_proxy.rs): hyper forwarding and nothing else, one upstream connection per
    client connection, both driven by one task, on as many worker threads as the proxy's."""

    def start(self, fixtures, name):
        binary = fixtures.proxy_bins.get("bare", "")
        if not os.access(binary, os.X_OK):
            raise NotStarted(f"no bare proxy at {binary!r}: "
                             "cargo build --release --example bare-proxy")
        port = free_port()
        argv = [binary, f"127.0.0.1:{port}", f"127.0.0.1:{fixtures.upstream.port}"]
        process = fixtures.processes.start(argv, subprocess.DEVNULL, subprocess.DEVNULL)
        if not wait_ready(port, process, "the bare proxy"):
            fixtures.processes.forget(process)
            raise NotStarted(f"{binary} did not start: exit status {process.returncode}")
        return Running(port, [process.pid], process.pid, lambda: fixtures.processes.stop(process))


@dataclass(frozen=True)
class Proxy:
    """The proxy with one store; more flags, or a config template given as `--config`; with
    `tls`, listening over HTTPS with the run's certificate."""

    # --store ("@PREFIX@" stands for the run's scratch directory), or a store server of the
    # run's own (stores.py)
    store: object
    args: tuple = ()
    config: Optional[str] = None
    build: str = "A"  # which of the proxy binaries
    tls: bool = False

    def start(self, fixtures, name):
        port = free_port()
        own_store = None if isinstance(self.store, str) else fixtures.store(self.store)
        store = own_store.url if own_store else self.store.replace("@PREFIX@", fixtures.tmp)
        argv = [fixtures.proxy_bins[self.build], "--listen", f"127.0.0.1:{port}",
                "--upstream", f"http://127.0.0.1:{fixtures.upstream.port}", "--store", store,
                *self.args]
        admin_port = None
        if self.config is not None:
            port_for_admin = free_port()  # @ADMIN_PORT@, for a template that opens one
            conf = fixtures.render(self.config, name, PORT=port, ADMIN_PORT=port_for_admin)
            with open(conf) as f:
                if f"127.0.0.1:{port_for_admin}" in f.read():
                    admin_port = port_for_admin
            argv += ["--config", conf]
        scheme = "https" if self.tls else "http"
        if self.tls:
            cert, key = fixtures.tls_pair()
            argv += ["--tls-cert", cert, "--tls-key", key]
        stderr_path = os.path.join(fixtures.tmp, f"{name}.stderr")
        with open(stderr_path, "w") as stderr:
            process = fixtures.processes.start(argv, subprocess.DEVNULL, stderr)
        if not wait_ready(port, process, "the proxy", scheme=scheme):
            fixtures.processes.forget(process)
            why = _last_line(stderr_path) or f"exit status {process.returncode}"
            raise NotStarted(f"{argv[0]} did not start with --store {store}: {why}")

        def stop():
            fixtures.processes.stop(process)
            _remove(stderr_path)  # its request log: as large as the run was long
            if store.startswith("file:"):
                remove_file_store(store[len("file:"):])

        return Running(port, [process.pid], process.pid, stop, scheme, admin_port, own_store)

    @property
    def uses_redis(self):
        """Whether it uses the shared Redis (BENCH_REDIS_URL)."""
        return isinstance(self.store, str) and self.store.startswith("redis")


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def remove_file_store(path):
    """A file store: its file, its log folder beside it, and an older release's log."""
    _remove(path)
    _remove(path + "-wal")
    shutil.rmtree(path + "-log", ignore_errors=True)


def _last_line(path):
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else ""
