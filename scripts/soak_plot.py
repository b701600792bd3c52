#!/usr/bin/env python3
"""Draw the samples of one soak run (scripts/soak) as PNGs in its directory.

Reads DIR/samples.csv (and DIR/run.json for the fault periods and the lateness limit) and
writes DIR/soak.png, one panel per series, and DIR/<series>.png, one file per series: RSS,
open files, threads and live tasks per node, subscribers, pending, lateness p99 of each
interval, deliveries per interval, Cassandra's SSTables of the keyspace and its tombstone
warnings.
Fault periods (from a fault until the recovery after it) are shaded; the end of the load and
the reference of the growth criteria are dashed lines.

Run it through scripts/soak-plot, which sets up matplotlib in a venv.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

# (file stem, title, column or per-node column suffix, per node)
SERIES = [
    ("rss", "RSS (MB)", "rss_mb", True),
    ("fds", "open files", "fds", True),
    ("threads", "threads", "threads", True),
    ("tasks", "live tasks (rebound_tasks)", "tasks", True),
    ("subscribers", "subscribers (all nodes)", "subscribers", False),
    ("pending", "pending (rebound_pending, compactor node)", "pending", False),
    ("lateness", "lateness p99 of the interval (s)", "lateness_p99_s", False),
    ("deliveries", "deliveries per interval", "deliveries", False),
    ("sstables", "SSTables of the keyspace", "sstables", False),
    ("tombstones", "tombstone warnings (cumulative)", "tombstone_warnings", False),
]


def num(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def load(run_dir: Path) -> tuple[list[dict], dict]:
    with open(run_dir / "samples.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    meta_file = run_dir / "run.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    return rows, meta


def node_count(rows: list[dict]) -> int:
    n = 0
    while rows and f"n{n + 1}_pid" in rows[0]:
        n += 1
    return n


def draw(ax, rows: list[dict], meta: dict, title: str, column: str, per_node: bool) -> None:
    t = [num(r["t_s"]) for r in rows]
    if per_node:
        for i in range(1, node_count(rows) + 1):
            ys = [num(r[f"n{i}_{column}"]) for r in rows]
            ax.plot(t, ys, marker=".", linewidth=1, label=f"n{i}")
        ax.legend(loc="upper left", fontsize="small")
    else:
        ax.plot(t, [num(r[column]) for r in rows], marker=".", linewidth=1)
    recovery = meta.get("recovery_s", 0)
    for i, f in enumerate(meta.get("faults", [])):
        ax.axvspan(
            f["start_s"],
            f["end_s"] + recovery,
            color="tab:red",
            alpha=0.12,
            label="fault period" if i == 0 and not per_node else None,
        )
    if "load_end_s" in meta:
        ax.axvline(meta["load_end_s"], color="grey", linestyle="--", linewidth=0.8)
    if per_node and column in ("rss_mb", "fds") and "reference_s" in meta:
        ax.axvline(meta["reference_s"], color="tab:green", linestyle=":", linewidth=0.8)
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel("s from the start of the load")
    ax.set_ylim(bottom=0)
    if column == "lateness_p99_s" and "lateness_limit_s" in meta:
        limit = meta["lateness_limit_s"]
        ax.axhline(limit, color="tab:red", linestyle="--", linewidth=0.8)
        ax.set_ylim(top=max(ax.get_ylim()[1], limit * 1.15))
    ax.grid(alpha=0.3)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: soak_plot.py RUN_DIR (a directory scripts/soak wrote)", file=sys.stderr)
        return 2
    run_dir = Path(sys.argv[1])
    rows, meta = load(run_dir)
    if not rows:
        print(f"no samples in {run_dir / 'samples.csv'}", file=sys.stderr)
        return 1
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    lines = (len(SERIES) + cols - 1) // cols
    fig, axes = plt.subplots(lines, cols, figsize=(6 * cols, 3.6 * lines), squeeze=False)
    for ax, (_, title, column, per_node) in zip(axes.flat, SERIES):
        draw(ax, rows, meta, title, column, per_node)
    for ax in list(axes.flat)[len(SERIES) :]:
        ax.axis("off")
    verdict = "passed" if meta.get("passed") else "FAILED" if meta else ""
    fig.suptitle(
        f"soak, seed {meta.get('seed', '?')}: {meta.get('minutes', '?')} min at "
        f"{meta.get('rate', '?')} operations/s, faults: {len(meta.get('faults', []))}; {verdict}"
    )
    fig.tight_layout()
    out = run_dir / "soak.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    written = [out]
    for stem, title, column, per_node in SERIES:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        draw(ax, rows, meta, title, column, per_node)
        fig.tight_layout()
        path = run_dir / f"{stem}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    print("\n".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
