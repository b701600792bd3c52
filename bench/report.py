#!/usr/bin/env python3
"""Collect the benchmark results of every system into one table, one JSON list and one chart.

Reads every target/bench/*.json written in the suite's shared shape (bench/README.md) by the
Rust benchmarks (rebound, cassandra-raw, cassandra-naive) and the baselines (river, bullmq,
...), and writes:

  target/bench/results.json  a list of every result (each with "source_file" added)
  target/bench/results.md    one markdown table, the machine, versions and ratios
  target/bench/results.png   throughput (enqueue single, batch, drain) and lateness p50/p99

Fields may be missing or null in any result: they show as "—" and are left out of the chart.
Run it through bench/report, which sets up matplotlib in a venv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path

OUTPUTS = {"results.json", "results.md", "results.png"}
ORDER = ["rebound", "rebound-60s", "rebound-push", "cassandra-raw", "cassandra-naive", "river", "river-tuned",
         "bullmq", "temporal"]
DASH = "—"
# (numerator, denominator) pairs printed when both systems are present.
RATIO_PAIRS = [
    ("rebound", "cassandra-raw"),
    ("rebound", "river"),
    ("rebound", "river-tuned"),
    ("rebound", "bullmq"),
    ("rebound", "temporal"),
]
RATIO_METRICS = [
    ("enqueue single ops/s", "enqueue_single.ops_per_sec"),
    ("enqueue batch ops/s", "enqueue_batch.ops_per_sec"),
    ("drain acked/s", "drain.acked_per_sec"),
]


def get(doc: dict, dotted: str):
    """The number or value at a dotted path, or None when any part is missing or null."""
    cur = doc
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def num(doc: dict, dotted: str) -> float | None:
    v = get(doc, dotted)
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt_int(v: float | None) -> str:
    return DASH if v is None else f"{v:,.0f}"


def fmt_ms(v: float | None) -> str:
    if v is None:
        return DASH
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_text(v) -> str:
    if v is None or v == "":
        return DASH
    return str(v).replace("|", "\\|").replace("\n", " ")


def fmt_bool(v) -> str:
    if v is True:
        return "yes"
    if v is False:
        return "no"
    return DASH


def sort_key(doc: dict):
    s = str(doc.get("system") or "")
    return (ORDER.index(s) if s in ORDER else len(ORDER), s, doc.get("source_file", ""))


def load(directory: Path) -> list[dict]:
    docs = []
    for path in sorted(directory.glob("*.json")):
        if path.name in OUTPUTS:
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"report: skipping {path}: {e}", file=sys.stderr)
            continue
        if not isinstance(doc, dict) or not doc.get("system"):
            print(f"report: skipping {path}: not a result object with a \"system\"", file=sys.stderr)
            continue
        doc["source_file"] = path.name
        docs.append(doc)
    docs.sort(key=sort_key)
    return docs


def machine_line() -> str:
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        nproc = str(os.cpu_count() or DASH)
    ram = DASH
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    cpu = DASH
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"Machine: nproc {nproc}, RAM {ram}, CPU {cpu}; report written {date}."


def ratio_lines(docs: list[dict]) -> list[str]:
    by_system: dict[str, dict] = {}
    for d in docs:  # the last file of a system wins (files are sorted by name within a system)
        by_system[str(d["system"])] = d
    lines = []
    for a, b in RATIO_PAIRS:
        if a not in by_system or b not in by_system:
            continue
        parts = []
        for label, path in RATIO_METRICS:
            x, y = num(by_system[a], path), num(by_system[b], path)
            r = f"{x / y:.2f}×" if x is not None and y not in (None, 0) else DASH
            parts.append(f"{label} {r}")
        lines.append(f"{a}/{b}: " + ", ".join(parts))
    # The enqueue target of issue 6: Rebound's enqueue (batched, as its API allows) against
    # one raw single-row INSERT per item, the write path's ceiling without batching.
    if "rebound" in by_system and "cassandra-raw" in by_system:
        x = num(by_system["rebound"], "enqueue_batch.ops_per_sec")
        y = num(by_system["cassandra-raw"], "enqueue_single.ops_per_sec")
        if x is not None and y not in (None, 0):
            lines.append(
                f"rebound batch enqueue / cassandra-raw single-row inserts: {x / y:.2f}× "
                "(issue 6's enqueue target is at least 1×)"
            )
    return lines


COST_PHASES = [
    ("enqueue_single", "single enqueue"),
    ("enqueue_batch", "batch enqueue"),
    ("delivery_cycle", "delivery cycle (feed, deliver, ack)"),
    ("steady", "steady phase (enqueue, wait, deliver, ack)"),
]


def server_cpu(c: dict):
    """Everything but the client: `server_cpu_us` when given, else Cassandra + node."""
    v = c.get("server_cpu_us")
    if v is not None:
        return v
    parts = [c.get("cassandra_cpu_us"), c.get("node_cpu_us")]
    return sum(parts) if all(p is not None for p in parts) else None


def total_cpu(c: dict):
    """The whole system's CPU per item: `total_cpu_us` when given, else server + client."""
    v = c.get("total_cpu_us")
    if v is not None:
        return v
    server, client = server_cpu(c), c.get("client_cpu_us")
    return server + client if server is not None and client is not None else None


