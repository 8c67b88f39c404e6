#!/usr/bin/env python3
"""Load benchmark: the proxy next to the upstream reached directly and next to nginx.

Started by run.sh, which installs nginx and wrk and builds the proxy first. Every case
(cases.py) is measured with wrk (BENCH_CONNECTIONS connections, BENCH_THREADS threads) for
BENCH_DURATION seconds after a BENCH_WARMUP warm-up, in BENCH_ROUNDS interleaved rounds; the
tables give the median of the rounds, and each ratio is taken against nginx pass-through of the
same round. Besides req/s and latency, each run reports the CPU time per request of the server
under test and of the processes it leans on (runner.py). The goals are checked after the
tables; the chart (BENCH_CHART) and every round's raw figures (results.json next to it) are
written to files.

With BENCH_PROXY_BIN_B, every case of ours also runs against that second binary, right after
the first, and is reported as "<case> (B)".

`driver.py --profile CASE --perf-data PATH` runs one case once instead, and records its server
with `perf record` for a few seconds in the middle of the measured window (flamegraph.sh).

Only loopback addresses are used. Every process started here is stopped at the end, on
failure, Ctrl-C and SIGTERM too. Records written to Redis carry this run's key prefix and are
deleted afterwards; nothing else in Redis is touched. The Valkey and the Redis Cluster of the
Valkey and cluster cases are the run's own (stores.py), emptied after each measured run.
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ left next to the scripts

import argparse
import os
import subprocess
import time

import chart
import report
from cases import all_cases, select, with_build_b
from procs import Interrupted, bench_scope, interrupted, log
from redisclient import redis_available, redis_server_pid
from runner import HERE, Runner, Settings
from servers import Fixtures

CHART = os.environ.get("BENCH_CHART", os.path.join(HERE, "results", "chart.svg"))


def chosen_cases(settings):
    cases = all_cases(settings.redis_url)
    if settings.proxy_bin_b:
        cases = with_build_b(cases)
    return select(cases, settings.only)


def proxy_binaries(settings):
    builds = {"A": settings.proxy_bin}
    if settings.proxy_bin_b:
        builds["B"] = settings.proxy_bin_b
    for build, path in builds.items():
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"no proxy binary at {path} (build {build}): "
                               "run cargo build --release")
    builds["bare"] = settings.bare_bin  # checked when its case starts: a missing one is skipped
    return builds


def run_rounds(runner, cases, settings, have_redis):
    for round_no in range(1, settings.rounds + 1):
        for case in cases:
            if case.uses_redis and not have_redis:
                case.skipped = f"no Redis at {settings.redis_url}"
            if case.skipped:
                case.results.append(None)
                continue
            result = runner.measure(case, round_no)
            case.results.append(result)
            if result is None:
                log(f"round {round_no} {case.name}: skipped ({case.skipped})")
                continue
            delivered = (f", {result['delivered_per_s']:,.0f} deliveries/s meanwhile"
                         if "delivered_per_s" in result else "")
            log(f"round {round_no} {case.name}: {result['rps']:,.0f} req/s, "
                f"p50 {result['p50_us'] / 1000:.2f} ms, p99 {result['p99_us'] / 1000:.2f} ms, "
                f"{fmt_cpu(result['cpu_us_per_req'])}{delivered}")


def fmt_cpu(cpu):
    return "CPU µs/req " + ", ".join(
        f"{name} {value:.1f}" for name, value in cpu.items() if value is not None
    )


def print_report(settings, cases, elapsed_s):
    summaries = report.summarize_all(cases)
    setup = (f"wrk -t{settings.threads} -c{settings.connections}, {settings.duration_s}s per "
             f"run after {settings.warmup_s}s warm-up, median of {settings.rounds} interleaved "
             f"rounds, {os.cpu_count()} CPUs")
    print(f"\n{setup}; ratios are to nginx pass-through of the same round (median of the "
          f"per-round ratios); {elapsed_s:.0f}s in all.\n")
    print(report.main_table(cases, summaries))
    print("\nCPU per request of the other processes in the same windows (Redis/Valkey: the "
          "whole store server, whoever else uses the shared Redis; the run's own Valkey; all "
          "three cluster masters):\n")
    print(report.cpu_table(cases, summaries))
    compared = report.versus_table(cases, summaries)
    if compared:
        print("\nSame-run ratios to another case (median of the per-round ratios; an inbox "
              "route against proxy mode on the same store):\n")
        print(compared)
    print("\nGoals (medians over the rounds):\n")
    print(report.goals_table(cases, summaries))
    for note in report.skipped_notes(cases):
        print(f"\n{note}")
    print("\nPer round:\n" + "\n".join(report.per_round_lines(cases)))
    os.makedirs(os.path.dirname(os.path.abspath(CHART)), exist_ok=True)
    chart.write_svg(CHART, cases, summaries,
                    "Throughput of each case relative to nginx pass-through", setup)
    results = os.path.join(os.path.dirname(os.path.abspath(CHART)), "results.json")
    report.write_json(results, settings, cases, summaries, elapsed_s)
    print(f"\nChart: {CHART}\nEvery round's figures: {results}")


def profile(runner, cases, args, settings):
    """One run of one case, its server recorded by perf in the middle of the window."""
    case = next((c for c in cases if c.name == args.profile), None)
    if case is None:
        raise RuntimeError(f"no case {args.profile}: {', '.join(c.name for c in cases)}")
    if args.perf_seconds >= settings.duration_s:
        raise RuntimeError(f"BENCH_DURATION ({settings.duration_s}s) must exceed "
                           f"the {args.perf_seconds}s recorded")
    processes, tmp = runner.fixtures.processes, runner.fixtures.tmp

    def record(server, window_s):
        time.sleep((window_s - args.perf_seconds) / 2)
        argv = ["perf", "record", "-F", "999", *args.call_graph.split(), "-o", args.perf_data,
                "-p", ",".join(map(str, server.pids)), "--", "sleep", str(args.perf_seconds)]
        log(" ".join(argv))
        errors_path = os.path.join(tmp, "perf.stderr")
        with open(errors_path, "w") as errors:
            perf = processes.start(argv, subprocess.DEVNULL, errors)
        if perf.wait() != 0:
            with open(errors_path) as errors:
                raise RuntimeError(f"perf record failed: {errors.read().strip()}")
        processes.forget(perf)

    result = runner.measure(case, 1, during=record)
    if result is None:
        raise RuntimeError(f"{case.name}: {case.skipped}")
    log(f"{case.name} under perf: {result['rps']:,.0f} req/s; {fmt_cpu(result['cpu_us_per_req'])}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", metavar="CASE", help="run one case once, under perf")
    parser.add_argument("--perf-data", default="perf.data", help="perf record's output file")
    parser.add_argument("--perf-seconds", type=int, default=5, help="how long perf records")
    parser.add_argument("--call-graph", default="--call-graph dwarf,32768",
                        help="perf record's call-graph flags")
    return parser.parse_args()


def main():
    args = parse_args()
    settings = Settings.from_env()
    started = time.monotonic()
    try:
        with bench_scope("idempotency-proxy-bench-") as (processes, tmp):
            return run(args, settings, processes, tmp, started)
    except Interrupted as e:
        return interrupted(e)


def run(args, settings, processes, tmp, started):
    cases = chosen_cases(settings)
    run_id = f"{os.getpid()}-{int(time.time())}"
    fixtures = Fixtures(tmp, processes, proxy_binaries(settings), run_id=run_id)
    have_redis = redis_available(settings.redis_url)
    redis_pid = redis_server_pid(settings.redis_url) if have_redis else None
    upstream = fixtures.start_upstream()
    log(f"upstream (nginx, 1 worker) on 127.0.0.1:{upstream.port}; Redis PID {redis_pid}")
    runner = Runner(settings, fixtures, redis_pid, run_id)
    if args.profile:
        profile(runner, cases, args, settings)
        return 0
    log(f"{settings.rounds} rounds of {len(cases)} cases, {settings.duration_s}s each after "
        f"{settings.warmup_s}s warm-up, wrk -t{settings.threads} -c{settings.connections}; "
        f"files in {tmp}")
    run_rounds(runner, cases, settings, have_redis)
    print_report(settings, cases, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
