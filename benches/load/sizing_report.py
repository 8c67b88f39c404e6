"""The sizing script's table (sizing.py): one row per store and kind of request, per request."""


def _fmt(value, digits=1):
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _trips(result, kind):
    trips = result.get("round_trips", {}).get(kind)
    if trips is None:
        return "0", ""
    sent = sum(trips["sent"].values())
    detail = " ".join(f"{k.upper()}×{v:g}" for k, v in sorted(trips["sent"].items()))
    scripted = " ".join(f"{k.upper()}×{v:g}" for k, v in sorted(trips["in scripts"].items()))
    return f"{sent:g}", detail + (f" (scripts: {scripted})" if scripted else "")


def _held(result):
    if "file_bytes_per_record" in result:
        return result["file_bytes_per_record"]
    keyed = result["keyed"]
    if "store_used_memory" in keyed:
        return keyed["store_used_memory"]
    return keyed["proxy_rss_growth_bytes"]


ROWS = (("keyed", "keyed first", "keyed"), ("replay_cached", "replay, cached", None),
        ("replay_store", "replay, from store", "replay"))
HEADER = ("| store | request | req/s | proxy CPU µs | store CPU µs | round trips | bytes to store "
          "| bytes from store | disk bytes written (not the log) | fdatasync | log bytes | held per record |")


def print_table(results):
    """Per request; "held per record" on the keyed row (used_memory's growth, the resident
    set's for the memory store, the files' for the file store)."""
    print("\n" + HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for store, result in results.items():
        for window, label, trips_kind in ROWS:
            w = result[window]
            trips = _trips(result, trips_kind)[0] if trips_kind else "0"
            held = _fmt(_held(result), 0) if window == "keyed" else ""
            # Page-granular and counted when a page is first dirtied: a few bytes either way.
            disk = w["disk_write_bytes"] - w["log_bytes"]
            disk = 0.0 if abs(disk) < 1 else disk
            print(f"| {store} | {label} | {_fmt(w['req_per_s'], 0)} | {_fmt(w['proxy_cpu_us'])} "
                  f"| {_fmt(w.get('store_cpu_us'))} | {trips} "
                  f"| {_fmt(w.get('store_total_net_input_bytes'), 0)} "
                  f"| {_fmt(w.get('store_total_net_output_bytes'), 0)} | {_fmt(disk, 0)} "
                  f"| {w['syscalls'].get('fdatasync', 0):.3f} | {_fmt(w['log_bytes'], 0)} | {held} |")
    print("\nCommands per request (under MONITOR, one at a time):")
    for store, result in results.items():
        for kind in ("keyed", "replay"):
            count, detail = _trips(result, kind)
            if detail:
                print(f"  {store} {kind}: {count} round trips: {detail}")
