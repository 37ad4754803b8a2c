"""Import direction and import circles, checked on the source (DESIGN.md "Layout").

Every `import` / `from ... import` of the project's packages, at module level, inside
functions and under TYPE_CHECKING alike, becomes an edge of a module graph. The rules:
layers only import downwards (topics <- pipeline <- consumers <- bench; deploy may use the
product packages but no product package imports deploy), nothing imports the command-line
module, and the graph has no circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topics", "pipeline", "consumers", "bench", "deploy")
CLI = "voicefactory"
# What each top-level part may import of the project (besides itself).
ALLOWED: Mapping[str, frozenset[str]] = {
    "topics": frozenset(),
    "pipeline": frozenset({"topics"}),
    "consumers": frozenset({"topics", "pipeline"}),
    "bench": frozenset({"topics", "pipeline", "consumers"}),
    "deploy": frozenset({"topics", "pipeline", "consumers"}),
    CLI: frozenset({"topics", "pipeline", "consumers", "bench", "deploy"}),
}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path) -> dict[str, Path]:
    found = {CLI: root / f"{CLI}.py"} if (root / f"{CLI}.py").exists() else {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def imports_of(path: Path, name: str, known: Iterable[str]) -> set[str]:
    """The project modules `path` imports; `from a import b` counts as a.b when that is one."""
    known = set(known)
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a package a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = source_modules(root)
    return {name: imports_of(path, name, modules) for name, path in modules.items()}


def wrong_way(graph: Mapping[str, set[str]]) -> list[str]:
    problems = []
    for source, targets in graph.items():
        top = source.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != top and other not in ALLOWED[top]:
                problems.append(f"{source} imports {target} ({top} may not import {other})")
    return problems


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_layers_import_only_downwards() -> None:
    assert wrong_way(import_graph(ROOT)) == []


def test_no_module_imports_the_command_line() -> None:
    graph = import_graph(ROOT)
    assert [m for m, targets in graph.items() if CLI in targets] == []


def test_the_project_has_no_import_circle() -> None:
    assert circles(import_graph(ROOT)) == []


# -- the checker itself, on small trees made to break the rules -------------------------------

def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    return tmp_path


def test_a_wrong_way_import_is_reported_even_inside_a_function(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "topics/events.py": "def f():\n    from pipeline.audio import decode\n",
        "pipeline/audio.py": "def decode(): ...\n",
        "bench/run.py": "from deploy.local import stack\n",
        "deploy/local/__init__.py": "",
        "deploy/local/stack.py": "",
    })
    assert sorted(wrong_way(import_graph(root))) == [
        "bench.run imports deploy.local.stack (bench may not import deploy)",
        "topics.events imports pipeline.audio (topics may not import pipeline)",
    ]


def test_a_circle_under_type_checking_is_still_a_circle(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "consumers/worker.py": "from consumers.rebalance import Listener\n",
        "consumers/rebalance.py": ("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from consumers.worker import W\n"),
        "consumers/ok.py": "from consumers import worker\n",
    })
    assert circles(import_graph(root)) == [["consumers.rebalance", "consumers.worker"]]


@pytest.mark.parametrize(("text", "expected"), [
    ("from . import b\n", {"pipeline.b"}),
    ("from .b import x\n", {"pipeline.b"}),
    ("import pipeline.b\n", {"pipeline.b"}),
    ("from pipeline import b\n", {"pipeline.b"}),
    ("from pipeline import thing\n", {"pipeline"}),
])
def test_import_forms_resolve_to_modules(tmp_path: Path, text: str, expected: set[str]) -> None:
    root = _tree(tmp_path, {"pipeline/a.py": text, "pipeline/b.py": "x = 1\n"})
    assert import_graph(root)["pipeline.a"] == expected
