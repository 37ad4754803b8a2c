"""WorkerShape: the dispatchers, device slots and threads a worker's settings make."""

from __future__ import annotations

import pytest

from consumers.settings import Settings, WorkerSettings
from consumers.worker.shape import WorkerShape


def test_the_default_shape_runs_three_device_calls_not_two() -> None:
    shape = WorkerShape.of(Settings().worker)
    assert (shape.batch_slots, shape.interactive_reserve) == (2, 1)
    assert shape.device_calls == 3  # what GPU memory must hold: max_inflight + reserve
    assert shape.slots == {"batch": 2, "interactive": 3}
    assert shape.dispatchers == (None, None, None, None, "interactive", "interactive")
    assert shape.threads == 6
    assert shape.store_connections == 8
    assert shape.describe() == ("3 device calls at once (max_inflight 2 + interactive_slots "
                                "1), 6 dispatchers")


@pytest.mark.parametrize(("max_inflight", "reserve", "calls", "threads", "interactive"), [
    (1, 0, 1, 3, 1),  # the smallest worker: one device call, no reserve
    (1, 1, 2, 3, 2),
    (8, 4, 12, 24, 12),
])
def test_edge_shapes(max_inflight: int, reserve: int, calls: int, threads: int,
                     interactive: int) -> None:
    shape = WorkerShape.of(WorkerSettings(max_inflight=max_inflight,
                                          interactive_slots=reserve))
    assert shape.device_calls == calls and shape.threads == threads
    assert shape.slots == {"batch": max_inflight, "interactive": interactive}
    assert shape.dispatchers.count("interactive") == max_inflight
    assert shape.dispatchers.count(None) == 2 * max_inflight
    assert shape.store_connections == threads + 2


def test_a_shape_made_in_code_is_checked_too() -> None:
    with pytest.raises(ValueError, match=r"VF_MAX_INFLIGHT must be >= 1 \(got 0\)"):
        WorkerShape(0, 1)
    with pytest.raises(ValueError, match=r"VF_INTERACTIVE_SLOTS must be >= 0 \(got -1\)"):
        WorkerShape(2, -1)
