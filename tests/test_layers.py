"""The import graph: packages import only down the layers, and no modules import each other in a circle.

Run ``python tests/test_layers.py`` to print the package graph and any violation.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rlsched"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("rlsched", "errors", "resources", "bounds", "argtypes", "plotstyle", "atomic"),
    ("sim", "projection"),
    ("telemetry", "profiling", "parallel", "loadgen", "policies", "routing"),
    ("learned", "run", "evaluation", "planning"),
    ("envs", "integrations", "gymnasium_plugin"),
    ("agents",),
    ("bench",),
    ("commands",),
    ("cli", "__main__"),
)
"""Lowest first: a package may import its own layer's packages and any lower one, never a higher one."""
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, top_level_only: bool) -> set[str]:
    """The rlsched modules ``path`` imports (every import, or only those run at import time);
    ``from pkg import submodule`` counts as the submodule."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    known = modules()
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlsched"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & known.keys()
            found.update(subs if len(subs) == len(node.names) else {node.module, *subs})
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rlsched"))
    return found


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def climbing_arrows() -> list[str]:
    out = []
    for mod, path in sorted(modules().items()):
        for target in sorted(imports(path, top_level_only=False)):
            src, dst = package(mod), package(target)
            if LEVEL[dst] > LEVEL[src]:
                out.append(f"{mod} -> {target} ({src} is below {dst})")
    return out


def circles() -> list[list[str]]:
    """Strongly connected components (> 1 module) of the graph of every import: deferred ones and those
    under ``TYPE_CHECKING`` included (Tarjan). A circle is a definition in the wrong room, whenever it runs."""
    mods = modules()
    graph = {m: sorted(t for t in imports(p, top_level_only=False) if t in mods and t != m) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return found


def test_every_package_has_a_layer() -> None:
    assert {package(m) for m in modules()} <= set(LEVEL), {package(m) for m in modules()} - set(LEVEL)


def test_no_import_climbs_a_layer() -> None:
    assert climbing_arrows() == []


def test_agents_and_envs_run_without_the_evaluation_package() -> None:
    # one run (rlsched.run) is what training, tuning and the envs need; the grid and its report are not
    found = [f"{mod} -> {t}" for mod, path in sorted(modules().items()) if package(mod) in ("agents", "envs")
             for t in sorted(imports(path, top_level_only=False)) if package(t) == "evaluation"]
    assert found == []


def test_no_import_circles() -> None:
    assert circles() == []


if __name__ == "__main__":
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in modules().items():
        for target in imports(path, top_level_only=False):
            if package(target) != package(mod):
                edges[package(mod)].add(package(target))
    for src in sorted(edges, key=LEVEL.__getitem__):
        print(f"{src:>12} -> {', '.join(sorted(edges[src], key=LEVEL.__getitem__))}")
    print("climbing arrows:", climbing_arrows() or "none")
    print("circles:", circles() or "none")
