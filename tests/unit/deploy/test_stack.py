"""Local-stack logic that needs no server: config, pid ownership, env lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy.local import stack


def test_server_properties_bind_loopback_only(tmp_path: Path) -> None:
    props = stack._server_properties(tmp_path)
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in props
    assert "process.roles=broker,controller" in props
    assert "0.0.0.0" not in props


def test_a_pid_file_pointing_at_someone_else_is_not_ours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))
    stack.KAFKA.pid_file.parent.mkdir(parents=True)
    stack.KAFKA.pid_file.write_text(f"{os.getpid()}\n")  # pytest, not kafka.Kafka
    assert stack.KAFKA.pid() is None
    stack.KAFKA.pid_file.write_text("not a pid\n")
    assert stack.KAFKA.pid() is None


def test_env_lines_are_exports_for_every_setting() -> None:
    lines = stack.env_lines()
    assert all(line.startswith("export VF_") for line in lines)
    names = {line.split("=")[0].removeprefix("export ") for line in lines}
    assert {"VF_KAFKA_BOOTSTRAP", "VF_S3_ENDPOINT", "VF_S3_BUCKET", "VF_TOPIC_PREFIX"} <= names


def test_state_follows_the_folder_run_from_not_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-editable install must not keep Kafka's data inside site-packages."""
    monkeypatch.delenv("VF_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert stack.KAFKA.pid_file == tmp_path / "xdg" / "voicefactory" / "run" / "kafka.pid"
    checkout = Path(stack.__file__).resolve().parents[2]
    monkeypatch.chdir(checkout / "docs")
    assert stack.S3.log_file == checkout / ".vf" / "s3" / "s3.log"
