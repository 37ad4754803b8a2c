"""The worker's fleet status carries its own counts (consumers/worker/fleet.py): profile
cache lookups and failed results by error code since it started, from WorkerMetrics."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from consumers.metrics import WorkerMetrics
from consumers.worker.fleet import StatusReporter
from topics.fleet import ProfileCounts
from topics.specs import topic_names


class _Idle:
    """A consumer with nothing assigned, a batcher with nothing queued."""

    def assignment(self) -> set[Any]:
        return set()

    def partitions_for_topic(self, topic: str) -> None:
        return None

    def qsize(self, lane: str) -> int:
        return 0


def reporter(metrics: WorkerMetrics | None) -> StatusReporter:
    idle: Any = _Idle()
    return StatusReporter(worker_id="w-1", producer=None, consumer=idle, names=topic_names(),
                          checkpoint=idle, batcher=idle, slots={"batch": 1},
                          interval_ms=500, metrics=metrics)


def test_the_status_counts_profile_lookups_and_errors_by_code() -> None:
    metrics = WorkerMetrics()
    for result in ("hit", "hit", "hit", "store", "miss"):
        metrics.on_profile(result)
    metrics.on_result("succeeded", None)
    metrics.on_result("failed", "engine_error")
    metrics.on_result("failed", "engine_error")
    metrics.on_result("rejected", "text_too_long")
    metrics.on_result("failed", "not_a_code")  # outside the closed set: not in the status
    status = asyncio.run(reporter(metrics).snapshot())
    assert status.profiles == ProfileCounts(hit=3, store=1, miss=1)
    assert status.errors == {"engine_error": 2, "text_too_long": 1}


def test_the_counts_grow_between_statuses() -> None:
    metrics = WorkerMetrics()
    sender = reporter(metrics)
    metrics.on_profile("miss")
    first = asyncio.run(sender.snapshot())
    metrics.on_profile("hit")
    metrics.on_result("cancelled", "cancelled")
    second = asyncio.run(sender.snapshot())
    assert first.profiles == ProfileCounts(miss=1) and first.errors == {}
    assert second.profiles == ProfileCounts(hit=1, miss=1) and second.errors == {"cancelled": 1}


def test_without_metrics_no_counts_are_sent() -> None:
    status = asyncio.run(reporter(None).snapshot())
    assert status.profiles is None and status.errors == {}


async def test_the_status_loop_ends_on_a_cancel_a_publish_swallowed() -> None:
    """Python 3.11's wait_for can swallow a cancel that lands as its inner call completes;
    the drain waits for this loop, so the loop must end on the next turn regardless."""
    r = reporter(None)
    published = asyncio.Event()

    async def topics() -> set[str]:
        return {topic_names().fleet}

    async def swallowing_publish() -> None:
        published.set()
        with contextlib.suppress(asyncio.CancelledError):  # the race: the cancel is lost
            await asyncio.sleep(10)

    r._consumer.topics = topics
    r.publish = swallowing_publish  # type: ignore[method-assign]
    task = asyncio.create_task(r.run())
    await published.wait()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2)
    assert task in done and task.cancelled()
