"""consumers.startup: parts stop in reverse, and one stop's failure stops no other."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from consumers import startup

log = logging.getLogger("tests.startup")


async def _run_stack(events: list[str], failing_stop: BaseException) -> None:
    async def start(name: str) -> None:
        events.append(f"start {name}")

    async def stop(name: str) -> None:
        events.append(f"stop {name}")

    async def bad_stop() -> None:
        events.append("stop consumer")
        raise failing_stop

    async def explode() -> None:
        raise RuntimeError("broker went away")

    async with contextlib.AsyncExitStack() as stack:
        await startup.start_part(stack, "producer", lambda: start("producer"),
                                 lambda: stop("producer"), logger=log)
        await startup.start_part(stack, "consumer", lambda: start("consumer"), bad_stop,
                                 logger=log)
        await startup.start_part(stack, "reader", explode, lambda: stop("reader"), logger=log)


@pytest.mark.parametrize("failing_stop", [KeyError("x"), asyncio.CancelledError()],
                         ids=["error", "stray cancellation"])
async def test_a_failing_stop_leaves_the_others_and_the_start_error(
        failing_stop: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    with pytest.raises(RuntimeError, match="broker went away"):
        await _run_stack(events, failing_stop)
    assert events == ["start producer", "start consumer", "stop reader", "stop consumer",
                      "stop producer"]
    assert any("stopping consumer" in r.getMessage() for r in caplog.records)


async def test_a_real_cancellation_still_cancels() -> None:
    stopped: list[str] = []
    entered = asyncio.Event()

    async def slow_stop() -> None:
        entered.set()
        await asyncio.sleep(30)

    async def stop_after() -> None:
        stopped.append("producer")

    async def body() -> None:
        async with contextlib.AsyncExitStack() as stack:
            startup.push_stop(stack, "producer", stop_after, logger=log)
            startup.push_stop(stack, "consumer", slow_stop, logger=log)

    task = asyncio.create_task(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert stopped == ["producer"]  # the stack still ran the stops registered before


async def test_a_stop_that_hangs_is_left_after_its_bound_and_the_rest_still_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    # aiokafka's producer.stop() with the broker gone: it retries its flush without end
    events: list[str] = []
    flushing = asyncio.Event()

    async def hanging_stop() -> None:
        flushing.set()
        await asyncio.Event().wait()

    async def stop(name: str) -> None:
        events.append(f"stop {name}")

    async def slow_but_bounded_elsewhere() -> None:
        await asyncio.sleep(0.2)
        events.append("stop drain")

    async with contextlib.AsyncExitStack() as stack:
        startup.push_stop(stack, "health server", lambda: stop("health server"), logger=log)
        startup.push_stop(stack, "producer", hanging_stop, logger=log, timeout_s=0.05)
        startup.push_stop(stack, "drain", slow_but_bounded_elsewhere, logger=log,
                          timeout_s=None)
    assert flushing.is_set()
    assert events == ["stop drain", "stop health server"]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith("stopping producer took over 0.05 s and is left")
