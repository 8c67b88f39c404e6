"""The processes a benchmark run starts, and what /proc says about any process it watches.

Every process is started in a session of its own, so a Ctrl-C reaches only the driver, which
then stops them by PID, newest first. CPU time is read from /proc/PID/stat: utime + stime of the
whole thread group, which keeps counting threads that have already exited.
"""

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


class NotStarted(Exception):
    """The server under test did not come up; the case is reported as skipped, with this reason."""


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the driver; everything it started must be stopped."""


def raise_interrupted(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def bench_scope(prefix):
    """What a benchmark script runs in: its processes and a temporary folder named `prefix...`.

    SIGINT or SIGTERM raises `Interrupted` inside it; however it ends, every process started is
    stopped and the folder removed, with both signals ignored meanwhile, so a second Ctrl-C
    cannot cut the clean-up short and leave servers running.
    """
    signal.signal(signal.SIGTERM, raise_interrupted)
    signal.signal(signal.SIGINT, raise_interrupted)
    processes = Processes()
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield processes, tmp
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        processes.stop_all()
        subprocess.run(["rm", "-rf", tmp], check=False)


def interrupted(error):
    """The exit code of a run cut short by a signal, as a shell reports one."""
    log(f"interrupted ({error}); stopping everything")
    return 130


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Every process this run started and has not stopped yet, stopped by PID, newest first."""

    def __init__(self):
        self.running = []

    def start(self, argv, stdout, stderr, env=None):
        process = subprocess.Popen(
            argv, stdout=stdout, stderr=stderr, env=env, start_new_session=True
        )
        self.running.append(process)
        return process

    def forget(self, process):
        if process in self.running:
            self.running.remove(process)

    def stop(self, process, sig=signal.SIGTERM, grace=5.0):
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.forget(process)

    def stop_all(self):
        for process in reversed(list(self.running)):
            self.stop(process)


def wait_ready(port, process, what, timeout=15.0, scheme="http"):
    """Waits until something answers HTTP(S) on the port; False if the process exits first."""
    deadline = time.monotonic() + timeout
    # A benchmark's certificate is self-signed: only "is it serving" is asked here.
    context = ssl._create_unverified_context() if scheme == "https" else None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            url = f"{scheme}://127.0.0.1:{port}/ready-check"
            with urllib.request.urlopen(url, timeout=1, context=context):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer means it is serving
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer on port {port} within {timeout}s")


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name, which may hold spaces itself."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pids):
    """User + system CPU time of these processes, all threads; None if one cannot be read."""
    ticks = 0
    try:
        for pid in pids:
            fields = _stat_fields(pid)
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    except (OSError, ValueError, IndexError):
        return None
    return ticks / CLOCK_TICKS_PER_SECOND


def with_children(pid):
    """The process and its direct children: an nginx master and its workers."""
    pids = [pid]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if int(_stat_fields(entry)[1]) == pid:
                pids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue  # gone between listing and reading
    return pids


def vm_hwm_kib(pid):
    """Peak resident set size, as the kernel counted it since the process started."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None
