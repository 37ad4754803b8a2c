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
while nothing cancels the task (aiokafka's consumer.stop() can). A stop gets STOP_TIMEOUT_S
(the worker's drain, bounded by VF_DRAIN_SECONDS itself, gets none): aiokafka's
producer.stop() flushes what it holds and, with the broker gone, retries that without end, so
a SIGTERM during an outage never ended the process. Left unfinished, the part is logged; what
a producer still held was not committed against, so its requests go to the next owner.

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

# Each part's stop, at most. Within the worker pod's grace (60 s) after a 30-s drain for the
# one part a broker outage holds up (the producer); a healthy stop takes milliseconds.
STOP_TIMEOUT_S = 10.0


async def start_part(stack: contextlib.AsyncExitStack, name: str, start: Step, stop: Step,
                     *, logger: logging.Logger = log) -> None:
    """Register `stop` on `stack`, then await `start()` (see the module docstring)."""
    push_stop(stack, name, stop, logger=logger)
    await start()


def push_stop(stack: contextlib.AsyncExitStack, name: str, stop: Step, *,
              logger: logging.Logger = log, timeout_s: float | None = STOP_TIMEOUT_S) -> None:
    """Run `stop()` when `stack` unwinds, for at most `timeout_s` (None: no bound, for a stop
    with a bound of its own); its failure or overrun is logged, not raised."""
    stack.push_async_callback(_stop, name, stop, logger, timeout_s)


async def _stop(name: str, stop: Step, logger: logging.Logger,
                timeout_s: float | None) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await stop()
    except TimeoutError:
        logger.warning("stopping %s took over %g s and is left unfinished (as a Kafka client "
                       "is when its broker does not answer: nothing it still held had its "
                       "offset committed, so the partitions' next owner answers it); "
                       "stopping the rest", name, timeout_s)
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
