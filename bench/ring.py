#!/usr/bin/env python3
"""The ring and the scan per node (`scripts/bench --ring`).

Reads target/bench/ring/ring-<nodes>-<slots>.json (one `bench ring` run each) and writes
target/bench/ring/ring.md and ring.png beside it:
- lease LWTs per second at rest against slots and nodes, with the expected
  (slots + 1) / (lease_ttl / 3);
- in each drain, every node's share of the Tier-3 reads, of the Tier-4/5 reads and of the
  deliveries (each node should read and deliver its share: 1/k).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def load(directory: Path) -> list[dict]:
    docs = [json.loads(p.read_text()) for p in sorted(directory.glob("ring-*.json"))]
    return sorted(docs, key=lambda d: (d["slots"], d["nodes"]))


def fmt(v, digits=0) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def main() -> int:
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench/ring")
    docs = load(directory)
    if not docs:
        print(f"no ring-*.json in {directory}", file=sys.stderr)
        return 1
    lines = [
        "# The ring and the scan per node",
        "",
        "## Lease LWTs per second at rest",
        "",
        "| slots | nodes | LWT/s measured | expected (slots + 1) / (ttl / 3) | LWT/s per node | settled after s |",
        "|--:|--:|--:|--:|--|--:|",
    ]
    for d in docs:
        per_node = " / ".join(fmt(n["lwt_per_sec"], 1) for n in d["at_rest"]["nodes"])
        lines.append(
            f"| {d['slots']:.0f} | {d['nodes']:.0f} | {fmt(d['at_rest']['lwt_per_sec'], 1)} | "
            f"{fmt(d['lwt_per_sec_expected'], 1)} | {per_node} | {fmt(d['settled_seconds'], 1)} |"
        )
    drains = [d for d in docs if d.get("drain")]
    if drains:
        lines += [
            "",
            "## Scan reads per node in a drain",
            "",
            "| nodes | slots | items | node | slots held | Tier-1/2 reads | Tier-3 reads (share) | Tier-4/5 reads (share) | state reads | deliveries (share) | seconds |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for d in drains:
            for n in d["drain"]["nodes"]:
                share = lambda k: "—" if n[k] is None else f"{n[k]:.2f}"  # noqa: E731
                lines.append(
                    f"| {d['nodes']:.0f} | {d['slots']:.0f} | {d['n']:,.0f} | {n['node']:.0f} | "
                    f"{n['slots_held']:.0f} | {fmt(n['tier12_reads'])} | "
                    f"{fmt(n['tier3_reads'])} ({share('tier3_share')}) | "
                    f"{fmt(n['tier45_reads'])} ({share('tier45_share')}) | {fmt(n['state_reads'])} | "
                    f"{fmt(n['deliveries'])} ({share('delivery_share')}) | {fmt(d['drain']['seconds'], 1)} |"
                )
    (directory / "ring.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no ring.png", file=sys.stderr)
        return 0
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    for slots in sorted({d["slots"] for d in docs}):
        row = [d for d in docs if d["slots"] == slots]
        k = [d["nodes"] for d in row]
        a1.plot(k, [d["at_rest"]["lwt_per_sec"] for d in row], "o-", label=f"{slots:.0f} slots")
        a1.plot(k, [d["lwt_per_sec_expected"] for d in row], ":", color="grey")
    a1.set_xlabel("nodes")
    a1.set_ylabel("lease LWTs per second (cluster)")
    a1.set_ylim(bottom=0)
    a1.legend()
    a1.set_title("Ring at rest (dotted: (slots + 1) / (ttl / 3))")
    for d in drains:
        k = int(d["nodes"])
        xs = [k + (i - (k - 1) / 2) * 0.12 for i in range(k)]
        a2.scatter(xs, [n["tier3_share"] or 0 for n in d["drain"]["nodes"]], marker="o", color="C0")
        a2.scatter(xs, [n["tier45_share"] or 0 for n in d["drain"]["nodes"]], marker="s", color="C1")
        a2.scatter(xs, [n["delivery_share"] or 0 for n in d["drain"]["nodes"]], marker="^", color="C2")
        a2.hlines(1 / k, k - 0.4, k + 0.4, colors="grey", linestyles=":")
    a2.scatter([], [], marker="o", color="C0", label="Tier-3 reads")
    a2.scatter([], [], marker="s", color="C1", label="Tier-4/5 reads")
    a2.scatter([], [], marker="^", color="C2", label="deliveries")
    a2.set_xlabel("nodes")
    a2.set_ylabel("each node's share (dotted: 1 / nodes)")
    a2.set_ylim(0, 1.05)
    a2.legend()
    a2.set_title("Scan reads and deliveries per node in a drain")
    fig.tight_layout()
    fig.savefig(directory / "ring.png", dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
