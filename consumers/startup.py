"""Start-up and shutdown of a process's long-lived parts, and background tasks that log.

    async with AsyncExitStack() as stack:          (worker run(), Gateway.start, aggregator)
        await start_part(stack, "producer", producer.start, producer.stop)
            its stop is registered first, then it starts: a part whose start fails halfway
            is stopped too (aiokafka's stop() is safe on a client that never got going)
        ... every later part the same way, in order
        a step that raises -> the stack stops every part registered so far, last first, and
            the error goes on to the caller (the CLI prints `error: ...` and exits 1)
        the normal end -> the same unwinding: parts stop in the reverse of their start
            order, so callers start them in the order whose reverse is the right stop order

A stop that fails is logged with the part's name and the others still stop, so the error
that ended the process stays the one reported; so does a stop that raises CancelledError
while nothing cancels the task (aiokafka's consumer.stop() can).

`watch(task, ...)`: a done-callback that logs the exception a background task died of (not
a cancellation), with context, so a failure nobody awaits is seen when it happens instead of
as "Task exception was never retrieved" at garbage collection, or never.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

Step = Callable[[], Awaitable[object]]


async def start_part(stack: contextlib.AsyncExitStack, name: str, start: Step, stop: Step,
                     *, logger: logging.Logger = log) -> None:
    """Register `stop` on `stack`, then await `start()` (see the module docstring)."""
    push_stop(stack, name, stop, logger=logger)
    await start()


def push_stop(stack: contextlib.AsyncExitStack, name: str, stop: Step, *,
              logger: logging.Logger = log) -> None:
    """Run `stop()` when `stack` unwinds; its failure is logged, not raised."""
    stack.push_async_callback(_stop, name, stop, logger)


async def _stop(name: str, stop: Step, logger: logging.Logger) -> None:
    try:
        await stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this task is being cancelled: that goes on
        # A cancellation nobody asked for: aiokafka's fetcher.close() cancels its pending
        # fetches and awaits them bare, so a fetch cancelled in its retry backoff (the broker
        # gone) makes consumer.stop() raise CancelledError (aio-libs/aiokafka#647, open).
        # Passed on, it would replace the error that ended the process: the task would end
        # as cancelled, and the CLI would print no `error: ...`.
        logger.warning("stopping %s ended in a stray cancellation; stopping the rest", name)
    except Exception:
        logger.exception("stopping %s failed; stopping the rest", name)


def watch(task: asyncio.Task[T], *, logger: logging.Logger, what: str,
          context: Mapping[str, Any] | None = None) -> asyncio.Task[T]:
    """Log `task`'s exception (error level, with traceback and `context` as log fields) when
    it ends with one; a cancelled task is not an error. Returns `task`."""
    extra = dict(context or {})

    def done(finished: asyncio.Task[T]) -> None:
        if finished.cancelled():
            return
        exc = finished.exception()
        if exc is not None:
            logger.error("%s failed: %r", what, exc, exc_info=exc, extra=extra)

    task.add_done_callback(done)
    return task


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait until it ended; what it died of was logged by `watch`."""
    if task is None:
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
