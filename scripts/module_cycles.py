#!/usr/bin/env python3
"""Import circles between the modules of a Rust crate (scripts/test runs it on server/node/src).

    scripts/module_cycles.py [--edges] [--max-top N] DIR

Reads every .rs file under DIR (the crate's src), takes each module's `crate::` and `super::`
paths (outside `#[cfg(test)]`), and finds the strongly connected components of the module
graph cut at depth 1 (top-level modules), 2 and 3. Exit 1 when a component exists at depth 2
or 3 (a circle inside a module tree), or when the depth-1 component has more than N modules
(--max-top; the top-level circle that the crate split is to cut, which must not grow).
--edges prints the depth-1 edges. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys


def modules(root: str) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.relpath(os.path.join(d, f), root)
            parts = p[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                out["::".join(parts)] = fh.read()
    return out


PATH = r"[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*"


def deps(name: str, src: str) -> set[str]:
    src = src.split("#[cfg(test)]")[0]
    parent = name.split("::")[:-1]
    out = set()
    for m in re.finditer(rf"crate::({PATH})", src):
        out.add(m.group(1))
    for m in re.finditer(rf"\bsuper::({PATH})", src):
        out.add("::".join(parent + m.group(1).split("::")))
    for m in re.finditer(r"\bsuper::\{([^}]*)\}", src, re.S):
        for x in re.split(r",\s*", m.group(1)):
            mm = re.match(rf"\s*({PATH})", x)
            if mm:
                out.add("::".join(parent + mm.group(1).split("::")))
    for m in re.finditer(r"crate::\{((?:[^{}]|\{[^{}]*\})*)\}", src, re.S):
        for x in re.split(r",\s*(?![^{]*\})", m.group(1)):
            mm = re.match(rf"\s*({PATH})", x)
            if mm:
                out.add(mm.group(1))
    return out


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--max-top", type=int, default=None)
    a = ap.parse_args()
    sys.setrecursionlimit(10000)
    mods = modules(a.dir)

    def resolve(d: str) -> str | None:
        ps = d.split("::")
        for i in range(len(ps), 0, -1):
            c = "::".join(ps[:i])
            if c in mods:
                return c
        return None

    graph: dict[str, set[str]] = {}
    for n, s in mods.items():
        graph[n] = set()
        for d in deps(n, s):
            r = resolve(d)
            if r and r != n and not n.startswith(r + "::"):
                graph[n].add(r)
    bad = False
    for depth in (1, 2, 3):
        cut: dict[str, set[str]] = {}
        for n, ds in graph.items():
            for d in ds:
                x, y = "::".join(n.split("::")[:depth]), "::".join(d.split("::")[:depth])
                if x != y and not x.startswith(y + "::") and not y.startswith(x + "::"):
                    cut.setdefault(x, set()).add(y)
        comps = components(cut)
        print(f"depth {depth}: {comps if comps else 'no circle'}")
        if depth > 1 and comps:
            bad = True
        if depth == 1 and a.max_top is not None and any(len(c) > a.max_top for c in comps):
            print(f"the top-level circle grew past {a.max_top} modules", file=sys.stderr)
            bad = True
        if depth == 1 and a.edges:
            for x in sorted(cut):
                print(f"  {x} -> {', '.join(sorted(cut[x]))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
