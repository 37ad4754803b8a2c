"""Fixtures for the deploy checks: the real tools (installed once into the user cache) and
throw-away copies of the checkout that a test may break."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.checks import runner
from deploy.tools import install

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def tools() -> None:
    """Install (or find cached) every checking tool; a failed install fails the tests."""
    log = io.StringIO()
    try:
        install.ensure_all(out=log)
    except install.InstallError as exc:
        pytest.fail(f"deploy tools could not be installed: {exc}\n{log.getvalue()}")


@pytest.fixture(scope="session")
def rendered(tools: None) -> dict[str, str]:
    """`kustomize build` output of base, dev and prod for this checkout."""
    layout = runner.Layout(root=ROOT)
    problems = runner.check_kustomize(layout)
    assert problems == []
    return layout.rendered


@pytest.fixture
def checkout(tmp_path: Path, tools: None) -> Callable[[], runner.Layout]:
    """A factory for a copy of deploy/ and the code packages (what the checks read)."""

    def make() -> runner.Layout:
        root = tmp_path / "checkout"
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        for part in ("deploy", "topics", "pipeline", "consumers"):
            shutil.copytree(ROOT / part, root / part, ignore=skip)
        return runner.Layout(root=root)

    return make


def edit(path: Path, old: str, new: str) -> None:
    """Replace one exact piece of a file; fails loudly if the piece is not there."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")
