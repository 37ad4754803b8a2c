"""CPU time of benchmark processes, from /proc: the CPU a GPU node needs per request.

/proc/<pid>/stat -> utime + stime (clock ticks, `os.sysconf("SC_CLK_TCK")` a second) of the
process itself, plus cutime + cstime (children it has reaped) and utime + stime of every live
descendant (a worker's process pool counts as the worker) -> `tree_cpu_s(pid)`.
CpuMeter follows one process: `mark()` sets the baseline (after start-up: importing torch
and loading the encoder is not per-request work), `read()` keeps the last value it could
read (a process killed -9 and reaped cannot be read any more, so a background thread
re-reads every followed meter every 0.5 s), `used_s` is last - baseline.
CpuLedger collects (cpu seconds, requests answered) per worker process of a run; the runner
diffs it around each measurement to report `cpu_ms_per_request` and per-measurement figures.
`machine_split` reads every process on a request's path at once (worker, broker, S3 server,
the bench's own driver and the profilers it ran); `per_request_split` turns two such reads
and the answers between them into CPU ms per answered request by process, and the rate at
which those processes alone would fill the machine's cores.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class StatTimes:
    """Fields 14-17 of /proc/<pid>/stat, in seconds, and the parent's pid (field 4)."""

    user_s: float
    system_s: float
    children_user_s: float
    children_system_s: float
    ppid: int

    @property
    def own_s(self) -> float:
        return self.user_s + self.system_s

    @property
    def total_s(self) -> float:
        """The process and its reaped children."""
        return self.own_s + self.children_user_s + self.children_system_s


def parse_stat(text: str, ticks: int = TICKS) -> StatTimes:
    """One /proc/<pid>/stat line. The command name (field 2) is in parentheses and may hold
    spaces or ')', so the fields are counted from the last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state): field n is rest[n - 3].
    utime, stime, cutime, cstime = (int(rest[n - 3]) for n in (14, 15, 16, 17))
    return StatTimes(utime / ticks, stime / ticks, cutime / ticks, cstime / ticks,
                     int(rest[4 - 3]))


def read_stat(pid: int, proc: Path = PROC) -> StatTimes:
    """Raises OSError (FileNotFoundError, ProcessLookupError) when the pid is gone."""
    return parse_stat((proc / str(pid) / "stat").read_text())


def snapshot(proc: Path = PROC) -> dict[int, StatTimes]:
    """Every readable process's times, in one pass over /proc (one file read each)."""
    stats: dict[int, StatTimes] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = read_stat(int(entry.name), proc)
            except (OSError, ValueError):
                continue  # exited while we looked
    return stats


def descendants(pid: int, stats: dict[int, StatTimes]) -> list[int]:
    """Live processes below `pid` in a snapshot, from their parent fields."""
    below: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        children = [p for p, st in stats.items() if st.ppid == current and p != current]
        below += children
        frontier += children
    return below


def tree_cpu_s(pid: int, stats: dict[int, StatTimes] | None = None) -> float:
    """CPU seconds of `pid`, its reaped children and its live descendants (their own reaped
    children are in their parents' counters once reaped). ProcessLookupError if gone."""
    stats = snapshot() if stats is None else stats
    if pid not in stats:
        raise ProcessLookupError(pid)
    return stats[pid].total_s + sum(stats[d].own_s for d in descendants(pid, stats))


class CpuMeter:
    """CPU seconds one process (and its descendants) used since `mark()`."""

    def __init__(self, pid: int, *, follow: bool = True) -> None:
        self.pid = pid
        self.baseline: float | None = None
        self.last: float | None = None
        self._lock = threading.Lock()
        if follow:
            _FOLLOWER.add(self)

    def read(self, stats: dict[int, StatTimes] | None = None) -> float | None:
        """The current value, or the last one read if the process is gone."""
        try:
            value = tree_cpu_s(self.pid, stats)
        except (OSError, ValueError):
            return self.last
        with self._lock:
            # A zombie's reaped children vanish from its counters: never go backwards.
            self.last = value if self.last is None else max(self.last, value)
            return self.last

    def mark(self) -> None:
        """Count from now on (once: a second mark keeps the first baseline)."""
        value = self.read()
        if self.baseline is None:
            self.baseline = value

    @property
    def marked(self) -> bool:
        return self.baseline is not None

    @property
    def used_s(self) -> float:
        if self.baseline is None or self.last is None:
            return 0.0
        return max(0.0, self.last - self.baseline)

    def close(self) -> float:
        """A last read; the meter stops being followed. Returns used_s."""
        self.read()
        _FOLLOWER.discard(self)
        return self.used_s


