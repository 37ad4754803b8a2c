"""bench/ reaches the local stack only through `bench.stack.LocalStack`."""

from __future__ import annotations

import ast
from pathlib import Path

from bench.stack import LocalStack
from deploy.local import stack

ROOT = Path(__file__).resolve().parents[3]


def test_the_local_stack_module_implements_the_protocol() -> None:
    implementation: LocalStack = stack  # mypy checks every method's signature here
    assert all(callable(getattr(implementation, name)) for name in (
        "all_answering", "ensure_up", "broker_started_here", "restart_broker",
        "store_started_here", "kill_store", "server_pids"))


def test_no_product_package_imports_deploy() -> None:
    offenders = []
    for package in ("topics", "pipeline", "consumers", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                              if n == "deploy" or n.startswith("deploy.")]
    assert offenders == []
