"""Local-stack logic that needs no server: config, pid ownership, env lines."""

from __future__ import annotations

import io
import os
import signal
import time
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


def test_a_spawned_process_is_ours_by_start_time_even_while_its_cmdline_reads_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flaky `restart_broker` ("kafka exited during start-up" while the broker was
    starting): a JVM's cmdline reads empty for a moment while its launcher execs. Ownership
    and liveness come from the start time in the pid file, not from the command line."""
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))
    service = stack.Service("sleeper", 1, "kafka.Kafka")  # the marker is not on its cmdline
    pid = stack._spawn(service, ["sleep", "30"])
    try:
        recorded = service.pid_file.read_text().split()
        assert recorded[0] == str(pid) and len(recorded) == 2
        monkeypatch.setattr(stack, "_cmdline_contains", lambda *_: False)
        assert service.pid() == pid
        # The same pid with another start time is a reused pid: not ours.
        service.pid_file.write_text(f"{pid} {int(recorded[1]) + 1}\n")
        assert service.pid() is None
        service.pid_file.write_text(f"{pid} {recorded[1]}\n")
    finally:
        os.kill(pid, signal.SIGKILL)
    # Killed but not yet reaped: a zombie, which is not running.
    deadline = time.monotonic() + 5
    while (state := stack._proc_state(pid)) is not None and state[0] != "Z" \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.pid() is None
    os.waitpid(pid, 0)
    assert service.pid() is None


def test_a_service_log_over_the_limit_moves_aside_at_start_and_a_small_one_grows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(stack, "LOG_KEEP_BYTES", 10)
    service = stack.Service("sleeper", 1, "sleep")
    service.log_file.parent.mkdir(parents=True)
    service.log_file.write_text("short\n")
    stack._spawn(service, ["true"])
    assert service.log_file.read_text() == "short\n"  # under the limit: appended to
    service.log_file.write_text("an older run's log, long\n")
    stack._spawn(service, ["echo", "new"])
    for _ in range(100):  # echo writes once it runs
        if service.log_file.read_text():
            break
        time.sleep(0.01)
    assert service.log_file.read_text() == "new\n"
    assert service.log_file.with_name(service.log_file.name + ".1").read_text() == \
        "an older run's log, long\n"


def test_a_pid_file_of_the_old_format_falls_back_to_the_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))
    stack.KAFKA.pid_file.parent.mkdir(parents=True)
    stack.KAFKA.pid_file.write_text(f"{os.getpid()}\n")
    monkeypatch.setattr(stack, "_cmdline_contains", lambda pid, marker: pid == os.getpid())
    assert stack.KAFKA.pid() == os.getpid()


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


def test_kafka_tmpfs_links_the_data_dir_into_ram_and_later_ups_keep_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(stack, "TMPFS", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    out = io.StringIO()
    assert stack.kafka_data_dir(tmpfs=False, out=out) == tmp_path / "state/kafka/data"
    data = stack.kafka_data_dir(tmpfs=True, out=out)
    assert data.is_symlink() and data.resolve().is_relative_to(tmp_path / "shm")
    assert "data in RAM" in out.getvalue()
    # A later `up` without the flag follows the link; an emptied tmpfs (a restart) is a
    # fresh store, said so.
    target = data.resolve()
    target.rmdir()
    assert stack.kafka_data_dir(tmpfs=False, out=out) == data
    assert target.is_dir() and "is gone" in out.getvalue()


def test_kafka_tmpfs_refuses_to_hide_a_store_already_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(stack, "TMPFS", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    (tmp_path / "kafka" / "data").mkdir(parents=True)
    with pytest.raises(stack.StackError, match=r"on disk in .*dev down"):
        stack.kafka_data_dir(tmpfs=True, out=io.StringIO())
    monkeypatch.setattr(stack, "TMPFS", tmp_path / "none")
    (tmp_path / "kafka" / "data").rmdir()
    with pytest.raises(stack.StackError, match=r"needs .*none"):
        stack.kafka_data_dir(tmpfs=True, out=io.StringIO())