def cost_lines(docs: list[dict]) -> list[str]:
    """The `cost_per_item` phases of every system that reports them."""
    rows = []
    for d in docs:
        for key, label in COST_PHASES:
            c = get(d, f"cost_per_item.{key}")
            if not isinstance(c, dict):
                continue
            requests = c.get("cassandra_requests")
            if requests is None and d.get("system") == "cassandra-raw":
                requests = 1.0 if key == "enqueue_single" else 1 / 500
            node = c.get("node_cpu_us", c.get("temporal_server_cpu_us"))
            rows.append(
                f"| {fmt_text(d.get('system'))} | {label} | {fmt_ms(c.get('cassandra_cpu_us'))} | "
                f"{fmt_ms(node)} | {fmt_ms(server_cpu(c))} | {fmt_ms(c.get('client_cpu_us'))} | "
                f"{fmt_ms(total_cpu(c))} | {DASH if requests is None else f'{requests:.3f}'} |"
            )
    if not rows:
        return []
    return [
        "| system | phase | Cassandra CPU µs | node (Temporal: server) CPU µs | server side µs | "
        "client CPU µs | whole system µs | Cassandra requests |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
        *rows,
    ]


def markdown(docs: list[dict]) -> str:
    header = [
        "system",
        "guarantees",
        "n",
        "enqueue single ops/s",
        "p50 ms",
        "p99 ms",
        "batch ops/s",
        "drain acked/s",
        "CPU µs per delivered item (whole system)",
        "drain lateness p50 ms",
        "p99 ms",
        "max ms",
        "steady lateness p50 ms",
        "p99 ms",
        "max ms",
        "early",
        "retry ok",
        "peak RSS MB",
        "tombstone warnings / failures",
    ]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 2 + ["--:"] * (len(header) - 2)) + "|"]
    for d in docs:
        row = [
            fmt_text(d.get("system")),
            fmt_text(d.get("guarantees")),
            fmt_int(num(d, "n")),
            fmt_int(num(d, "enqueue_single.ops_per_sec")),
            fmt_ms(num(d, "enqueue_single.p50_ms")),
            fmt_ms(num(d, "enqueue_single.p99_ms")),
            fmt_int(num(d, "enqueue_batch.ops_per_sec")),
            fmt_int(num(d, "drain.acked_per_sec")),
            fmt_ms(total_cpu(get(d, "cost_per_item.delivery_cycle") or {})),
            fmt_ms(num(d, "lateness_ms.p50")),
            fmt_ms(num(d, "lateness_ms.p99")),
            fmt_ms(num(d, "lateness_ms.max")),
            fmt_ms(num(d, "steady.lateness_ms.p50")),
            fmt_ms(num(d, "steady.lateness_ms.p99")),
            fmt_ms(num(d, "steady.lateness_ms.max")),
            fmt_int(num(d, "steady.early")),
            fmt_bool(d.get("retry_ok")),
            fmt_int(num(d, "peak_rss_mb")),
            (DASH if d.get("tombstone_warnings") is None else
             f"{fmt_int(num(d, 'tombstone_warnings'))} / {fmt_int(num(d, 'tombstone_failures'))}"),
        ]
        out.append("| " + " | ".join(row) + " |")

    text = ["# Benchmark results", "", machine_line(), "", *out, ""]
    notes = []
    for d in docs:
        bits = []
        if d.get("version"):
            bits.append(f"version {fmt_text(d['version'])}")
        conc = num(d, "enqueue_single.concurrency")
        batch = num(d, "enqueue_batch.batch")
        if conc is not None or batch is not None:
            bits.append(f"single at concurrency {fmt_int(conc)}, batches of {fmt_int(batch)}")
        if d.get("peak_rss_method"):
            bits.append(f"peak RSS: {fmt_text(d['peak_rss_method'])}")
        if d.get("poll_ms") is not None:
            bits.append(
                f"poll latency first/last 10 polls {fmt_ms(num(d, 'poll_ms.first10_mean'))}/"
                f"{fmt_ms(num(d, 'poll_ms.last10_mean'))} ms, max {fmt_ms(num(d, 'poll_ms.max'))} ms"
            )
        if d.get("aborted"):
            bits.append(f"drain aborted: {fmt_text(d['aborted'])[:160]}")
        if d.get("compaction_s_after_drain") is not None:
            bits.append(f"directory compacted {fmt_ms(num(d, 'compaction_s_after_drain'))} s after the drain")
        n, secs, floor = num(d, "drain.n"), num(d, "drain.seconds"), num(d, "drain.w1_floor_s")
        if None not in (n, secs, floor):
            bit = (f"drain took {fmt_ms(secs)} s; the window of its retries was readable "
                   f"{fmt_ms(floor)} s after T (its end plus the margin)")
            by_floor = num(d, "drain.acked_at_w1_floor")
            if by_floor is not None and by_floor >= n:
                bit += f"; all {fmt_int(n)} were acked by then, from the timer's memory"
            elif by_floor is not None:
                bit += (f"; {fmt_int(by_floor)} were acked by then (from the timer's memory), "
                        f"the rest at {fmt_int((n - by_floor) / max(secs - floor, 0.001))}/s")
            bits.append(bit)
        if get(d, "steady") is not None:
            bits.append(
                f"steady phase: {fmt_int(num(d, 'steady.rate_offered'))}/s offered for "
                f"{fmt_int(num(d, 'steady.seconds'))} s, delays 1-5 s, "
                f"{fmt_int(num(d, 'steady.delivered'))} of {fmt_int(num(d, 'steady.n'))} delivered"
            )
        if isinstance(d.get("config"), dict) and d["config"].get("window_seconds") is not None:
            bits.append(
                f"window {fmt_int(num(d, 'config.window_seconds'))} s, "
                f"skew margin {fmt_int(num(d, 'config.skew_margin_ms'))} ms"
            )
        if d.get("hold_rss_mb") is not None:
            bits.append(f"RSS holding the backlog {fmt_int(num(d, 'hold_rss_mb'))} MB")
        if d.get("wall_seconds") is not None:
            bits.append(f"wall {fmt_ms(num(d, 'wall_seconds'))} s")
        notes.append(f"- **{fmt_text(d.get('system'))}** ({d.get('source_file')}): " + ("; ".join(bits) or DASH))
    if notes:
        text += ["Per system:", "", *notes, ""]
    costs = cost_lines(docs)
    if costs:
        text += [
            "Cost per item (CPU µs from /proc over each phase; Cassandra requests counted by "
            "Rebound's own store metrics, one per request for the raw inserts):",
            "",
            *costs,
            "",
        ]
    ratios = ratio_lines(docs)
    if ratios:
        text += ["Ratios (higher is better for Rebound):", "", *[f"- {r}" for r in ratios], ""]
    text += [
        "Lateness is the time a job started executing minus the time it was due; drain is completed "
        "(acknowledged) jobs per second from the due time to the last completion. The drain's jobs all "
        "fall due at one instant; the steady phase offers single inserts at a fixed rate, each due 1-5 s "
        "after it is sent, so its lateness measures the timer rather than the drain (early: jobs started "
        "before their due time).",
        "",
    ]
    return "\n".join(text)


