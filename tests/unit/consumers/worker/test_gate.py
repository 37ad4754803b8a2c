"""LaneGate: device slots go to interactive waiters first, batch keeps its share."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable

import pytest

from consumers.worker.batching import Lane
from consumers.worker.gate import LANE, BatchThreads, LaneGate, in_lane
from consumers.worker.shape import WorkerShape


def _enter_in_thread(gate: LaneGate, lane: Lane, name: str, order: list[str],
                     hold: threading.Event) -> threading.Thread:
    """A thread that takes a slot as `lane` would (the dispatcher's context), notes its
    turn, and keeps the slot until `hold` is set."""
    def run() -> None:
        LANE.set(lane)
        with gate:
            order.append(name)
            hold.wait(5)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run,))
    thread.start()
    return thread


def _until(predicate: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_freed_slot_goes_to_an_interactive_waiter_before_older_batch_waiters() -> None:
    gate = LaneGate(1, batch_share=0.0)
    order: list[str] = []
    release = [threading.Event() for _ in range(4)]
    threads = [_enter_in_thread(gate, "batch", "running", order, release[0])]
    _until(lambda: order == ["running"])
    threads.append(_enter_in_thread(gate, "batch", "batch-1", order, release[1]))
    _until(lambda: gate.waiting("batch") == 1)
    threads.append(_enter_in_thread(gate, "batch", "batch-2", order, release[2]))
    _until(lambda: gate.waiting("batch") == 2)
    threads.append(_enter_in_thread(gate, "interactive", "call", order, release[3]))
    _until(lambda: gate.waiting("interactive") == 1)
    for event in release:
        event.set()
        time.sleep(0.02)
    for thread in threads:
        thread.join(5)
    assert order == ["running", "call", "batch-1", "batch-2"]


def test_batch_gets_its_share_of_contested_slots() -> None:
    gate = LaneGate(1, batch_share=0.5)
    order: list[str] = []
    go = threading.Event()
    first = _enter_in_thread(gate, "batch", "first", order, go)
    _until(lambda: order == ["first"])
    threads = []
    for i in range(3):
        threads.append(_enter_in_thread(gate, "batch", f"b{i}", order, go))
        _until(lambda n=i + 1: gate.waiting("batch") == n)  # type: ignore[misc]
    for i in range(3):
        threads.append(_enter_in_thread(gate, "interactive", f"i{i}", order, go))
        _until(lambda n=i + 1: gate.waiting("interactive") == n)  # type: ignore[misc]
    go.set()
    for thread in [first, *threads]:
        thread.join(5)
    assert order == ["first", "i0", "b0", "i1", "b1", "i2", "b2"]


def test_slots_are_a_bound_and_the_default_lane_is_batch() -> None:
    gate = LaneGate(2, batch_share=0.1)
    inside, peak = [0], [0]
    lock = threading.Lock()

    def work() -> None:
        with gate:
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.01)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert peak[0] == 2 and LANE.get() == "batch"
    with pytest.raises(ValueError, match="slots"):
        LaneGate(0, batch_share=0.1)


def test_the_gate_is_re_entrant_per_thread() -> None:
    gate = LaneGate(1, batch_share=0.1)
    with gate, gate:  # the processor's own entries inside in_lane's hold
        assert gate.waiting("batch") == 0
    with gate:  # released: free again
        pass


def test_an_interactive_call_holds_its_slot_between_the_processor_s_entries() -> None:
    """Profile lookup and engine call each enter the gate; a batch waiter must not slip in
    between them while an interactive call runs."""
    gate = LaneGate(1, batch_share=0.0)
    order: list[str] = []
    batch_waiting = threading.Event()

    def call() -> None:
        with gate:
            order.append("profile")
        batch_waiting.wait(2)
        time.sleep(0.02)  # the batch waiter is queued by now
        with gate:
            order.append("engine")

    def batch() -> None:
        LANE.set("batch")
        batch_waiting.set()
        with gate:
            order.append("batch")

    runner = threading.Thread(target=in_lane, args=(gate, "interactive", call))
    runner.start()
    _until(lambda: order == ["profile"])
    other = threading.Thread(target=contextvars.copy_context().run, args=(batch,))
    other.start()
    runner.join(5)
    other.join(5)
    assert order == ["profile", "engine", "batch"]


async def test_batch_threads_run_calls_in_their_own_named_threads_with_the_lane() -> None:
    threads = BatchThreads(LaneGate(1, batch_share=0.1), 2)

    def where() -> tuple[str, str]:
        return threading.current_thread().name, LANE.get()

    try:
        name, lane = await threads.run("interactive", where)
        assert name.startswith("vf-batch") and lane == "interactive"
        assert (await threads.run("batch", where))[1] == "batch"
    finally:
        threads.shutdown()


def test_interactive_work_has_dispatchers_of_its_own() -> None:
    assert WorkerShape(2, 1).dispatchers == (None, None, None, None, "interactive",
                                             "interactive")


def test_a_gate_for_a_shape_runs_its_device_calls_and_no_more() -> None:
    """max_inflight shared + interactive_slots reserved slots: 3 device calls by default,
    which is what GPU memory must be sized for."""
    gate = LaneGate.for_shape(WorkerShape(2, 1), batch_share=0.1)
    assert gate.capacity == WorkerShape(2, 1).device_calls == 3
    order: list[str] = []
    hold = threading.Event()
    lanes: list[Lane] = ["batch", "batch", "interactive", "interactive"]
    threads = [_enter_in_thread(gate, lane, f"{lane}-{i}", order, hold)
               for i, lane in enumerate(lanes)]
    _until(lambda: len(order) == 3)
    time.sleep(0.05)  # the fourth stays out: every slot is held
    assert len(order) == 3 and gate.waiting("interactive") == 1
    hold.set()
    for thread in threads:
        thread.join(5)
    assert len(order) == 4


def test_the_reserve_serves_a_caller_while_batch_work_fills_the_shared_slots() -> None:
    gate = LaneGate(1, batch_share=0.1, interactive_slots=1)
    order: list[str] = []
    release = [threading.Event() for _ in range(4)]
    threads = [_enter_in_thread(gate, "batch", "batch-running", order, release[0])]
    _until(lambda: order == ["batch-running"])
    threads.append(_enter_in_thread(gate, "batch", "batch-waiting", order, release[1]))
    _until(lambda: gate.waiting("batch") == 1)  # batch never takes the reserved slot
    threads.append(_enter_in_thread(gate, "interactive", "call", order, release[2]))
    _until(lambda: order == ["batch-running", "call"])  # at once, beside the running batch
    threads.append(_enter_in_thread(gate, "interactive", "call-2", order, release[3]))
    _until(lambda: gate.waiting("interactive") == 1)  # the reserve is taken: it queues
    release[0].set()  # the shared slot frees: the second caller goes first
    _until(lambda: order == ["batch-running", "call", "call-2"])
    for event in release:
        event.set()
    for thread in threads:
        thread.join(5)
    assert order == ["batch-running", "call", "call-2", "batch-waiting"]
    with pytest.raises(ValueError, match="interactive_slots"):
        LaneGate(1, batch_share=0.1, interactive_slots=-1)


def test_has_free_slot_and_on_room_follow_the_shared_slots() -> None:
    gate = LaneGate(2, batch_share=0.1)
    rooms: list[int] = []
    gate.on_room = lambda: rooms.append(1)
    assert gate.has_free_slot()
    with gate:  # one of two taken: room left, said once
        assert gate.has_free_slot() and len(rooms) == 1
        hold, order = threading.Event(), list[str]()
        other = _enter_in_thread(gate, "batch", "other", order, hold)
        _until(lambda: order == ["other"])
        assert not gate.has_free_slot()  # both taken: nothing said
        assert len(rooms) == 1
        hold.set()
        other.join(2)
        assert gate.has_free_slot() and len(rooms) == 2  # a slot freed: said
    assert len(rooms) == 3
