#!/usr/bin/env python3
"""Where a profile's time goes, by part of the proxy: reads the folded stacks that
flamegraph.sh keeps (OUT.folded) and shares each sample out to the first bucket its stack
matches, innermost frame first, so every sample counts once.

    benches/load/profile.py OUT.folded [OTHER.folded]

With two files, the second column is the other profile's share, to compare before and after.
"""

import sys
from collections import Counter

# Innermost match wins: a sample in SHA-256 called from the flow counts as SHA-256.
BUCKETS = [
    ("kernel: network", ("tcp_", "ip_", "__sys_sendto", "__sys_recvfrom", "sock_", "skb", "inet_",
                         "sendmsg", "recvmsg", "__x64_sys_writev", "__x64_sys_readv")),
    ("kernel: scheduling and wake-ups", ("schedule", "futex", "try_to_wake_up", "finish_task_switch",
                                         "ttwu", "epoll", "_raw_spin", "irq", "ipi")),
    ("kernel: other", ("entry_SYSCALL", "do_syscall", "syscall_exit", "[unknown]")),
    ("allocation", ("mi_", "_mi_", "malloc", "free", "realloc", "alloc::raw_vec")),
    ("SHA-256", ("sha2::",)),
    ("logging", ("tracing_subscriber", "tracing_appender", "tracing_core", "fmt::write",
                 "core::fmt")),
    ("metrics and status page", ("metrics::", "metrics_exporter", "idempotency_proxy::status",
                                 "idempotency_proxy::telemetry",
                                 "idempotency_core::idempotency::metrics")),
    ("Redis client", ("redis::",)),
    ("file store", ("redb::", "idempotency_file_store")),
    ("memory store and replay cache", ("idempotency_core::store::memory",
                                       "idempotency_core::store::replay_cache",
                                       "idempotency_core::store::caching")),
    ("hyper (HTTP/1 parsing and writing)", ("hyper::proto", "httparse", "http::header")),
    ("upstream pool", ("idempotency_proxy::upstream",)),
    ("idempotency layer", ("idempotency_core::idempotency", "idempotency_core::model")),
    ("server, router, framing", ("idempotency_proxy::server", "idempotency_proxy::router",
                                 "idempotency_proxy::framing", "idempotency_core::problem")),
    ("tokio scheduler and timers", ("tokio::runtime", "tokio::time", "tokio::sync")),
]


def shares(path):
    counts, total = Counter(), 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            n = int(n)
            total += n
            frames = stack.split(";")
            counts[bucket(frames)] += n
    return {name: 100.0 * c / total for name, c in counts.items()}, total


def bucket(frames):
    for frame in reversed(frames):
        for name, needles in BUCKETS:
            if any(needle in frame for needle in needles):
                return name
    return "other"


def main():
    profiles = [shares(path) for path in sys.argv[1:]]
    names = [name for name, _ in BUCKETS] + ["other"]
    header = " | ".join(f"{path} ({total:,} samples)" for path, (_, total) in
                        zip(sys.argv[1:], profiles))
    print(f"| part | {header} |")
    print("|---|" + "---:|" * len(profiles))
    for name in names:
        cells = " | ".join(f"{p.get(name, 0.0):.1f}%" for p, _ in profiles)
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
