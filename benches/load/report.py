"""What a run found: medians over the rounds, the markdown tables, the goals, the raw JSON.

Every ratio is taken round by round against the case's reference (nginx pass-through) of the
same round, and the median of those ratios is reported: rounds are interleaved, so a slow
moment of the machine weighs on both sides of a ratio alike.
"""

import dataclasses
import json
import os
import platform
import statistics

# The processes besides the server under test whose CPU per request is reported. The store
# server is the shared Redis, or the run's own Valkey or cluster masters (all of them).
OTHERS = (("upstream", "upstream"), ("redis", "Redis/Valkey"), ("wrk", "wrk"))


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec):
    return "—" if value is None else f"{value:{spec}}"


def _ratios(case, reference, metric):
    return [
        mine[metric] / ref[metric]
        for mine, ref in zip(case.results, reference.results)
        if mine and ref and ref.get(metric)
    ]


def summarize(case, reference):
    """Medians over the rounds of one case; None if it has no figures."""
    rounds = [r for r in case.results if r]
    if not rounds:
        return None
    rps_ratios = _ratios(case, reference, "rps")
    hwm = median([r.get("vm_hwm_kib") for r in rounds])
    cpu_names = {name for r in rounds for name in r["cpu_us_per_req"]}
    return {
        "rps": median([r["rps"] for r in rounds]),
        "rps_ratio": median(rps_ratios),
        "rps_ratio_min": min(rps_ratios, default=None),
        "rps_ratio_max": max(rps_ratios, default=None),
        "p50_ms": median([r["p50_us"] / 1000 for r in rounds]),
        "p50_ratio": median(_ratios(case, reference, "p50_us")),
        "p99_ms": median([r["p99_us"] / 1000 for r in rounds]),
        "p99_ratio": median(_ratios(case, reference, "p99_us")),
        "errors": sum(r["errors"] for r in rounds),
        "delivered_per_s": median([r.get("delivered_per_s") for r in rounds]),
        "rss_mib": None if hwm is None else hwm / 1024,
        "cpu_us_per_req": {
            name: median([r["cpu_us_per_req"].get(name) for r in rounds])
            for name in sorted(cpu_names)
        },
    }


def summarize_all(cases):
    by_name = {case.name: case for case in cases}
    summaries = {case.name: summarize(case, by_name[case.reference]) for case in cases}
    for case in cases:
        if case.versus and summaries[case.name] is not None:
            summaries[case.name]["versus"] = versus(case, by_name[case.versus])
    return summaries


def versus(case, other):
    """The case against the case it is compared with, round by round (the same rounds)."""
    pairs = [(a, b) for a, b in zip(case.results, other.results) if a and b]
    rps = [a["rps"] / b["rps"] for a, b in pairs if b["rps"]]
    cpu = [a["cpu_us_per_req"]["server"] / b["cpu_us_per_req"]["server"] for a, b in pairs
           if a["cpu_us_per_req"].get("server") is not None and b["cpu_us_per_req"].get("server")]
    return {
        "case": other.name,
        "rps_ratio": median(rps),
        "rps_ratio_min": min(rps, default=None),
        "rps_ratio_max": max(rps, default=None),
        "rps_ratio_by_round": rps,
        "cpu_ratio": median(cpu),
    }


def versus_table(cases, summaries):
    """Each case that names a `versus` case, against it: median of the per-round ratios."""
    labels = {case.name: case.label for case in cases}
    lines = ["| case | compared with | req/s × | lowest–highest round | proxy CPU µs/req × "
             "| deliveries/s meanwhile |",
             "|---|---|---:|---:|---:|---:|"]
    rows = 0
    for case in cases:
        v = (summaries[case.name] or {}).get("versus")
        if not v:
            continue
        rows += 1
        lines.append(f"| {case.label} | {labels[v['case']]} | {fmt(v['rps_ratio'], '.2f')} "
                     f"| {fmt(v['rps_ratio_min'], '.2f')}–{fmt(v['rps_ratio_max'], '.2f')} "
                     f"| {fmt(v['cpu_ratio'], '.2f')} "
                     f"| {fmt(summaries[case.name].get('delivered_per_s'), ',.0f')} |")
    return "\n".join(lines) if rows else ""


