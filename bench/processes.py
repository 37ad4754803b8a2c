"""Workers for the benchmarks: in this process, or in a process of their own.

    Settings --InProcessWorker--> consumers.wiring.build_worker (the objects `voicefactory
      worker` runs) on this event loop: restart and batching look inside it
    Settings --WorkerProcess--> `python -m voicefactory worker` (or `bench.probe`) with
      `settings.to_env()` as its VF_* environment: where a measurement needs a process of its
      own (RSS, py-spy, kill -9)

Engines read their own knobs (VF_BENCH_*) from the environment when they are built, hence
`patched_environ` for the in-process ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from bench.cpu import LEDGER, CpuMeter
from consumers.settings import Settings
from consumers.wiring import WorkerRuntime, build_worker


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Engines read their knobs (VF_BENCH_*) from the environment when they are built."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class InProcessWorker:
    """A SynthesisWorker on this event loop, built as `voicefactory worker` builds it."""

    def __init__(self, settings: Settings, engine_env: Mapping[str, str] | None = None) -> None:
        with patched_environ(engine_env or {}):
            self.runtime: WorkerRuntime = build_worker(settings)
        self.settings = settings
        self.worker = self.runtime.worker
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())

    async def stop(self, timeout_s: float = 60) -> None:
        self.worker.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, timeout_s)

    def assignment(self, topic: str) -> set[int]:
        """The partitions of `topic` this worker owns now. Per topic: one group reads four
        request lanes (plain and shard pairs), whose partition numbers overlap."""
        consumer = self.worker._consumer
        owned = consumer.assignment() if consumer else set()
        return {tp.partition for tp in owned if tp.topic == topic}


class WorkerProcess:
    """`python -m voicefactory worker` (or another worker module) with the given settings
    and engine knobs, in a process of its own: `settings.to_env()` plus `env` (engine
    knobs such as VF_BENCH_BASE_MS, or VF_* values that win over the settings)."""

    def __init__(self, settings: Settings, log_path: Path, *, module: str = "voicefactory",
                 args: list[str] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.log_path = log_path
        full_env = {**os.environ, **settings.to_env(), **(env or {})}
        argv = [sys.executable, "-m", module,
                *(["worker", "--log-format", "text"] if args is None else args)]
        # The log is appended to (a work dir keeps every run's), so this process's own text
        # starts where the file ended: wait_log() must not take an earlier run's "assigned
        # partitions" for this one's.
        self._log_from = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(argv, env=full_env, stdout=out,
                                         stderr=subprocess.STDOUT)
        # CPU per request (bench.cpu): counted from the first wait_log() that succeeds (the
        # worker is up: start-up is not per-request work) until stop(), over the answers
        # the result readers saw from this instance ID meanwhile.
        self.instance_id = full_env.get("VF_INSTANCE_ID", "")
        self.cpu = CpuMeter(self.proc.pid)
        self._answers_at_mark = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        """What this process wrote to its log (not what earlier runs left in the file)."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_from)
            return f.read().decode(errors="replace")

    async def wait_log(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log_text():
                if not self.cpu.marked:
                    self.cpu.mark()
                    self._answers_at_mark = LEDGER.answers[self.instance_id]
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()[-2000:]}")
            await asyncio.sleep(0.2)
        raise TimeoutError(f"{text!r} not in {self.log_path} after {timeout_s:.0f} s")

    async def stop(self, timeout_s: float = 60) -> None:
        cpu_s = self.cpu.close()  # before SIGTERM: the drain is not a request's work
        if self.cpu.marked:
            LEDGER.record(self.instance_id, cpu_s,
                          LEDGER.answers[self.instance_id] - self._answers_at_mark)
            self.cpu.baseline = None  # a second stop() records nothing
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 10)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
