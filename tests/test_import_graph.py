"""Imports in ``llmpipe.curate`` run one way: the driver -> steps -> stages -> the stage contract ->
executors and the work directory, never back (executors decide where a step runs, never what it
does). Every import counts, also those inside functions: a cycle there is a cycle too."""

from __future__ import annotations

import ast
from pathlib import Path

import llmpipe

PACKAGE = Path(llmpipe.__file__).parent


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports (``from pkg import submodule``: the submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            base = node.module
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join([*here[: len(here) - node.level + 1], node.module])
            subs = {f"{base}.{a.name}" for a in node.names} & mods.keys()
            found |= subs
            if len(subs) < len(node.names):
                found.add(base)
    out = set()
    for target in found:
        while target and target not in mods:  # an attribute or a module outside: its nearest module
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_curate_imports_have_no_cycle() -> None:
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    assert "llmpipe.curate.steps" in graph["llmpipe.curate.pipeline"]  # the graph sees imports
    cycles = [c for c in _cycles(graph) if any(m.startswith("llmpipe.curate") for m in c)]
    assert cycles == []


def test_executors_know_no_step() -> None:
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    assert {m for m in graph["llmpipe.curate.executors"] if m.startswith("llmpipe.")} <= {
        "llmpipe.curate.workdir",
        "llmpipe.memory",  # a leaf: frees a process's memory between tasks, imports no llmpipe module
    }
    assert {m for m in graph["llmpipe.memory"] if m.startswith("llmpipe.")} == set()
