"""The tool installer's cache: a finished install is reused without any registry, an
interrupted one is redone, and a failing build says what failed."""

from __future__ import annotations

import io
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