def mark_missing(ax, x, all_series, w) -> None:
    """Write "—" at the foot of each bar that has no value."""
    import matplotlib.transforms as mtransforms

    trans = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    k = len(all_series)
    for i, vals in enumerate(all_series):
        for xi, v in zip(x, vals):
            if v != v:
                ax.text(xi + (i - (k - 1) / 2) * w, 0.01, DASH, transform=trans, ha="center", va="bottom", fontsize=8, color="gray")


def chart(docs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [str(d["system"]) for d in docs]
    # Two files of one system get their file name appended so the bars stay apart.
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    labels = [f"{lab}\n({d['source_file']})" if seen[lab] > 1 else lab for lab, d in zip(labels, docs)]

    nan = float("nan")

    def series(p: str) -> list[float]:
        return [v if (v := num(d, p)) is not None else nan for d in docs]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(min(20, max(12, 3.2 * len(docs))), 6))
    x = np.arange(len(docs))

    thr = [
        ("enqueue single", series("enqueue_single.ops_per_sec")),
        ("enqueue batch", series("enqueue_batch.ops_per_sec")),
        ("drain (acked)", series("drain.acked_per_sec")),
    ]
    w = 0.8 / len(thr)
    finite = [v for _, s in thr for v in s if v == v and v > 0]
    for i, (name, vals) in enumerate(thr):
        bars = ax1.bar(x + (i - (len(thr) - 1) / 2) * w, vals, w, label=name)
        ax1.bar_label(bars, labels=[DASH if v != v else f"{v:,.0f}" for v in vals], fontsize=7, rotation=90, padding=2)
    if finite and max(finite) / min(finite) > 20:
        ax1.set_yscale("log")
        ax1.set_ylabel("jobs per second (log scale)")
    else:
        ax1.set_ylabel("jobs per second")
    if finite:
        lo, hi = ax1.get_ylim()
        ax1.set_ylim(lo, hi * (3 if ax1.get_yscale() == "log" else 1.15))
    mark_missing(ax1, x, [s for _, s in thr], 0.8 / len(thr))
    ax1.set_title("Throughput")
    ax1.set_xticks(x, labels, fontsize=8)
    ax1.legend(fontsize=8, loc="upper left")

    lat = [
        ("drain p50", series("lateness_ms.p50")),
        ("drain p99", series("lateness_ms.p99")),
        ("steady p50", series("steady.lateness_ms.p50")),
        ("steady p99", series("steady.lateness_ms.p99")),
    ]
    w = 0.8 / len(lat)
    for i, (name, vals) in enumerate(lat):
        bars = ax2.bar(x + (i - (len(lat) - 1) / 2) * w, vals, w, label=f"lateness {name}")
        ax2.bar_label(bars, labels=[DASH if v != v else f"{v:,.0f}" for v in vals], fontsize=7, padding=2)
    mark_missing(ax2, x, [s for _, s in lat], 0.8 / len(lat))
    positive = [v for _, s in lat for v in s if v == v and v > 0]
    log_lat = bool(positive) and max(positive) / min(positive) > 100
    if log_lat:
        ax2.set_yscale("log")
    ax2.set_ylabel("milliseconds after the due time" + (" (log scale)" if log_lat else ""))
    ax2.set_title("Lateness of delayed jobs")
    ax2.set_xticks(x, labels, fontsize=8)
    ax2.legend(fontsize=8, loc="upper left")
    lo, hi = ax2.get_ylim()
    if log_lat:
        ax2.set_ylim(lo, hi * 3)
    else:
        ax2.set_ylim(0, hi * 1.1 if hi > 0 else 1)

    fig.suptitle(machine_line(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=root / "target" / "bench", help="where the result files are")
    ap.add_argument("--no-chart", action="store_true", help="skip results.png (no matplotlib needed)")
    args = ap.parse_args()

    directory: Path = args.dir
    directory.mkdir(parents=True, exist_ok=True)
    docs = load(directory)
    if not docs:
        print(f"report: no result files in {directory}", file=sys.stderr)

    (directory / "results.json").write_text(json.dumps(docs, indent=2) + "\n")
    md = markdown(docs)
    (directory / "results.md").write_text(md)
    if not args.no_chart and docs:
        chart(docs, directory / "results.png")

    print(md)  # the ratios are in it
    written = ["results.json", "results.md"] + (["results.png"] if not args.no_chart and docs else [])
    print(f"report: wrote {', '.join(str(directory / w) for w in written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
