#!/usr/bin/env python3
"""Fails when a handler of the node reaches the store.

The node (server/node) is transport: its handlers decode, call the engine, and encode. Only
its wiring opens and hands over the store: `src/node/` (opening the store, migrating it,
building the engine on it), `src/config/` (the store's settings) and `src/main.rs` (the
`migrate` command). Every other file of
`server/node/src` may use the storage crate's value types (a `TxState` answered by the
engine, the clock), but may not name a store trait, a store implementation, or the
directory walk, nor call a method on a `store`. docs/architecture.md, "Crates and module map".

    python3 scripts/node_boundary.py        # exit 1 and list each use found
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "server/node/src"
WIRING = [SRC / "node", SRC / "main.rs", SRC / "config"]
TRAITS = (
    "RetryStore|StateStore|DirectoryStore|ScheduleStore|ServiceStore|LeaseStore|"
    "DeadLetterStore|HoldStore|MigrationStore|StoreLifecycle|DispatchStore"
)
PATTERNS = [
    (re.compile(rf"\b({TRAITS})\b"), "names a store trait"),
    (re.compile(r"\brebound_store_(cassandra|embedded)\b"), "names a store implementation"),
    (re.compile(r"\bWalk\b"), "walks the directory"),
    (re.compile(r"\.store(\(\))?\s*\.\s*[a-z_]+\s*\("), "calls the store"),
]


def wiring(path: pathlib.Path) -> bool:
    return any(path == w or w in path.parents for w in WIRING)


def main() -> int:
    found = []
    for path in sorted(SRC.rglob("*.rs")):
        if wiring(path):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            for pattern, what in PATTERNS:
                if pattern.search(code):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()}")
    for f in found:
        print(f)
    if found:
        print(f"node_boundary: {len(found)} use(s) of the store outside the node's wiring")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
