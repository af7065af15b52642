#!/usr/bin/env python3
"""Figures of the package layout: modules per folder, package-level import edges, cycles, floors.

    .venv/bin/python scripts/layout_figures.py            # this tree
    .venv/bin/python scripts/layout_figures.py /some/tree # another checkout (e.g. a worktree of an old commit)

A package is a folder with an `__init__.py` under runfacts/, schemas/, processors/,
projections/ or connectors/, named as installed (schemas/ is runfacts.schemas). An edge
A -> B means a module of A imports a module of B (parsed with `ast`, imports inside functions
included: a lazy import is still a dependency). A cycle is a strongly connected set of more
than one package; floors are the longest chain of the acyclic condensation.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

# runfacts/workers.py is a floor of its own (the composition roots, above processors, projections
# and connectors), not part of the runfacts foundation it sits beside.
OWN_FLOOR = {"runfacts.workers"}
ROOTS = {"runfacts": "runfacts", "schemas": "runfacts.schemas", "processors": "runfacts.processors",
         "projections": "runfacts.projections", "connectors": "runfacts.connectors"}


def modules(tree: Path) -> dict[str, tuple[str, Path]]:
    """dotted module name -> (its package, its file)."""
    found: dict[str, tuple[str, Path]] = {}
    for root, dotted in ROOTS.items():
        for path in sorted((tree / root).rglob("*.py")):
            rel = path.relative_to(tree / root).with_suffix("").parts
            if not (path.parent / "__init__.py").exists() or "__pycache__" in rel:
                continue
            parts = dotted.split(".") + list(rel)
            if parts[-1] == "__init__":
                parts = parts[:-1]
                package = ".".join(parts)
            else:
                package = ".".join(parts[:-1])
            name = ".".join(parts)
            found[name] = (name if name in OWN_FLOOR else package, path)
    return found


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def package_graph(tree: Path) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    mods = modules(tree)
    members: dict[str, list[str]] = defaultdict(list)
    for name, (package, path) in mods.items():
        if path.name != "__init__.py":
            members[package].append(name)
        else:
            members.setdefault(package, [])
    edges: dict[str, set[str]] = defaultdict(set)
    for _name, (package, path) in mods.items():
        for imported in imports(path):
            if imported in mods:
                target = mods[imported][0]
                if target != package:
                    edges[package].add(target)
    return members, edges


def cycles(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def floors(nodes: list[str], edges: dict[str, set[str]], sccs: list[list[str]]) -> int:
    comp = {v: v for v in nodes}
    for c in sccs:
        for v in c:
            comp[v] = c[0]
    dag: dict[str, set[str]] = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if comp[a] != comp[b]:
                dag[comp[a]].add(comp[b])
    depth: dict[str, int] = {}

    def d(v: str) -> int:
        if v not in depth:
            depth[v] = 1 + max((d(w) for w in dag.get(v, ())), default=0)
        return depth[v]

    return max((d(comp[v]) for v in nodes), default=0)


def main() -> None:
    tree = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    members, edges = package_graph(tree)
    nodes = sorted(members)
    sccs = cycles(nodes, edges)
    total = sum(len(m) for m in members.values())
    print(f"{total} modules in {len(nodes)} packages (not counting __init__.py)")
    print("\nmodules per package:")
    for p in nodes:
        print(f"  {len(members[p]):3d}  {p}")
    n_edges = sum(len(v) for v in edges.values())
    print(f"\npackage-level edges: {n_edges}")
    for a in nodes:
        if edges.get(a):
            print(f"  {a} -> {', '.join(sorted(edges[a]))}")
    print(f"\ncycles: {len(sccs)}")
    for c in sccs:
        print("  " + " <-> ".join(c))
    print(f"floors (longest chain of packages): {floors(nodes, edges, sccs)}")
    print(f"largest package: {max(len(m) for m in members.values())} modules")


if __name__ == "__main__":
    main()
