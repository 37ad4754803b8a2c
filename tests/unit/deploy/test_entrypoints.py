"""The container's shell hooks, run for real with /bin/sh: the entrypoint's dispatch and its
refusal to start without a broker address, and the preStop hook's wait for the drain."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.deploy.conftest import ROOT

DOCKER = ROOT / "deploy" / "docker"


def _fake_voicefactory(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "voicefactory"
    fake.write_text('#!/bin/sh\necho "voicefactory $*"\n')
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def _entrypoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(DOCKER / "vf-entrypoint"), *args], env=env,
                          capture_output=True, text=True, timeout=10, check=False)


def test_worker_is_the_default_and_logs_json(tmp_path: Path) -> None:
    env = _fake_voicefactory(tmp_path) | {"VF_KAFKA_BOOTSTRAP": "kafka:9092"}
    done = _entrypoint(env)
    assert done.returncode == 0
    assert done.stdout.strip() == "voicefactory worker --log-format json"
    done = _entrypoint(env, "topics", "create", "--replication-factor", "3")
    assert done.stdout.strip() == "voicefactory topics create --replication-factor 3"


def test_refuses_to_start_without_a_bootstrap(tmp_path: Path) -> None:
    env = _fake_voicefactory(tmp_path)
    for command in ("worker", "aggregator", "gateway", "topics"):
        done = _entrypoint(env, command)
        assert done.returncode == 2
        assert "VF_KAFKA_BOOTSTRAP is not set" in done.stderr
        assert done.stdout == ""
    # Commands that need no broker (voices check, dev) still run.
    assert _entrypoint(env, "voices", "check", "x.wav").returncode == 0


_DRAINER = """
import signal, sys, time
def drain(*_):
    time.sleep(float(sys.argv[1]))  # the worker finishing its in-flight batches
    sys.exit(0)
signal.signal(signal.SIGTERM, drain if float(sys.argv[1]) >= 0 else signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def _prestop_against(drain_s: float, drain_seconds_setting: int) -> tuple[float, int | None]:
    """Run vf-prestop against a process that drains for `drain_s` (or ignores SIGTERM)."""
    target = subprocess.Popen([sys.executable, "-c", _DRAINER, str(drain_s)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        env = dict(os.environ, VF_PRESTOP_PID=str(target.pid),
                   VF_DRAIN_SECONDS=str(drain_seconds_setting))
        started = time.monotonic()
        hook = subprocess.Popen(["sh", str(DOCKER / "vf-prestop")], env=env)
        while hook.poll() is None:
            target.poll()  # reap it once it exits, or `kill -0` would still see a zombie
            time.sleep(0.05)
        return time.monotonic() - started, target.poll()
    finally:
        target.kill()
        target.wait()


def test_prestop_returns_only_after_the_worker_drained_and_exited() -> None:
    took, code = _prestop_against(drain_s=2.0, drain_seconds_setting=30)
    assert code == 0  # the target exited by itself, drained
    assert 2.0 <= took < 5.0


def test_prestop_gives_up_after_the_drain_budget() -> None:
    # A worker that ignores SIGTERM: the hook waits VF_DRAIN_SECONDS + 15 s, then returns
    # so the kubelet's SIGTERM and SIGKILL can follow. -13 + 15 = a 2 s budget.
    took, code = _prestop_against(drain_s=-1, drain_seconds_setting=-13)
    assert code is None  # still running: the hook did not wait for ever
    assert 1.5 <= took < 5.0
