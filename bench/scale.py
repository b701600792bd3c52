#!/usr/bin/env python3
"""The cost of Rebound's work as the backlog grows (`scripts/bench --scale`).

Reads target/bench/scale/rebound-<n>.json (one `bench rebound` run per backlog size) and
writes target/bench/scale/scale.md (drain rate and cost per delivery against the backlog) and
scale.png beside it. Flat is the goal: a delivery should cost the same at 10k and at 1M.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(directory: Path) -> list[dict]:
    docs = []
    for p in sorted(directory.glob("rebound-*.json")):
        d = json.loads(p.read_text())
        cycle = (d.get("cost_per_item") or {}).get("delivery_cycle") or {}
        batch = (d.get("cost_per_item") or {}).get("enqueue_batch") or {}
        docs.append(
            {
                "n": int(d["n"]),
                "drain": d["drain"]["acked_per_sec"],
                "batch": d["enqueue_batch"]["ops_per_sec"],
                "cassandra_us": cycle.get("cassandra_cpu_us"),
                "node_us": cycle.get("node_cpu_us"),
                "requests": cycle.get("cassandra_requests"),
                "batch_cassandra_us": batch.get("cassandra_cpu_us"),
                "rss": d.get("peak_rss_mb"),
            }
        )
    return sorted(docs, key=lambda r: r["n"])


def fmt(v, digits=0) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def main() -> int:
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench/scale")
    docs = rows(directory)
    if not docs:
        print(f"no rebound-*.json in {directory}", file=sys.stderr)
        return 1
    lines = [
        "# Rebound as the backlog grows",
        "",
        "| backlog | batch enqueue/s | drain acked/s | Cassandra CPU µs per delivery | node CPU µs per delivery | Cassandra requests per delivery | Cassandra CPU µs per batch enqueue | peak RSS MB |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in docs:
        lines.append(
            f"| {r['n']:,} | {fmt(r['batch'])} | {fmt(r['drain'])} | {fmt(r['cassandra_us'])} | "
            f"{fmt(r['node_us'])} | {fmt(r['requests'], 3)} | {fmt(r['batch_cassandra_us'])} | {fmt(r['rss'])} |"
        )
    (directory / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no scale.png", file=sys.stderr)
        return 0
    n = [r["n"] for r in docs]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    a1.plot(n, [r["drain"] for r in docs], "o-", label="drain acked/s")
    a1.plot(n, [r["batch"] for r in docs], "s-", label="batch enqueue/s")
    a1.set_xscale("log")
    a1.set_xlabel("backlog (items)")
    a1.set_ylabel("items per second")
    a1.set_ylim(bottom=0)
    a1.legend()
    a1.set_title("Rate against backlog")
    a2.plot(n, [r["cassandra_us"] or 0 for r in docs], "o-", label="Cassandra CPU µs")
    a2.plot(n, [r["node_us"] or 0 for r in docs], "s-", label="node CPU µs")
    a2.set_xscale("log")
    a2.set_xlabel("backlog (items)")
    a2.set_ylabel("CPU µs per delivery")
    a2.set_ylim(bottom=0)
    a2.legend()
    a2.set_title("Cost per delivery against backlog")
    fig.tight_layout()
    fig.savefig(directory / "scale.png", dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