def main_table(cases, summaries):
    lines = [
        "| case | req/s | × ref | p50 ms | × ref | p99 ms | × ref | errors "
        "| peak RSS MiB | proxy CPU µs/req |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        s = summaries[case.name]
        if s is None:
            lines.append(f"| {case.label} | skipped | | | | | | | | |")
            continue
        lines.append(
            f"| {case.label} | {fmt(s['rps'], ',.0f')} | {fmt(s['rps_ratio'], '.2f')} "
            f"| {fmt(s['p50_ms'], '.2f')} | {fmt(s['p50_ratio'], '.2f')} "
            f"| {fmt(s['p99_ms'], '.2f')} | {fmt(s['p99_ratio'], '.2f')} | {s['errors']} "
            f"| {fmt(s['rss_mib'], '.1f')} | {fmt(s['cpu_us_per_req'].get('server'), '.1f')} |"
        )
    labels = {case.name: case.label for case in cases}
    others = [f"{case.label} → {labels.get(case.reference, case.reference)}"
              for case in cases if case.reference not in ("nginx", case.name)]
    lines.append("")
    lines.append("Ratios (× ref) are to nginx pass-through of the same round"
                 + (f", except: {'; '.join(others)}." if others else "."))
    return "\n".join(lines)


def cpu_table(cases, summaries):
    """CPU µs per request of the other processes, and of all of them together."""
    header = " | ".join(f"{label} µs/req" for _, label in OTHERS)
    lines = [f"| case | {header} | all µs/req |", "|---|" + "---:|" * (len(OTHERS) + 1)]
    for case in cases:
        s = summaries[case.name]
        if s is None:
            continue
        cpu = s["cpu_us_per_req"]
        known = [v for v in cpu.values() if v is not None]
        cells = " | ".join(fmt(cpu.get(name), ".1f") for name, _ in OTHERS)
        lines.append(f"| {case.label} | {cells} | {fmt(sum(known) if known else None, '.1f')} |")
    return "\n".join(lines)


def goal_value(summary, metric):
    """A goal's figure: the server's CPU per request sits among the processes' CPU figures."""
    if metric == "cpu_us":
        return summary.get("cpu_us_per_req", {}).get("server")
    return summary.get(metric)


def goal_rows(cases, summaries):
    """(case, goal, measured value or None, met) for every goal of every case."""
    rows = []
    for case in cases:
        s = summaries[case.name] or {}
        for goal in case.goals:
            value = goal_value(s, goal.metric)
            rows.append((case, goal, value, value is not None and goal.met(value)))
    return rows


def goals_table(cases, summaries):
    labels = {case.name: case.label for case in cases}
    lines = ["| case | goal | measured | |", "|---|---|---:|---|"]
    for case, goal, value, met in goal_rows(cases, summaries):
        verdict = "met" if met else ("no figure" if value is None else "missed")
        spec = ".1f" if goal.metric in ("rss_mib", "cpu_us") else ".2f"
        lines.append(f"| {case.label} | {goal.describe(labels[case.reference])} "
                     f"| {fmt(value, spec)} | {verdict} |")
    return "\n".join(lines)


def per_round_lines(cases):
    lines = []
    for case in cases:
        if any(case.results):
            figures = [f"{r['rps']:.0f}" if r else "—" for r in case.results]
            lines.append(f"  {case.name}: req/s by round {', '.join(figures)}")
    return lines


def skipped_notes(cases):
    reasons = {}
    for case in cases:
        if case.skipped:
            reasons.setdefault(case.skipped, []).append(case.label)
    return [f"Skipped ({', '.join(labels)}): {why}" for why, labels in reasons.items()]


def write_json(path, settings, cases, summaries, elapsed_s):
    """Every round of every case, with the settings and the medians, for later comparison."""
    document = {
        "settings": dataclasses.asdict(settings),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "elapsed_s": round(elapsed_s, 1),
        "cases": [
            {
                "name": case.name,
                "label": case.label,
                "reference": case.reference,
                "versus": case.versus or None,
                "server": repr(case.server),
                "load": dataclasses.asdict(case.load),
                "goals": [dataclasses.asdict(goal) for goal in case.goals],
                "skipped": case.skipped or None,
                "rounds": case.results,
                "summary": summaries[case.name],
            }
            for case in cases
        ],
    }
    with open(path, "w") as f:
        json.dump(document, f, indent=1, ensure_ascii=False)
        f.write("\n")