class _Follower:
    """Re-reads every followed meter every `interval_s`, so a process killed -9 (and reaped
    by whoever killed it) still has a value from at most that long before its death."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self._interval_s = interval_s
        self._meters: set[CpuMeter] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, meter: CpuMeter) -> None:
        with self._lock:
            self._meters.add(meter)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="cpu-follower",
                                                daemon=True)
                self._thread.start()

    def discard(self, meter: CpuMeter) -> None:
        with self._lock:
            self._meters.discard(meter)

    def _loop(self) -> None:
        while True:
            with self._lock:
                meters = list(self._meters)
            if meters:
                stats = snapshot()  # one pass over /proc for all meters
                for meter in meters:
                    meter.read(stats)
            time.sleep(self._interval_s)


_FOLLOWER = _Follower()


@dataclass
class CpuLedger:
    """(name, cpu seconds, requests answered) per worker process, in the order they ended;
    `answers` counts first answers per worker instance ID as the result readers see them."""

    entries: list[tuple[str, float, int]] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)

    def answered(self, worker: str | None) -> None:
        if worker:
            self.answers[worker] += 1

    def record(self, name: str, cpu_s: float, requests: int) -> None:
        self.entries.append((name, cpu_s, requests))

    @staticmethod
    def per_request_ms(entries: list[tuple[str, float, int]]) -> float | None:
        """Sum of CPU over sum of requests, in ms; None when nothing was answered."""
        requests = sum(n for _, _, n in entries)
        if requests == 0:
            return None
        return round(1000 * sum(c for _, c, _ in entries) / requests, 2)


LEDGER = CpuLedger()


def machine_split(worker_pid: int, servers: dict[str, int],
                  stats: dict[int, StatTimes] | None = None) -> dict[str, float]:
    """CPU seconds so far of each process a request's path runs through on this machine:
    the worker (and its descendants), each server by name, the driver (this process's own
    threads) and "profilers" (children this process has reaped, e.g. py-spy). A process that
    cannot be read is left out."""
    stats = snapshot() if stats is None else stats
    split: dict[str, float] = {}
    for name, pid in {"worker": worker_pid, **servers}.items():
        try:
            split[name] = tree_cpu_s(pid, stats)
        except (OSError, ValueError):
            continue
    me = stats.get(os.getpid())
    if me is not None:
        split["driver"] = me.own_s
        split["profilers"] = me.children_user_s + me.children_system_s
    return split


SPLIT_PARTS = ("worker", "kafka", "s3", "driver", "profilers")


def per_request_split(before: dict[str, float], after: dict[str, float], answered: int,
                      cores: int, prefix: str) -> dict[str, float | None]:
    """`<prefix>_cpu_ms_<part>` per answered request for each part read both times, and
    `<prefix>_cpu_bound_rps`: the rate at which those parts' CPU alone fills `cores`, given
    only when every part of SPLIT_PARTS was read (a missing server would flatter it)."""
    figures: dict[str, float | None] = {}
    if answered <= 0:
        return figures
    for part in SPLIT_PARTS:
        if part in before and part in after:
            figures[f"{prefix}_cpu_ms_{part}"] = round(
                1000 * max(0.0, after[part] - before[part]) / answered, 2)
    total = sum(v for v in figures.values() if v is not None)
    complete = all(f"{prefix}_cpu_ms_{part}" in figures for part in SPLIT_PARTS)
    figures[f"{prefix}_cpu_bound_rps"] = (round(1000 * cores / total, 1)
                                          if complete and total > 0 else None)
    return figures

