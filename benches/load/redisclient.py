"""Just enough of a Redis client for the benchmark: PING, INFO, and deleting one run's keys.

The benchmark only runs against a Redis on loopback and touches nothing but the records its
own runs wrote (their keys carry the run's prefix).
"""

import socket


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

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.sock.close()

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
            return self.reader.read(n + 2)[:-2].decode()
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

    def server_pid(self):
        """The Redis server's own PID (INFO server's process_id), to read its CPU time."""
        for line in self.call("INFO", "server").splitlines():
            if line.startswith("process_id:"):
                return int(line.split(":", 1)[1])
        return None


def redis_available(url):
    try:
        with Redis(url) as client:
            return client.call("PING") == "PONG"
    except (OSError, RuntimeError):
        return False


def redis_server_pid(url):
    """The PID of the Redis at this URL, if it runs where this driver can read its /proc."""
    try:
        with Redis(url) as client:
            pid = client.server_pid()
    except (OSError, RuntimeError):
        return None
    try:
        with open(f"/proc/{pid}/comm") as f:
            local = f.read().startswith("redis")
    except (OSError, TypeError):
        local = False
    # Otherwise it runs on another host or in another PID namespace: its CPU is not readable here.
    return pid if local else None
