#!/usr/bin/env python3
"""Fails when a crate of the server, the CLI or the test harness re-exports a module.

A `pub use` whose path names a module of another workspace crate (or a glob of one), or a
module of its own crate under a second name, hides where that module lives: a reader (or a
tool) following the name loses the trail. Items (types, functions, constants) may be
re-exported. docs/architecture.md, "Crates and module map".

    python3 scripts/reexports.py            # exit 1 and list each re-export found
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = {
    "rebound_proto": "proto",
    "rebound_common": "server/common",
    "rebound_store": "server/store",
    "rebound_store_embedded": "server/store-embedded",
    "rebound_store_cassandra": "server/store-cassandra",
    "rebound_engine": "server/engine",
    "rebound_server": "server/node",
    "rebound_integration_tests": "integration-tests",
    "rebound_tools": "integration-tests/tools",
    "rebound_client": "client-sdk/rust",
    "rebound_cli": "cli",
}
# The crates checked (the Rust SDK's `proto` is part of its public API, kept by contract).
CHECKED = [
    "server/common",
    "server/store",
    "server/store-embedded",
    "server/store-cassandra",
    "server/engine",
    "server/node",
    "cli",
    "integration-tests",
    "integration-tests/tools",
]

PUB_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", re.S)


def expand(tree):
    """`a::{b, c::{d, e as f}}` -> ['a::b', 'a::c::d', 'a::c::e as f']."""
    tree = re.sub(r"\s+", " ", tree.strip())
    if "{" not in tree:
        return [tree]
    i = tree.index("{")
    prefix, inner = tree[:i], tree[i + 1 : tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        p = p.strip()
        if p:
            out.extend(expand(prefix + p))
    return out


def is_module(crate_dir, segments):
    src = ROOT / crate_dir / "src"
    if not segments:
        return True
    path = src.joinpath(*segments)
    return path.with_suffix(".rs").is_file() or (path / "mod.rs").is_file()


def findings():
    found = []
    for crate_dir in CHECKED:
        for f in sorted((ROOT / crate_dir).rglob("*.rs")):
            rel = f.relative_to(ROOT)
            if "target" in rel.parts or (crate_dir == "integration-tests" and "tools" in rel.parts):
                continue
            text = f.read_text()
            for m in PUB_USE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                for leaf in expand(m.group(1)):
                    path = leaf.split(" as ")[0].strip()
                    segs = [s for s in path.split("::") if s]
                    if not segs:
                        continue
                    head, rest = segs[0], segs[1:]
                    if head in CRATES:
                        target_dir = CRATES[head]
                        own = target_dir == crate_dir
                    elif head == "crate":
                        target_dir, own = crate_dir, True
                    else:
                        continue
                    if rest and rest[-1] == "*" and not own:
                        found.append(f"{rel}:{line}: pub use {leaf} (a glob of another crate)")
                    elif rest and rest[-1] == "self":
                        if is_module(target_dir, rest[:-1]):
                            found.append(f"{rel}:{line}: pub use {leaf} (a module)")
                    elif is_module(target_dir, rest) and not (own and " as " not in leaf and len(rest) == 0):
                        if own and " as " not in leaf:
                            # A module of its own crate under the same name elsewhere.
                            found.append(f"{rel}:{line}: pub use {leaf} (a module of this crate, a second path to it)")
                        else:
                            found.append(f"{rel}:{line}: pub use {leaf} (a module)")
    return found


def main():
    found = findings()
    for f in found:
        print(f)
    if found:
        print(
            f"reexports: {len(found)} re-export(s) of a module; name the module where it lives instead",
            file=sys.stderr,
        )
        return 1
    print("reexports: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
