import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cpu import (
    LEDGER,
    TICKS,
    CpuLedger,
    CpuMeter,
    StatTimes,
    machine_split,
    parse_stat,
    per_request_split,
    read_stat,
    snapshot,
    tree_cpu_s,
)

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
SPIN = "while True: pass\n"


def _burn_here(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_parse_stat_counts_fields_after_a_name_with_spaces_and_parentheses() -> None:
    # pid (comm) state ppid ... field 14 utime, 15 stime, 16 cutime, 17 cstime
    fields = ["S", "41"] + ["0"] * 9 + ["250", "50", "20", "30"] + ["0"] * 30
    line = "1234 (my (odd) name) " + " ".join(fields)
    st = parse_stat(line, ticks=100)
    assert (st.user_s, st.system_s) == (2.5, 0.5)
    assert (st.children_user_s, st.children_system_s) == (0.2, 0.3)
    assert st.ppid == 41
    assert st.own_s == pytest.approx(3.0)
    assert st.total_s == pytest.approx(3.5)


def test_reading_the_current_process_sees_the_cpu_it_burns() -> None:
    before = read_stat(os.getpid()).own_s
    _burn_here(0.3)
    after = read_stat(os.getpid()).own_s
    assert TICKS > 0
    # Tick granularity (1/TICKS) and scheduling: at least most of what was burnt shows.
    assert after - before >= 0.2
    assert read_stat(os.getpid()).ppid == os.getppid()


def test_a_meter_on_a_child_counts_only_what_it_burns_after_mark() -> None:
    # Burn 0.5 s (start-up, not counted), say so, wait to be marked, burn 0.4 s, say so.
    script = (BURN.format(s=0.5) + "print('a', flush=True)\ninput()\n"
              + BURN.format(s=0.4).replace("end =", "end2 =").replace("< end", "< end2")
              + "print('b', flush=True)\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        meter = CpuMeter(child.pid, follow=False)
        assert child.stdout.readline() == "a\n"
        meter.mark()
        assert meter.baseline is not None and meter.baseline >= 0.4
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "b\n"
        meter.read()
        assert meter.used_s == pytest.approx(0.4, abs=0.15)
    finally:
        child.kill()
        child.wait()
    meter.mark()  # a second mark keeps the first baseline
    assert meter.used_s == pytest.approx(0.4, abs=0.15)


def test_a_meter_followed_in_the_background_keeps_a_child_killed_and_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    meter = CpuMeter(child.pid)  # followed: re-read every 0.5 s
    try:
        meter.mark()
        time.sleep(1.6)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()  # reaped: /proc/<pid> is gone
    used = meter.close()
    assert used >= 0.3  # it spun for ~1.6 s of which the follower saw at least 1 s
    with pytest.raises(ProcessLookupError):
        tree_cpu_s(child.pid)


def test_tree_cpu_includes_live_descendants() -> None:
    # A parent that sleeps while its child spins: the parent's own time stays ~0.
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time\n"
                               f"c = subprocess.Popen([sys.executable, '-c', {SPIN!r}])\n"
                               "time.sleep(30)\n"])
    try:
        time.sleep(2.0)
        stats = snapshot()
        own = stats[parent.pid].own_s
        tree = tree_cpu_s(parent.pid, stats)
        assert tree - own >= 0.5
    finally:
        stats = snapshot()
        for pid, st in stats.items():
            if st.ppid == parent.pid:
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_ledger_divides_cpu_by_requests_answered() -> None:
    ledger = CpuLedger()
    for _ in range(3):
        ledger.answered("w0")
    ledger.answered(None)  # an answer from no known worker is not counted
    assert ledger.answers == {"w0": 3}
    ledger.record("w0", 0.12, 3)
    ledger.record("w1", 0.0, 1)
    assert ledger.per_request_ms(ledger.entries) == 30.0
    assert ledger.per_request_ms([]) is None


async def test_a_worker_process_records_its_cpu_and_answers_from_ready_to_stop(
        tmp_path: Path) -> None:
    """The hook every measurement gets: WorkerProcess marks at its first successful
    wait_log, records (instance ID, CPU s, answers seen meanwhile) in LEDGER at stop()."""
    from bench.processes import WorkerProcess
    from consumers.settings import Settings

    burn = BURN.format(s=0.6) + "time.sleep(30)\n"
    worker = WorkerProcess(Settings(), tmp_path / "w.log", module="timeit",
                           args=["-s", "print('assigned partitions', flush=True)",
                                 "-n", "1", "-r", "1", burn],
                           env={"VF_INSTANCE_ID": "cpu-test-w0"})
    try:
        LEDGER.answered("cpu-test-w0")  # before it is up: not its work
        await worker.wait_log("assigned partitions", 60)
        for _ in range(4):
            LEDGER.answered("cpu-test-w0")
        LEDGER.answered("someone-else")
        await asyncio.sleep(1.2)  # the burn (0.6 s of CPU) is over
    finally:
        await worker.stop()
    name, cpu_s, answered = LEDGER.entries[-1]
    assert (name, answered) == ("cpu-test-w0", 4)
    assert 0.3 <= cpu_s <= 1.0
    await worker.stop()  # a second stop records nothing more
    assert LEDGER.entries[-1] == (name, cpu_s, answered)
    assert sum(1 for e in LEDGER.entries if e[0] == "cpu-test-w0") == 1


def _times(own: float, children: float = 0.0, ppid: int = 1) -> StatTimes:
    return StatTimes(own, 0.0, children, 0.0, ppid)


def test_machine_split_reads_each_process_on_the_path_and_skips_the_unreadable() -> None:
    me = os.getpid()
    stats = {me: _times(2.0, children=0.5), 100: _times(3.0, ppid=me), 101: _times(1.0, ppid=100),
             200: _times(4.0), 300: _times(6.0)}
    split = machine_split(100, {"kafka": 200, "s3": 300, "gone": 999}, stats)
    # the worker with its descendant; the driver without its children, which are the
    # profilers it reaped
    assert split == {"worker": 4.0, "kafka": 4.0, "s3": 6.0, "driver": 2.0, "profilers": 0.5}


def test_per_request_split_gives_ms_by_process_and_the_cores_bound_only_when_complete() -> None:
    before = {"worker": 1.0, "kafka": 1.0, "s3": 1.0, "driver": 1.0, "profilers": 0.0}
    after = {"worker": 5.0, "kafka": 3.0, "s3": 6.0, "driver": 2.5, "profilers": 0.5}
    figures = per_request_split(before, after, 1000, cores=2, prefix="capacity")
    assert figures == {"capacity_cpu_ms_worker": 4.0, "capacity_cpu_ms_kafka": 2.0,
                       "capacity_cpu_ms_s3": 5.0, "capacity_cpu_ms_driver": 1.5,
                       "capacity_cpu_ms_profilers": 0.5,
                       "capacity_cpu_bound_rps": round(2000 / 13.0, 1)}
    # a broker this stack did not start is not in the split: no bound that would flatter
    partial = per_request_split({k: v for k, v in before.items() if k != "kafka"}, after,
                                1000, cores=2, prefix="capacity")
    assert "capacity_cpu_ms_kafka" not in partial and partial["capacity_cpu_bound_rps"] is None
    assert per_request_split(before, after, 0, cores=2, prefix="capacity") == {}
