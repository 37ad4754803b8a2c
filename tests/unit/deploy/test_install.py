"""The tool installer's cache: a finished install is reused without any registry, an
interrupted one is redone, and a failing build says what failed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from deploy.tools import install

TOOL = install.GoTool("faketool", "example.com/faketool/cmd/faketool", "v1.2.3")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_complete_install_is_reused_without_go(monkeypatch: pytest.MonkeyPatch) -> None:
    TOOL.home.mkdir(parents=True)
    TOOL.binary.write_text("#!/bin/sh\n")
    (TOOL.home / ".complete").write_text("v1.2.3\n")

    def no_go() -> str:
        raise AssertionError("go was called for an installed tool")

    monkeypatch.setattr(install, "_go", no_go)
    assert install.ensure_go_tool(TOOL, io.StringIO()) == TOOL.binary


def test_an_interrupted_install_is_redone(monkeypatch: pytest.MonkeyPatch) -> None:
    TOOL.home.mkdir(parents=True)
    TOOL.binary.write_text("half a binary")  # no .complete marker
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], out: object, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        calls.append(cmd)
        assert env is not None and cwd is not None
        (Path(env["GOBIN"]) / "faketool").write_text("a whole binary")

    monkeypatch.setattr(install, "_go", lambda: "go")
    monkeypatch.setattr(install, "_run", fake_run)
    binary = install.ensure_go_tool(TOOL, io.StringIO())
    assert calls == [["go", "install", "example.com/faketool/cmd/faketool@v1.2.3"]]
    assert binary.read_text() == "a whole binary"
    assert (TOOL.home / ".complete").read_text() == "v1.2.3\n"
    assert not TOOL.home.with_name(TOOL.home.name + ".tmp").exists()


def test_a_failing_command_names_itself_and_its_output() -> None:
    with pytest.raises(install.InstallError, match=r"sh -c echo boom.*exit code 3:\nboom"):
        install._run(["sh", "-c", "echo boom; exit 3"], io.StringIO())


def test_go_tags_reach_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], out: object, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        seen.append(cmd)
        assert env is not None
        (Path(env["GOBIN"]) / "promtool").write_text("")

    monkeypatch.setattr(install, "_go", lambda: "go")
    monkeypatch.setattr(install, "_run", fake_run)
    install.ensure_go_tool(install.PROMTOOL, io.StringIO())
    assert seen[0][:4] == ["go", "install", "-tags", "remove_all_sd"]


def test_the_local_compose_checker_is_versioned_by_its_sources() -> None:
    version = install.COMPOSECHECK.version
    assert len(version) == 12 and install.COMPOSECHECK.home.name.endswith(version)
    go_sum = install.COMPOSECHECK.source / "go.sum"
    assert "github.com/compose-spec/compose-go/v2" in go_sum.read_text()


def test_the_example_checker_is_versioned_by_its_lock_file() -> None:
    package = install.EXAMPLECHECK
    assert len(package.version) == 12 and package.home.name == f"examplecheck-{package.version}"
    lock = json.loads((package.source / "package-lock.json").read_text())
    # Exact versions, each with its integrity hash: npm ci installs nothing else.
    declared = json.loads((package.source / "package.json").read_text())["dependencies"]
    for name, version in declared.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
    assert all(entry.get("integrity", "").startswith("sha512-")
               for key, entry in lock["packages"].items() if key)


def test_a_complete_node_install_is_reused_without_npm(monkeypatch: pytest.MonkeyPatch) -> None:
    package = install.EXAMPLECHECK
    (package.modules / "ajv").mkdir(parents=True)
    (package.home / ".complete").write_text(package.version + "\n")

    def no_npm() -> str:
        raise AssertionError("npm was called for an installed package")

    monkeypatch.setattr(install, "_npm", no_npm)
    assert install.ensure_node_package(package, io.StringIO()) == package.modules


def test_an_interrupted_node_install_is_redone_with_npm_ci(
        monkeypatch: pytest.MonkeyPatch) -> None:
    package = install.EXAMPLECHECK
    package.modules.mkdir(parents=True)  # half an install: no .complete marker
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], out: object, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        calls.append(cmd)
        assert cwd is not None and (cwd / "package-lock.json").exists()
        (cwd / "node_modules" / "ajv").mkdir(parents=True)

    monkeypatch.setattr(install, "_npm", lambda: "npm")
    monkeypatch.setattr(install, "_run", fake_run)
    assert install.ensure_node_package(package, io.StringIO()) == package.modules
    assert calls == [["npm", "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"]]
    assert (package.modules / "ajv").is_dir()
    assert (package.home / ".complete").read_text() == package.version + "\n"


def test_no_npm_is_an_install_error_naming_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(install.InstallError, match=r"'npm' is not on PATH.*make setup"):
        install.ensure_node_package(install.EXAMPLECHECK, io.StringIO())
