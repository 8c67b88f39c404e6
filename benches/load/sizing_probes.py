"""What the sizing script (sizing.py) reads around a measured window, beside wrk's count.

- `Snapshot`: the proxy's CPU time, resident set and I/O (`/proc/PID/io`), the size of its
  request log, and each store node's CPU time and `INFO` (memory, bytes over the wire, calls per
  command). Two of them, before and after a window, give the figures per request.
- `Syscalls`: `perf stat` counting the proxy's sync and write system calls over a window.
- `Growth`: the store file's size, polled through a window, each step with the request log's
  size at that moment (which counts the requests so far).
- `Monitor`: `MONITOR` on every store node, counting the commands the proxy sends (one round
  trip each: the store's client sends no pipelines on the record path) apart from those a
  script runs inside the server.
"""

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

from procs import cpu_seconds
from redisclient import Redis, redis_address

SYSCALLS = ("fdatasync", "fsync", "pwrite64", "write")


def info(url):
    """INFO's figures of one node: its `key:value` lines, and calls per command."""
    with Redis(url) as client:
        text = client.call("INFO", "all")
    figures, calls = {}, {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.startswith("cmdstat_"):
            stats = dict(item.split("=") for item in value.split(","))
            calls[name[len("cmdstat_"):]] = int(stats["calls"])
        elif value:
            figures[name] = value
    return figures, calls


def _proc_io(pid):
    with open(f"/proc/{pid}/io") as f:
        return {name: int(value) for name, value in (line.split(": ") for line in f)}


def _rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


@dataclass
class Snapshot:
    proxy_cpu_s: float
    proxy_rss: int
    proxy_io: dict
    log_bytes: int
    store_cpu_s: float = None
    nodes: list = field(default_factory=list)  # (figures, calls) per store node

    @classmethod
    def take(cls, server, log_path):
        pid = server.pids[0]
        store = server.store
        return cls(
            proxy_cpu_s=cpu_seconds(server.pids),
            proxy_rss=_rss_bytes(pid),
            proxy_io=_proc_io(pid),
            log_bytes=os.path.getsize(log_path),
            store_cpu_s=cpu_seconds(store.pids) if store else None,
            nodes=[info(url) for url in store.nodes] if store else [],
        )


def node_sum(snapshot, name):
    """A figure of INFO summed over the nodes (a cluster's masters together)."""
    return sum(int(figures[name]) for figures, _ in snapshot.nodes)


def _calls(start, end):
    """Calls per command one node took between two INFOs, INFO's own left out."""
    return {command: calls - start.get(command, 0) for command, calls in end.items()
            if calls != start.get(command, 0) and command != "info"}


def calls_between(before, after):
    """Calls per command made between two snapshots, over every node."""
    out = {}
    for (_, start), (_, end) in zip(before.nodes, after.nodes):
        for command, delta in _calls(start, end).items():
            out[command] = out.get(command, 0) + delta
    return out


def node_shares(before, after):
    """Each node's part of all the calls between two snapshots: how evenly a cluster's masters
    share the work."""
    totals = [sum(_calls(start, end).values())
              for (_, start), (_, end) in zip(before.nodes, after.nodes)]
    return [total / (sum(totals) or 1) for total in totals]


class Syscalls:
    """`perf stat` counting the proxy's sync and write system calls until `stop`."""

    def __init__(self, pid, out_path):
        self.out_path = out_path
        events = ",".join(f"syscalls:sys_enter_{name}" for name in SYSCALLS)
        argv = ["perf", "stat", "-x", ",", "-e", events, "-p", str(pid), "-o", out_path]
        try:
            self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError:
            self.process = None  # no perf: the counts are left out

    def stop(self):
        """Counts per system call, or {} if perf could not count (none, or no tracepoints)."""
        if self.process is None:
            return {}
        self.process.send_signal(signal.SIGINT)
        self.process.wait(10)
        counts = {}
        if not os.path.exists(self.out_path):
            return counts
        with open(self.out_path) as f:
            for line in f:
                fields = line.strip().split(",")
                if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_"):
                    if fields[0].isdigit():
                        counts[fields[2][len("syscalls:sys_enter_"):]] = int(fields[0])
        return counts


class Monitor:
    """`MONITOR` on every node until `stop`: the commands the proxy sent and those scripts ran."""

    MARKER = "sizing-monitor-marker"

    def __init__(self, nodes):
        self.nodes = nodes
        self.lines = [[] for _ in nodes]
        self.readers = []
        for i, url in enumerate(nodes):
            host, port, _ = redis_address(url)
            sock = socket.create_connection((host, port), timeout=30)
            sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
            reader = sock.makefile("rb")
            assert reader.readline().startswith(b"+OK")
            thread = threading.Thread(target=self._read, args=(reader, self.lines[i]),
                                      daemon=True)
            thread.start()
            self.readers.append((sock, thread))

    def _read(self, reader, lines):
        for raw in reader:
            line = raw.decode(errors="replace").rstrip("\r\n")
            lines.append(line)
            if self.MARKER in line:
                return

    def stop(self):
        """{"sent": {command: calls}, "in scripts": {command: calls}}, this driver's own
        commands left out. Waits for each node's marker, so every command before it is seen."""
        for url in self.nodes:
            with Redis(url) as client:
                client.call("ECHO", self.MARKER)
        deadline = time.monotonic() + 30
        for sock, thread in self.readers:
            thread.join(max(0.0, deadline - time.monotonic()))
            sock.close()
        sent, in_scripts = {}, {}
        for lines in self.lines:
            for line in lines:
                source, _, rest = line.partition("] ")
                command = rest.split(" ", 1)[0].strip('"').lower()
                if not command or command in ("select", "echo", "info"):
                    continue
                counts = in_scripts if source.endswith(" lua") else sent
                counts[command] = counts.get(command, 0) + 1
        return {"sent": sent, "in scripts": in_scripts}


def store_bytes(path):
    """A file store's bytes on disk: its file, and the segments of its log folder."""
    log = path + "-log"
    segments = [os.path.join(log, name) for name in os.listdir(log)] if os.path.isdir(log) else []
    return sum(os.path.getsize(p) for p in [path, *segments] if os.path.exists(p))


class Growth:
    """Polls a file store's size until `stop`: [(store bytes, request log bytes)] at each
    change."""

    def __init__(self, path, log_path, every_s=0.02):
        self.path, self.log_path, self.every_s = path, log_path, every_s
        self.steps = []
        self.running = True
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self):
        last = None
        while self.running:
            size = store_bytes(self.path)
            if size != last:
                self.steps.append((size, os.path.getsize(self.log_path)))
                last = size
            time.sleep(self.every_s)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.steps
